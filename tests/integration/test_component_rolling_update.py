"""Rolling updates of an inference component, boto3 against `mme serve`.

UpdateInferenceComponent with a new Specification and a DeploymentConfig replaces the copies
in batches (new copies ready before old ones drain), each batch baked on the emulated clock
(``--clock-scale 60``: a minute a second), with no failed call; an AutoRollbackConfiguration
alarm in ALARM rolls it back to the old model. Each copy is a real embedded Triton serving a
one-line scale model ("double" the old model, "triple" the new one). One emulator for the
module; each test has its own endpoint, component and alarm, so the tests run in any order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import shared_runtime_client
from tests.component_support import (
    RESOURCES,
    ROLE,
    CallStream,
    ComponentServer,
    component_exists,
    deploy_component,
    serving,
)
from tests.prometheus_support import get_json, scrape
from tests.support import output_of, scale_request, wait_for, wait_until

SCALE = 60.0  # emulated seconds per real second
OLD, NEW = [2.0, 4.0, 6.0, 8.0], [3.0, 6.0, 9.0, 12.0]  # "double" and "triple" of [1, 2, 3, 4]


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentServer]:
    with serving(tmp_path_factory.mktemp("rolling"), clock_scale=SCALE) as module:
        yield module


@pytest.fixture(autouse=True)
def _components_deleted(module: ComponentServer) -> Iterator[None]:
    """A test's components are deleted after it: their copies' Tritons do not load the machine
    (or a restart) for the tests that follow."""
    yield
    module.delete_created()


def _component(module: ComponentServer, name: str, copies: int) -> None:
    """An endpoint ``name`` with component ``name`` of the old model, its copies serving."""
    module.created.append(name)
    deploy_component(module.client("sagemaker"), name, name, "double", copies)
    wait_until(lambda: _call(module, name) == OLD, 60, f"component {name} answers")


def _describe(module: ComponentServer, name: str) -> dict[str, Any]:
    return module.client("sagemaker").describe_inference_component(
        InferenceComponentName=name)


def _answered_once_in_service(module: ComponentServer, name: str, stream: CallStream,
                              timeout: float, what: str) -> int:
    """Waits for component ``name`` InService again (``what`` done), then for ten more answers
    of ``stream``: returns how many it had answered before them."""
    wait_until(lambda: _describe(module, name)["InferenceComponentStatus"] == "InService",
               timeout, f"{what} done")
    seen = len(stream.answers)
    wait_until(lambda: len(stream.answers) >= seen + 10, 30, f"calls after {what}")
    return seen


def _call(module: ComponentServer, name: str) -> list[float] | None:
    try:
        answer = shared_runtime_client(module.server.url).invoke_endpoint(
            EndpointName=name, InferenceComponentName=name, ContentType="application/json",
            Body=scale_request([1, 2, 3, 4]))
    except ClientError:
        return None
    return output_of(answer["Body"].read()).tolist()


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
GREEN = re.compile(r"copy-\d+-green\d+")


def _copy_ids(module: ComponentServer, name: str) -> list[str]:
    """The ids of a component's copies on the live page (a copy not started yet has none)."""
    state = get_json(f"{module.server.url}/_emulator/page/state")
    component = state["Endpoints"][name]["InferenceComponents"][name]
    return [c["CopyId"] for c in component["Copies"] if c["CopyId"]]


def _prometheus_copy_ids(module: ComponentServer, name: str) -> set[str]:
    _types, samples = scrape(module.server.url)
    return {dict(labels)["copy_id"] for _, labels in samples
            if dict(labels).get("inference_component_name") == name and "copy_id" in dict(labels)}


def test_a_rolling_update_replaces_the_copies_in_batches_and_fails_no_call(
        module: ComponentServer) -> None:
    """2 copies, one per batch, each batch baked 60 emulated seconds: Updating (the old
    Specification, the DeploymentConfig as LastDeploymentConfig) while answers move from the
    old model to the new; InService on the new Specification; no call of the stream fails."""
    _component(module, "roll", copies=2)
    sm = module.client("sagemaker")
    config = _rolling(batch=1, wait_s=60)
    stream = CallStream(module.server.url, "roll")
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
        # The new copies carry the update's generation in their names (the page, Prometheus),
        # never read as the old copies they replace.
        named = wait_for(lambda: [c for c in _copy_ids(module, "roll") if GREEN.fullmatch(c)],
                         60, "a new copy on the page")
        wait_for(lambda: named[0] in _prometheus_copy_ids(module, "roll"), 60,
                 f"{named[0]}'s utilization in Prometheus")
        assert _describe(module, "roll")["InferenceComponentStatus"] == "Updating"
        seen = _answered_once_in_service(module, "roll", stream, 120, "the update")
    finally:
        stream.stop()
    assert stream.failures == []
    first_new = stream.answers.index(NEW)
    assert set(map(tuple, stream.answers[:first_new])) == {tuple(OLD)}
    assert set(map(tuple, stream.answers[seen:])) == {tuple(NEW)}  # old copies are gone
    done = _describe(module, "roll")
    # Once the update is over the new copies keep their names: they are the component's now.
    copies = _copy_ids(module, "roll")
    assert len(copies) == 2 and all(GREEN.fullmatch(c) for c in copies), copies
    assert done["Specification"]["ModelName"] == "triple"
    assert done["RuntimeConfig"]["CurrentCopyCount"] == 2
    assert done.get("FailureReason") is None
    assert done["LastDeploymentConfig"] == config


def test_an_alarm_during_the_update_rolls_it_back_to_the_old_model(module: ComponentServer) -> None:
    """The first batch's bake is long (an emulated hour); its alarm goes to ALARM: the new copy
    is replaced by an old one again (RollbackMaximumBatchSize 1), InService on the old
    Specification with the alarm named in FailureReason; no call fails."""
    _component(module, "back", copies=2)
    sm, cw = module.client("sagemaker"), module.client("cloudwatch")
    cw.put_metric_alarm(AlarmName="back-guard", Namespace="CI/Rolling", MetricName="Nothing",
                        Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=0,
                        ComparisonOperator="GreaterThanThreshold", TreatMissingData="ignore")
    stream = CallStream(module.server.url, "back")
    try:
        sm.update_inference_component(
            InferenceComponentName="back", Specification=NEW_SPEC,
            DeploymentConfig=_rolling(batch=1, wait_s=3600, alarms=("back-guard",),
                                      rollback_batch=1))
        wait_until(lambda: NEW in stream.answers, 60, "the first new copy answering")
        cw.set_alarm_state(AlarmName="back-guard", StateValue="ALARM",
                           StateReason="the test says the new model is bad")
        seen = _answered_once_in_service(module, "back", stream, 60, "the rollback")
    finally:
        stream.stop()
    assert stream.failures == []
    assert set(map(tuple, stream.answers[seen:])) == {tuple(OLD)}  # the new copy is gone
    done = _describe(module, "back")
    assert done["Specification"]["ModelName"] == "double"
    assert done["RuntimeConfig"]["CurrentCopyCount"] == 2
    assert '"back-guard"' in done["FailureReason"]
    assert "rolled back" in done["FailureReason"]


def test_what_a_rolling_update_refuses(module: ComponentServer) -> None:
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


def test_an_update_interrupted_by_a_restart_resumes_at_its_batch(module: ComponentServer) -> None:
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


def test_a_component_deleted_during_its_update_leaves_no_copy(module: ComponentServer) -> None:
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
    wait_until(lambda: not component_exists(sm, "dropped"), 60, "the component gone")
    wait_until(lambda: not module.tritons("dropped"), 60, "its copies' Tritons stopped")


def test_a_new_model_that_cannot_start_rolls_the_update_back(module: ComponentServer) -> None:
    """The new Model's artifact does not exist: its copy never starts, the old copy keeps
    answering every call, and the update ends InService on the old model, saying why."""
    _component(module, "broken", copies=1)
    sm = module.client("sagemaker")
    sm.create_model(ModelName="broken-model", ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": "triton", "ModelDataUrl": module.models["triple"] + ".missing"})
    stream = CallStream(module.server.url, "broken")
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
