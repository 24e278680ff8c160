"""Rolling updates of an inference component (issue #30 item 7), boto3 against `mme serve`.

UpdateInferenceComponent with a new Specification and a DeploymentConfig replaces the copies
in batches (new copies ready before old ones drain), each batch baked on the emulated clock
(``--clock-scale 60``: a minute a second), with no failed call; an AutoRollbackConfiguration
alarm in ALARM rolls it back to the old model. Each copy is a real embedded Triton serving a
one-line scale model ("double" the old model, "triple" the new one). One emulator for the
module; each test has its own endpoint, component and alarm, so the tests run in any order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests.client_support import DUMMY_CREDENTIALS, runtime_client
from tests.multi_container_support import triton_tarball
from tests.support import output_of, scale_request, wait_until

ROLE = "arn:aws:iam::123456789012:role/sagemaker"
RESOURCES = {"NumberOfCpuCoresRequired": 0.5, "MinMemoryRequiredInMb": 512}
SCALE = 60.0  # emulated seconds per real second
OLD, NEW = [2.0, 4.0, 6.0, 8.0], [3.0, 6.0, 9.0, 12.0]  # "double" and "triple" of [1, 2, 3, 4]


class Module:
    def __init__(self, root: Path) -> None:
        store = root / "store"
        store.mkdir()
        self.models = {name: triton_tarball(root, store, name, scale).as_uri()
                       for name, scale in (("double", 2.0), ("triple", 3.0))}
        self.cache = root / "cache"
        self.server = self._start()
        self.created: list[str] = []  # components of the test running

    def _start(self) -> EmulatorServer:
        return EmulatorServer(Settings.from_env(
            env={}, cache_dir=self.cache, port=0, clock_scale=SCALE)).start()

    def restart(self) -> None:
        self.server.stop()
        self.server = self._start()

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.server.url, **DUMMY_CREDENTIALS,
                            config=Config(retries={"max_attempts": 1}))

    def tritons(self, endpoint: str = "") -> list[psutil.Process]:
        """Triton processes of this server's copies (of one endpoint's, if named)."""
        where = self.cache / "endpoints" / endpoint if endpoint else self.cache
        found = []
        for process in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(process.info["cmdline"] or ())
            if "tritonserver" in cmdline and f"{where}/" in cmdline:
                found.append(process)
        return found


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    module = Module(tmp_path_factory.mktemp("rolling"))
    sm = module.client("sagemaker")
    for name, url in module.models.items():
        sm.create_model(ModelName=name, ExecutionRoleArn=ROLE,
                        PrimaryContainer={"Image": "triton", "ModelDataUrl": url})
    yield module
    module.server.stop()
    assert not module.tritons(), "a copy's Triton outlived the server"


@pytest.fixture(autouse=True)
def _components_deleted(module: Module) -> Iterator[None]:
    """A test's components are deleted after it: their copies' Tritons do not load the machine
    (or a restart) for the tests that follow."""
    yield
    sm = module.client("sagemaker")
    for name in module.created:
        try:
            sm.delete_inference_component(InferenceComponentName=name)
        except ClientError:
            pass  # deleted by the test itself
    for name in module.created:  # gone, its copies stopped, before anything else goes on
        wait_until(lambda name=name: not _exists(module, name), 60, f"component {name} deleted")
    module.created.clear()


def _component(module: Module, name: str, copies: int) -> None:
    """An endpoint ``name`` with component ``name`` of the old model, its copies serving."""
    sm = module.client("sagemaker")
    module.created.append(name)
    sm.create_endpoint_config(EndpointConfigName=name, ExecutionRoleArn=ROLE, ProductionVariants=[{
        "VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge", "InitialInstanceCount": 1}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    wait_until(lambda: sm.describe_endpoint(EndpointName=name)["EndpointStatus"] == "InService",
               30, f"endpoint {name} InService")
    sm.create_inference_component(
        InferenceComponentName=name, EndpointName=name, VariantName="AllTraffic",
        Specification={"ModelName": "double", "ComputeResourceRequirements": RESOURCES},
        RuntimeConfig={"CopyCount": copies})
    wait_until(lambda: _describe(module, name)["InferenceComponentStatus"] == "InService", 60,
               f"component {name} InService")
    wait_until(lambda: _call(module, name) == OLD, 60, f"component {name} answers")


def _exists(module: Module, name: str) -> bool:
    try:
        _describe(module, name)
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ValidationException":
            return False
        raise
    return True


def _describe(module: Module, name: str) -> dict[str, Any]:
    return module.client("sagemaker").describe_inference_component(
        InferenceComponentName=name)


def _call(module: Module, name: str) -> list[float] | None:
    try:
        answer = runtime_client(module.server.url).invoke_endpoint(
            EndpointName=name, InferenceComponentName=name, ContentType="application/json",
            Body=scale_request([1, 2, 3, 4]))
    except ClientError:
        return None
    return output_of(answer["Body"].read()).tolist()


class Stream:
    """Calls one after the other, each answer (or failure) kept in order."""

    def __init__(self, module: Module, name: str) -> None:
        self.answers: list[list[float]] = []
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._client = runtime_client(module.server.url)
        self._name = name
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                answer = self._client.invoke_endpoint(
                    EndpointName=self._name, InferenceComponentName=self._name,
                    ContentType="application/json", Body=scale_request([1, 2, 3, 4]))
                self.answers.append(output_of(answer["Body"].read()).tolist())
            except BaseException as exc:  # noqa: BLE001 - every failure is the test's finding
                self.failures.append(exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _rolling(batch: int, wait_s: int, alarms: tuple[str, ...] = (),
             rollback_batch: int | None = None) -> dict[str, Any]:
    policy: dict[str, Any] = {"MaximumBatchSize": {"Type": "COPY_COUNT", "Value": batch},
                              "WaitIntervalInSeconds": wait_s}
    if rollback_batch is not None:
        policy["RollbackMaximumBatchSize"] = {"Type": "COPY_COUNT", "Value": rollback_batch}
    config: dict[str, Any] = {"RollingUpdatePolicy": policy}
    if alarms:
        config["AutoRollbackConfiguration"] = {"Alarms": [{"AlarmName": a} for a in alarms]}
    return config


NEW_SPEC = {"ModelName": "triple", "ComputeResourceRequirements": RESOURCES}


def test_a_rolling_update_replaces_the_copies_in_batches_and_fails_no_call(
        module: Module) -> None:
    """2 copies, one per batch, each batch baked 60 emulated seconds: Updating (the old
    Specification, the DeploymentConfig as LastDeploymentConfig) while answers move from the
    old model to the new; InService on the new Specification; no call of the stream fails."""
    _component(module, "roll", copies=2)
    sm = module.client("sagemaker")
    config = _rolling(batch=1, wait_s=60)
    stream = Stream(module, "roll")
    try:
        wait_until(lambda: len(stream.answers) >= 5, 30, "calls answered before the update")
        sm.update_inference_component(InferenceComponentName="roll", Specification=NEW_SPEC,
                                      DeploymentConfig=config)
        during = _describe(module, "roll")
        assert during["InferenceComponentStatus"] == "Updating"
        assert during["Specification"]["ModelName"] == "double"  # [U] until the update ends
        assert during["LastDeploymentConfig"] == config
        # Batch 1 of 2: one old copy, one new, both answering.
        wait_until(lambda: NEW in stream.answers[-20:] and OLD in stream.answers[-20:], 60,
                   "both models answering during the first batch's bake")
        assert _describe(module, "roll")["InferenceComponentStatus"] == "Updating"
        wait_until(lambda: _describe(module, "roll")["InferenceComponentStatus"] == "InService",
                   120, "the update done")
        seen = len(stream.answers)
        wait_until(lambda: len(stream.answers) >= seen + 10, 30, "calls after the update")
    finally:
        stream.stop()
    assert stream.failures == []
    first_new = stream.answers.index(NEW)
    assert set(map(tuple, stream.answers[:first_new])) == {tuple(OLD)}
    assert set(map(tuple, stream.answers[seen:])) == {tuple(NEW)}  # old copies are gone
    done = _describe(module, "roll")
    assert done["Specification"]["ModelName"] == "triple"
    assert done["RuntimeConfig"]["CurrentCopyCount"] == 2
    assert done.get("FailureReason") is None
    assert done["LastDeploymentConfig"] == config


def test_an_alarm_during_the_update_rolls_it_back_to_the_old_model(module: Module) -> None:
    """The first batch's bake is long (an emulated hour); its alarm goes to ALARM: the new copy
    is replaced by an old one again (RollbackMaximumBatchSize 1), InService on the old
    Specification with the alarm named in FailureReason; no call fails."""
    _component(module, "back", copies=2)
    sm, cw = module.client("sagemaker"), module.client("cloudwatch")
    cw.put_metric_alarm(AlarmName="back-guard", Namespace="CI/Rolling", MetricName="Nothing",
                        Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=0,
                        ComparisonOperator="GreaterThanThreshold", TreatMissingData="ignore")
    stream = Stream(module, "back")
    try:
        sm.update_inference_component(
            InferenceComponentName="back", Specification=NEW_SPEC,
            DeploymentConfig=_rolling(batch=1, wait_s=3600, alarms=("back-guard",),
                                      rollback_batch=1))
        wait_until(lambda: NEW in stream.answers, 60, "the first new copy answering")
        cw.set_alarm_state(AlarmName="back-guard", StateValue="ALARM",
                           StateReason="the test says the new model is bad")
        wait_until(lambda: _describe(module, "back")["InferenceComponentStatus"] == "InService",
                   60, "the rollback done")
        seen = len(stream.answers)
        wait_until(lambda: len(stream.answers) >= seen + 10, 30, "calls after the rollback")
    finally:
        stream.stop()
    assert stream.failures == []
    assert set(map(tuple, stream.answers[seen:])) == {tuple(OLD)}  # the new copy is gone
    done = _describe(module, "back")
    assert done["Specification"]["ModelName"] == "double"
    assert done["RuntimeConfig"]["CurrentCopyCount"] == 2
    assert '"back-guard"' in done["FailureReason"]
    assert "rolled back" in done["FailureReason"]


def test_what_a_rolling_update_refuses(module: Module) -> None:
    """A batch over half the copies, an alarm that does not exist, an update while one runs:
    ValidationException saying what to fix, and the component unchanged."""
    _component(module, "refused", copies=2)
    sm = module.client("sagemaker")
    with pytest.raises(ClientError) as batch:
        sm.update_inference_component(InferenceComponentName="refused", Specification=NEW_SPEC,
                                      DeploymentConfig=_rolling(batch=2, wait_s=0))
    assert batch.value.response["Error"]["Code"] == "ValidationException"
    assert "between 5% and 50% of the copy count" in batch.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as alarm:
        sm.update_inference_component(
            InferenceComponentName="refused", Specification=NEW_SPEC,
            DeploymentConfig=_rolling(batch=1, wait_s=0, alarms=("no-such-alarm",)))
    assert "no-such-alarm" in alarm.value.response["Error"]["Message"]
    described = _describe(module, "refused")
    assert described["InferenceComponentStatus"] == "InService"
    assert described["Specification"]["ModelName"] == "double"
    assert "LastDeploymentConfig" not in described


def test_an_update_interrupted_by_a_restart_resumes_at_its_batch(module: Module) -> None:
    """A restart during the first batch's (long) bake: the component is still Updating and
    both models answer again (one old copy, one new: the batch it was in), and its alarm still
    rolls it back to the old model."""
    _component(module, "resumed", copies=2)
    sm, cw = module.client("sagemaker"), module.client("cloudwatch")
    cw.put_metric_alarm(AlarmName="resumed-guard", Namespace="CI/Rolling", MetricName="Nothing",
                        Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=0,
                        ComparisonOperator="GreaterThanThreshold", TreatMissingData="ignore")
    sm.update_inference_component(
        InferenceComponentName="resumed", Specification=NEW_SPEC,
        DeploymentConfig=_rolling(batch=1, wait_s=3600, alarms=("resumed-guard",)))
    wait_until(lambda: _call(module, "resumed") == NEW, 60, "the first new copy answering")
    module.restart()
    sm, cw = module.client("sagemaker"), module.client("cloudwatch")
    assert _describe(module, "resumed")["InferenceComponentStatus"] == "Updating"
    answers: list[list[float] | None] = []
    wait_until(lambda: answers.append(_call(module, "resumed")) or (
        NEW in answers and OLD in answers), 60, "both models answering after the restart")
    assert _describe(module, "resumed")["InferenceComponentStatus"] == "Updating"
    cw.set_alarm_state(AlarmName="resumed-guard", StateValue="ALARM", StateReason="test")
    wait_until(lambda: _describe(module, "resumed")["InferenceComponentStatus"] == "InService",
               60, "the rollback done")
    done = _describe(module, "resumed")
    assert done["Specification"]["ModelName"] == "double"
    assert '"resumed-guard"' in done["FailureReason"]
    assert {tuple(_call(module, "resumed") or ()) for _ in range(10)} == {tuple(OLD)}


def test_a_component_deleted_during_its_update_leaves_no_copy(module: Module) -> None:
    """DeleteInferenceComponent in the middle of a rolling update: the update stops, the old
    and the new copies drain and stop, the component is gone."""
    _component(module, "dropped", copies=2)
    sm = module.client("sagemaker")
    sm.update_inference_component(InferenceComponentName="dropped", Specification=NEW_SPEC,
                                  DeploymentConfig=_rolling(batch=1, wait_s=3600))
    wait_until(lambda: _call(module, "dropped") == NEW, 60, "the first new copy answering")
    wait_until(lambda: len(module.tritons("dropped")) == 2, 60,
               "one old copy and one new in the first batch's bake (the other old one stopped)")
    sm.delete_inference_component(InferenceComponentName="dropped")
    wait_until(lambda: not _exists(module, "dropped"), 60, "the component gone")
    wait_until(lambda: not module.tritons("dropped"), 60, "its copies' Tritons stopped")


def test_a_new_model_that_cannot_start_rolls_the_update_back(module: Module) -> None:
    """The new Model's artifact does not exist: its copy never starts, the old copy keeps
    answering every call, and the update ends InService on the old model, saying why."""
    _component(module, "broken", copies=1)
    sm = module.client("sagemaker")
    sm.create_model(ModelName="broken-model", ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": "triton", "ModelDataUrl": module.models["triple"] + ".missing"})
    stream = Stream(module, "broken")
    try:
        sm.update_inference_component(
            InferenceComponentName="broken", DeploymentConfig=_rolling(batch=1, wait_s=60),
            Specification={**NEW_SPEC, "ModelName": "broken-model"})
        wait_until(lambda: _describe(module, "broken")["InferenceComponentStatus"] ==
                   "InService", 60, "the rollback done")
        seen = len(stream.answers)
        wait_until(lambda: len(stream.answers) >= seen + 5, 30, "calls after the rollback")
    finally:
        stream.stop()
    assert stream.failures == []
    assert set(map(tuple, stream.answers)) == {tuple(OLD)}
    done = _describe(module, "broken")
    assert done["Specification"]["ModelName"] == "double"
    assert "a copy of the new specification failed to start" in done["FailureReason"]
