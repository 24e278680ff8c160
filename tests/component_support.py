"""What the inference-component integration tests share: one `mme serve` for a test module
(with its trivial scale-model tarballs), and the deployment of an endpoint with one component.

The waits go through ``tests.support.wait_until`` (conditions, never sleeps).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests.client_support import runtime_client, shared_client
from tests.multi_container_support import triton_tarball
from tests.support import SUITE_ENV, output_of, scale_request, wait_until

ROLE = "arn:aws:iam::123456789012:role/sagemaker"
RESOURCES = {"NumberOfCpuCoresRequired": 0.5, "MinMemoryRequiredInMb": 512}
# One-line Triton scale models (X -> X * scale): a copy of one starts in about a second.
DOUBLE_AND_TRIPLE = {"double": 2.0, "triple": 3.0}
# Between a call stream's calls: dozens a second, without taking most of a core for it.
PAUSE_S = 0.02


class ComponentServer:
    """A module's emulator (in this process, on a free port) over its own cache, and the model
    tarballs ``models`` (name -> file URL) its tests deploy."""

    def __init__(self, root: Path, scales: dict[str, float] | None = None,
                 clock_scale: float | None = None) -> None:
        self.root = root
        store = root / "store"
        store.mkdir(exist_ok=True)
        self.models = {name: triton_tarball(root, store, name, scale).as_uri()
                       for name, scale in (DOUBLE_AND_TRIPLE if scales is None
                                           else scales).items()}
        self.cache = root / "cache"
        self.clock_scale = clock_scale
        self.server = self.start()
        self.created: list[str] = []  # components of the test running, for delete_created()

    def start(self) -> EmulatorServer:
        return EmulatorServer(Settings.from_env(env=SUITE_ENV, cache_dir=self.cache, port=0,
                                                clock_scale=self.clock_scale)).start()

    def restart(self) -> None:
        self.server.stop()
        self.server = self.start()

    def stop(self) -> None:
        self.server.stop()

    def client(self, service: str, **config: Any) -> Any:
        """A boto3 client on this emulator that does not retry (a failure shows at once); one
        per service and configuration, shared (``shared_client``): the waits poll with it."""
        return shared_client(service, self.server.url, **config)

    def create_models(self) -> None:
        """A SageMaker Model of each tarball, named as it."""
        sm = self.client("sagemaker")
        for name, url in self.models.items():
            sm.create_model(ModelName=name, ExecutionRoleArn=ROLE,
                            PrimaryContainer={"Image": "triton", "ModelDataUrl": url})

    def delete_created(self) -> None:
        """Deletes the components in ``created`` and waits until they are gone (their copies'
        Tritons stopped), so they weigh on no test that follows; one the test deleted itself
        is passed over."""
        sm = self.client("sagemaker")
        for name in self.created:
            with contextlib.suppress(ClientError):  # deleted by the test itself
                sm.delete_inference_component(InferenceComponentName=name)
        for name in self.created:  # each gone, its copies stopped, before the next test
            wait_until(functools.partial(component_gone, sm, name), 60,
                       f"component {name} deleted")
        self.created.clear()

    def tritons(self, endpoint: str = "") -> list[psutil.Process]:
        """Triton processes serving from this server's cache (its copies), or from one
        endpoint's part of it."""
        where = str(self.cache / "endpoints" / endpoint) if endpoint else str(self.cache)
        found = []
        for process in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(process.info["cmdline"] or ())
            if "tritonserver" in cmdline and f"{where}/" in cmdline:
                found.append(process)
        return found


@contextmanager
def serving(root: Path, scales: dict[str, float] | None = None,
            clock_scale: float | None = None) -> Iterator[ComponentServer]:
    """A module's server with a Model of each tarball; stopped at the end, when none of its
    copies' Tritons may be left."""
    server = ComponentServer(root, scales, clock_scale)
    try:
        server.create_models()
        yield server
    finally:
        server.stop()
    assert not server.tritons(), "a copy's Triton outlived the server"


def component_exists(sm: Any, name: str) -> bool:
    try:
        sm.describe_inference_component(InferenceComponentName=name)
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ValidationException":
            return False
        raise
    return True


def component_gone(sm: Any, name: str) -> bool:
    return not component_exists(sm, name)


def create_component_endpoint(sm: Any, name: str, instance_type: str = "ml.m5.xlarge",
                              **variant: Any) -> None:
    """Endpoint config and endpoint ``name`` for components (its variant names no model; one
    instance), InService."""
    sm.create_endpoint_config(EndpointConfigName=name, ExecutionRoleArn=ROLE, ProductionVariants=[{
        "VariantName": "AllTraffic", "InstanceType": instance_type, "InitialInstanceCount": 1,
        **variant}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    wait_until(lambda: sm.describe_endpoint(EndpointName=name)["EndpointStatus"] == "InService",
               30, f"endpoint {name} InService")


def create_component(sm: Any, name: str, endpoint: str, copies: int = 1,
                     timeout: float = 60, **specification: Any) -> None:
    """Component ``name`` on ``endpoint``'s AllTraffic with ``specification`` (ModelName or
    Container, ComputeResourceRequirements, ...), InService (its copies started)."""
    sm.create_inference_component(
        InferenceComponentName=name, EndpointName=endpoint, VariantName="AllTraffic",
        Specification=specification, RuntimeConfig={"CopyCount": copies})
    wait_until(lambda: sm.describe_inference_component(InferenceComponentName=name)[
        "InferenceComponentStatus"] == "InService", timeout, f"component {name} InService")


def deploy_component(sm: Any, endpoint: str, component: str, model: str, copies: int = 1,
                     resources: dict[str, Any] | None = None, **variant: Any) -> None:
    """Endpoint ``endpoint`` (one ml.m5.xlarge unless ``variant`` says otherwise) with
    component ``component`` of Model ``model``, both InService."""
    create_component_endpoint(sm, endpoint, **variant)
    create_component(sm, component, endpoint, copies, ModelName=model,
                     ComputeResourceRequirements=RESOURCES if resources is None else resources)


def put_step_scale_out(asg: Any, key: dict[str, str], policy: str, aggregation: str) -> str:
    """A StepScaling policy of ``key`` that adds one unit each time its alarm fires (the way
    out of zero, for components and asynchronous endpoints alike); its ARN."""
    return str(asg.put_scaling_policy(
        **key, PolicyName=policy, PolicyType="StepScaling",
        StepScalingPolicyConfiguration={
            "AdjustmentType": "ChangeInCapacity", "MetricAggregationType": aggregation,
            "Cooldown": 60,
            "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]},
    )["PolicyARN"])


def put_scale_from_zero(asg: Any, cw: Any, key: dict[str, str], component: str, policy: str,
                        alarm: str, **alarm_options: Any) -> None:
    """SageMaker's way out of zero copies: a StepScaling policy of ``key`` that adds one copy,
    run by alarm ``alarm`` on the component's NoCapacityInvocationFailures."""
    step_arn = put_step_scale_out(asg, key, policy, "Maximum")
    cw.put_metric_alarm(
        AlarmName=alarm, AlarmActions=[step_arn],
        MetricName="NoCapacityInvocationFailures", Namespace="AWS/SageMaker",
        Statistic="Maximum", Dimensions=[{"Name": "InferenceComponentName", "Value": component}],
        Period=30, EvaluationPeriods=1, DatapointsToAlarm=1, Threshold=1,
        ComparisonOperator="GreaterThanOrEqualToThreshold", **alarm_options)


class CallStream:
    """Calls to component ``name`` of endpoint ``name``, ``PAUSE_S`` apart in a thread until
    ``stop()``: each answer's values and the copy that gave it (X-Mme-Instance, emulator-only)
    kept in order, and every failure (an answer other than ``expected``, if given, is one)."""

    def __init__(self, url: str, name: str, expected: list[float] | None = None) -> None:
        self.answers: list[list[float]] = []
        self.copies: list[str] = []
        self.failures: list[BaseException] = []
        self._expected = expected
        self._stop = threading.Event()
        self._client = runtime_client(url)
        self._name = name
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                answer = self._client.invoke_endpoint(
                    EndpointName=self._name, InferenceComponentName=self._name,
                    ContentType="application/json", Body=scale_request([1, 2, 3, 4]))
                values = output_of(answer["Body"].read()).tolist()
                assert self._expected is None or values == self._expected, values
                self.answers.append(values)
                self.copies.append(answer["ResponseMetadata"]["HTTPHeaders"]["x-mme-instance"])
            except BaseException as exc:  # noqa: BLE001 - every failure is the test's finding
                self.failures.append(exc)
            self._stop.wait(PAUSE_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
