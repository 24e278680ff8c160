"""Inference components' copies serve calls, boto3 against `mme serve`.

Each copy is a real embedded Triton serving the component's model (a one-line scale model, so
a copy starts fast). One emulator for the module; each test has its own endpoint and names,
so the tests run in any order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psutil
import pytest
from botocore.exceptions import ClientError

from tests.client_support import shared_runtime_client
from tests.component_support import (
    RESOURCES,
    ComponentServer,
    create_component,
    create_component_endpoint,
    serving,
)
from tests.multi_container_support import TRITON_IMAGE
from tests.support import output_of, scale_request, wait_until


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentServer]:
    with serving(tmp_path_factory.mktemp("copies")) as module:
        yield module


def _endpoint(module: ComponentServer, name: str, **variant: Any) -> None:
    create_component_endpoint(module.client("sagemaker"), name, **variant)


def _component(module: ComponentServer, name: str, endpoint: str, model: str, copies: int,
               container: bool = False) -> None:
    """A component of a Model (or of its own Container), InService (its copies started)."""
    spec: dict[str, Any] = {"ModelName": model}
    if container:
        spec = {"Container": {"Image": TRITON_IMAGE, "ArtifactUrl": module.models[model]}}
    create_component(module.client("sagemaker"), name, endpoint, copies, **spec,
                     ComputeResourceRequirements=RESOURCES)


def _invoke(module: ComponentServer, endpoint: str,
            component: str) -> tuple[list[float], dict[str, str]]:
    answer = shared_runtime_client(module.server.url).invoke_endpoint(
        EndpointName=endpoint, InferenceComponentName=component,
        ContentType="application/json", Body=scale_request([1, 2, 3, 4]))
    headers = answer["ResponseMetadata"]["HTTPHeaders"]
    return output_of(answer["Body"].read()).tolist(), headers


def test_two_components_on_one_endpoint_each_answer_with_their_model(
        module: ComponentServer) -> None:
    """One names a Model, the other brings its own Container (Image and ArtifactUrl); each
    answers as soon as it is InService (Creating lasts until its copies are started)."""
    _endpoint(module, "two")
    _component(module, "two-double", "two", "double", copies=1)
    _component(module, "two-triple", "two", "triple", copies=1, container=True)
    values, headers = _invoke(module, "two", "two-double")
    assert values == [2, 4, 6, 8]
    assert headers["x-amzn-invoked-production-variant"] == "AllTraffic"
    assert headers["content-type"] == "application/json"
    assert _invoke(module, "two", "two-triple")[0] == [3, 6, 9, 12]


def test_a_copy_count_change_under_steady_calls_fails_none(module: ComponentServer) -> None:
    """1 -> 2 copies (the new one joins once ready: both then answer) -> 1 (the removed one
    drains first): no call of the stream fails."""
    _endpoint(module, "steady")
    _component(module, "steady-ic", "steady", "double", copies=1)
    sm = module.client("sagemaker")
    answered: list[str] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def stream() -> None:
        while not stop.is_set():
            try:
                values, headers = _invoke(module, "steady", "steady-ic")
                assert values == [2, 4, 6, 8]
                answered.append(headers["x-mme-instance"])
            except BaseException as exc:  # noqa: BLE001 - every failure is the test's finding
                failures.append(exc)

    caller = threading.Thread(target=stream)
    caller.start()
    try:
        wait_until(lambda: len(answered) >= 3, 30, "the stream answered")
        sm.update_inference_component_runtime_config(InferenceComponentName="steady-ic",
                                                     DesiredRuntimeConfig={"CopyCount": 2})
        wait_until(lambda: len(set(answered[-20:])) == 2, 60, "both copies answering")
        sm.update_inference_component_runtime_config(InferenceComponentName="steady-ic",
                                                     DesiredRuntimeConfig={"CopyCount": 1})
        wait_until(lambda: len(module.tritons("steady")) == 1, 60, "the removed copy stopped")
        calls = len(answered)
        wait_until(lambda: len(answered) > calls + 10, 30, "calls after the scale-in")
    finally:
        stop.set()
        caller.join()
    assert not failures, failures[:3]
    described = sm.describe_inference_component(InferenceComponentName="steady-ic")
    assert described["RuntimeConfig"]["CurrentCopyCount"] == 1


def test_zero_copies_fail_as_aws_and_count_no_capacity(module: ComponentServer) -> None:
    _endpoint(module, "zero")
    # Created with a copy (AWS refuses 0 at create), then scaled to zero.
    _component(module, "zero-ic", "zero", "double", copies=1)
    sm = module.client("sagemaker")
    sm.update_inference_component_runtime_config(InferenceComponentName="zero-ic",
                                                 DesiredRuntimeConfig={"CopyCount": 0})
    wait_until(lambda: not module.tritons("zero"), 60, "the copy stopped")
    with pytest.raises(ClientError) as raised:
        _invoke(module, "zero", "zero-ic")
    error = raised.value.response["Error"]
    assert error["Code"] == "ValidationError"
    assert "has no capacity to process this request" in error["Message"]
    cloudwatch = module.client("cloudwatch")
    now = datetime.now(timezone.utc)

    def failures_counted() -> bool:
        points = cloudwatch.get_metric_statistics(
            Namespace="AWS/SageMaker", MetricName="NoCapacityInvocationFailures",
            Dimensions=[{"Name": "InferenceComponentName", "Value": "zero-ic"}],
            StartTime=now - timedelta(minutes=5), EndTime=now + timedelta(minutes=5),
            Period=60, Statistics=["Sum"])["Datapoints"]
        return sum(p["Sum"] for p in points) == 1

    wait_until(failures_counted, 10, "NoCapacityInvocationFailures counted")


def test_served_calls_are_counted_per_component(module: ComponentServer) -> None:
    _endpoint(module, "counted")
    _component(module, "counted-ic", "counted", "triple", copies=1)
    for _ in range(3):
        _invoke(module, "counted", "counted-ic")
    cloudwatch = module.client("cloudwatch")
    now = datetime.now(timezone.utc)

    def total(metric: str) -> float:
        points = cloudwatch.get_metric_statistics(
            Namespace="AWS/SageMaker", MetricName=metric,
            Dimensions=[{"Name": "InferenceComponentName", "Value": "counted-ic"}],
            StartTime=now - timedelta(minutes=5), EndTime=now + timedelta(minutes=5),
            Period=60, Statistics=["Sum", "SampleCount"])["Datapoints"]
        return sum(p["Sum"] for p in points)

    wait_until(lambda: total("Invocations") == 3 and total("InvocationsPerCopy") == 3, 10,
               "Invocations and InvocationsPerCopy counted")
    assert total("ModelLatency") > 0 and total("Invocation5XXErrors") == 0


def test_deletes_leave_no_triton(module: ComponentServer) -> None:
    _endpoint(module, "gone")
    _component(module, "gone-a", "gone", "double", copies=2)
    _component(module, "gone-b", "gone", "triple", copies=1)
    assert _invoke(module, "gone", "gone-a")[0] == [2, 4, 6, 8]
    assert _invoke(module, "gone", "gone-b")[0] == [3, 6, 9, 12]
    def tritons() -> list[psutil.Process]:
        return module.tritons("gone")

    assert len(tritons()) == 3
    sm = module.client("sagemaker")
    sm.delete_inference_component(InferenceComponentName="gone-a")
    wait_until(lambda: len(tritons()) == 1, 30, "gone-a's two copies stopped")
    sm.delete_inference_component(InferenceComponentName="gone-b")
    wait_until(lambda: not sm.list_inference_components(
        EndpointNameEquals="gone")["InferenceComponents"], 30, "the components deleted")
    sm.delete_endpoint(EndpointName="gone")
    wait_until(lambda: not tritons(), 30, "no Triton of the endpoint left")


def test_copies_serve_again_after_a_restart_and_random_routing_spreads(
        module: ComponentServer) -> None:
    """A restart brings the copies back (calls meanwhile fail as in a cold start, with no
    capacity); RANDOM routing (the variant's RoutingConfig) reaches both copies."""
    _endpoint(module, "again", RoutingConfig={"RoutingStrategy": "RANDOM"})
    _component(module, "again-ic", "again", "triple", copies=2)
    module.restart()

    def served() -> bool:
        try:
            return _invoke(module, "again", "again-ic")[0] == [3, 6, 9, 12]
        except ClientError as exc:
            assert "has no capacity to process this request" in exc.response["Error"]["Message"]
            return False

    wait_until(served, 60, "the copies back after the restart")
    seen = set()
    for _ in range(40):
        # Any case of the name, as the control plane takes it.
        values, headers = _invoke(module, "again", "AGAIN-ic")
        assert values == [3, 6, 9, 12]
        seen.add(headers["x-mme-instance"])
        if len(seen) == 2:
            break
    assert len(seen) == 2, seen
