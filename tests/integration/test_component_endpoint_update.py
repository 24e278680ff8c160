"""UpdateEndpoint on an endpoint for inference components, boto3 against `mme serve`.

The endpoint moves to a new endpoint config (another InstanceType, more instances, another
RoutingConfig): Updating, then InService on it, its components' copies restarted on the new
instances with no call failed; a restart in the middle carries the update to its end; what is
refused. Each copy is a real embedded Triton serving a one-line scale model. One emulator for
the module; each test has its own names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from harness.emulated_time import EmulatedTime
from tests.client_support import runtime_client
from tests.component_support import ROLE, CallStream, ComponentServer, deploy_component, serving
from tests.support import output_of, scale_request, wait_until

DOUBLED = [2.0, 4.0, 6.0, 8.0]


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentServer]:
    with serving(tmp_path_factory.mktemp("endpoint-update"), scales={"double": 2.0}) as module:
        yield module


@pytest.fixture(autouse=True)
def _components_deleted(module: ComponentServer) -> Iterator[None]:
    """A test's components are deleted after it, so their Tritons weigh on no other test."""
    yield
    module.delete_created()


def _config(module: ComponentServer, name: str, **variant: Any) -> None:
    module.client("sagemaker").create_endpoint_config(
        EndpointConfigName=name, ExecutionRoleArn=ROLE, ProductionVariants=[{
            "VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge",
            "InitialInstanceCount": 1, **variant}])


def _status(module: ComponentServer, endpoint: str) -> str:
    return str(module.client("sagemaker").describe_endpoint(
        EndpointName=endpoint)["EndpointStatus"])


def _endpoint_with_component(module: ComponentServer, name: str) -> None:
    """Endpoint ``name`` (one ml.m5.xlarge) with component ``name``: one copy, answering."""
    module.created.append(name)
    deploy_component(module.client("sagemaker"), name, name, "double")


def _component(module: ComponentServer, name: str) -> dict[str, Any]:
    return dict(module.client("sagemaker").describe_inference_component(
        InferenceComponentName=name))


def _answered_once_in_service(module: ComponentServer, name: str, stream: CallStream,
                              what: str) -> int:
    """Waits for endpoint ``name`` InService again (``what`` done), then for three more answers
    of ``stream``: returns how many it had answered before them."""
    wait_until(lambda: _status(module, name) == "InService", 60, f"{what} done")
    answered = len(stream.copies)
    wait_until(lambda: len(stream.copies) >= answered + 3, 30, f"calls after {what}")
    return answered


def _call(client: Any, name: str) -> tuple[list[float], str]:
    """The answer and the copy that gave it (X-Mme-Instance, emulator-only)."""
    answer = client.invoke_endpoint(EndpointName=name, InferenceComponentName=name,
                                    ContentType="application/json",
                                    Body=scale_request([1, 2, 3, 4]))
    copy = answer["ResponseMetadata"]["HTTPHeaders"]["x-mme-instance"]
    return output_of(answer["Body"].read()).tolist(), copy


def _assert_answers_after_the_restart_on(module: ComponentServer, name: str,
                                         instance_type: str) -> None:
    """The component answers again, from its one copy, placed on ``instance_type``."""
    client = runtime_client(module.server.url)

    def answers() -> bool:
        try:
            return _call(client, name)[0] == DOUBLED
        except ClientError:
            return False

    wait_until(answers, 60, "the component answering after the restart")
    assert _component(module, name)["RuntimeConfig"]["PlacementStatus"] == [
        {"InstanceType": instance_type, "CurrentCopyCount": 1}]


def test_a_new_instance_type_moves_the_copies_and_fails_no_call(module: ComponentServer) -> None:
    """ml.m5.xlarge x1 -> ml.c5.2xlarge x2 with RANDOM routing and ManagedInstanceScaling:
    Updating (the new config pending), then InService on it; the copy is started anew on the
    new instance type and the old one stops once it is ready: a steady stream of calls sees no
    failure and ends on the new copy."""
    name = "moved"
    _endpoint_with_component(module, name)
    sm = module.client("sagemaker")
    old_copy = _call(runtime_client(module.server.url), name)[1]
    old_tritons = {p.pid for p in module.tritons(name)}
    assert len(old_tritons) == 1
    scaling = {"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 2}
    _config(module, f"{name}-c5", InstanceType="ml.c5.2xlarge", InitialInstanceCount=2,
            RoutingConfig={"RoutingStrategy": "RANDOM"}, ManagedInstanceScaling=scaling)
    stream = CallStream(module.server.url, name, expected=DOUBLED)
    try:
        wait_until(lambda: len(stream.copies) >= 3, 30, "calls answered before the update")
        sm.update_endpoint(EndpointName=name, EndpointConfigName=f"{name}-c5")
        during = sm.describe_endpoint(EndpointName=name)
        assert during["EndpointStatus"] == "Updating"
        assert during["PendingDeploymentSummary"]["EndpointConfigName"] == f"{name}-c5"
        pending = during["PendingDeploymentSummary"]["ProductionVariants"][0]
        assert pending["InstanceType"] == "ml.c5.2xlarge"
        assert during["ProductionVariants"][0]["CurrentInstanceCount"] >= 1  # instances serve
        _answered_once_in_service(module, name, stream, "the update")
    finally:
        stream.stop()
    assert stream.failures == []
    assert stream.copies[0] == old_copy and stream.copies[-1] != old_copy
    done = sm.describe_endpoint(EndpointName=name)
    assert done["EndpointConfigName"] == f"{name}-c5"
    assert "PendingDeploymentSummary" not in done and "FailureReason" not in done
    variant = done["ProductionVariants"][0]
    assert variant["RoutingConfig"] == {"RoutingStrategy": "RANDOM"}
    assert variant["ManagedInstanceScaling"]["MaxInstanceCount"] == 2
    placed = _component(module, name)["RuntimeConfig"]
    assert placed["CurrentCopyCount"] == 1
    assert placed["PlacementStatus"] == [{"InstanceType": "ml.c5.2xlarge",
                                          "CurrentCopyCount": 1}]
    now = {p.pid for p in module.tritons(name)}
    assert len(now) == 1 and not now & old_tritons, "the old copy's Triton still runs"


def test_an_update_interrupted_by_a_restart_ends_on_the_new_config(module: ComponentServer) -> None:
    """A restart right after UpdateEndpoint: the endpoint comes back on the new config and
    its component answers from a copy on the new instance type, none left on the old."""
    name = "restarted"
    _endpoint_with_component(module, name)
    _config(module, f"{name}-c5", InstanceType="ml.c5.2xlarge")
    module.client("sagemaker").update_endpoint(EndpointName=name, EndpointConfigName=f"{name}-c5")
    module.restart()
    wait_until(lambda: _status(module, name) == "InService", 60, "the update carried on")
    assert module.client("sagemaker").describe_endpoint(
        EndpointName=name)["EndpointConfigName"] == f"{name}-c5"
    _assert_answers_after_the_restart_on(module, name, "ml.c5.2xlarge")
    assert len(module.tritons(name)) == 1


def _refusal(module: ComponentServer, endpoint: str, config: str, **params: Any) -> str:
    with pytest.raises(ClientError) as raised:
        module.client("sagemaker").update_endpoint(EndpointName=endpoint, EndpointConfigName=config,
                                        **params)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert _status(module, endpoint) == "InService"
    return str(raised.value.response["Error"]["Message"])


def test_what_an_update_of_an_endpoint_for_components_refuses(module: ComponentServer) -> None:
    """A config for models onto it, a variant of its components missing, a rolling
    DeploymentConfig; and a config for components onto an endpoint for models. Nothing
    changes."""
    name = "refusing"
    _endpoint_with_component(module, name)
    sm = module.client("sagemaker")
    sm.create_endpoint_config(EndpointConfigName=f"{name}-models", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "double", "InstanceType": "ml.m5.xlarge",
        "InitialInstanceCount": 1}])
    message = _refusal(module, name, f"{name}-models")
    assert "hosts inference components" in message and "ModelName" in message
    _config(module, f"{name}-other", VariantName="Other")
    message = _refusal(module, name, f"{name}-other")
    assert "no production variant AllTraffic" in message and name in message
    _config(module, f"{name}-c5", InstanceType="ml.c5.2xlarge")
    message = _refusal(module, name, f"{name}-c5", DeploymentConfig={"RollingUpdatePolicy": {
        "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1},
        "WaitIntervalInSeconds": 0}})
    assert "RollingUpdatePolicy is not supported by the emulator" in message
    assert "BlueGreenUpdatePolicy" in message
    assert sm.describe_endpoint(EndpointName=name)["EndpointConfigName"] == name
    # An endpoint for models does not become one for components.
    sm.create_endpoint(EndpointName=f"{name}-models", EndpointConfigName=f"{name}-models")
    try:
        wait_until(lambda: _status(module, f"{name}-models") == "InService", 60,
                   "the endpoint for models InService")
        message = _refusal(module, f"{name}-models", f"{name}-c5")
        assert "hosts models" in message and "inference components" in message
    finally:
        sm.delete_endpoint(EndpointName=f"{name}-models")
        wait_until(lambda: not module.tritons(f"{name}-models"), 60, "its Triton stopped")


def _canary(bake_s: int, alarm: str | None = None) -> dict[str, Any]:
    """Blue/green, one instance of the new fleet's two first, then the rest."""
    config: dict[str, Any] = {"BlueGreenUpdatePolicy": {
        "TrafficRoutingConfiguration": {
            "Type": "CANARY", "WaitIntervalInSeconds": bake_s,
            "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 1}},
        "TerminationWaitInSeconds": 0}}
    if alarm is not None:
        config["AutoRollbackConfiguration"] = {"Alarms": [{"AlarmName": alarm}]}
    return config


def _endpoint_tritons(module: ComponentServer, name: str) -> set[int]:
    """Both fleets' Tritons of endpoint ``name`` (the new fleet's folder is name.green.N)."""
    return {p.pid for p in module.tritons() if any(
        f"/endpoints/{name}/" in part or f"/endpoints/{name}.green." in part
        for part in p.info["cmdline"] or ())}


def test_a_canary_update_shifts_the_calls_to_the_new_fleet_and_ends_on_it(
        module: ComponentServer) -> None:
    """UpdateEndpoint with a canary DeploymentConfig: the new fleet's copy starts beside the
    running one, takes part of the calls through the canary's bake (both answer), then all of
    them; InService on the new config with LastDeploymentConfig, the old copy stopped, no call
    failed."""
    name = "canary"
    _endpoint_with_component(module, name)
    sm = module.client("sagemaker")
    old_copy = _call(runtime_client(module.server.url), name)[1]
    old_tritons = _endpoint_tritons(module, name)
    _config(module, f"{name}-c5", InstanceType="ml.c5.2xlarge", InitialInstanceCount=2)
    stream = CallStream(module.server.url, name, expected=DOUBLED)
    clock = EmulatedTime(module.server.url)
    try:
        sm.update_endpoint(EndpointName=name, EndpointConfigName=f"{name}-c5",
                           DeploymentConfig=_canary(600))
        assert _status(module, name) == "Updating"
        wait_until(lambda: any(c != old_copy for c in stream.copies), 60,
                   "the new fleet's copy answering during the canary")
        seen = len(stream.copies)
        wait_until(lambda: old_copy in stream.copies[seen:], 30,
                   "the old copy still answering during the canary")
        during = sm.describe_endpoint(EndpointName=name)
        assert during["EndpointStatus"] == "Updating"
        assert during["PendingDeploymentSummary"]["EndpointConfigName"] == f"{name}-c5"
        clock.advance(600)  # the canary's bake: then all of the calls on the new fleet
        shifted = len(stream.copies)
        wait_until(lambda: len(stream.copies) >= shifted + 5
                   and old_copy not in stream.copies[-3:], 30, "every call on the new fleet")
        assert _status(module, name) == "Updating"  # the final bake
        clock.advance(600)
        answered = _answered_once_in_service(module, name, stream, "the update")
    finally:
        stream.stop()
    assert stream.failures == []
    new_copy = stream.copies[-1]
    assert new_copy != old_copy and "bg" in new_copy
    assert set(stream.copies[answered:]) == {new_copy}
    done = sm.describe_endpoint(EndpointName=name)
    assert done["EndpointConfigName"] == f"{name}-c5"
    assert "FailureReason" not in done and "PendingDeploymentSummary" not in done
    assert done["LastDeploymentConfig"]["BlueGreenUpdatePolicy"][
        "TrafficRoutingConfiguration"]["Type"] == "CANARY"
    assert _component(module, name)["RuntimeConfig"]["PlacementStatus"] == [
        {"InstanceType": "ml.c5.2xlarge", "CurrentCopyCount": 1}]
    wait_until(lambda: not _endpoint_tritons(module, name) & old_tritons, 30,
               "the old fleet's Triton stopped")
    assert len(_endpoint_tritons(module, name)) == 1


def test_an_alarm_during_the_canary_rolls_the_update_back(module: ComponentServer) -> None:
    """An AutoRollbackConfiguration alarm in ALARM during the bake: RollingBack, then
    InService on the previous config with the alarm named in FailureReason; the new fleet's
    copy stopped; the running copy answered throughout."""
    name = "rollback"
    _endpoint_with_component(module, name)
    sm = module.client("sagemaker")
    cw = module.client("cloudwatch")
    alarm = f"{name}-errors"
    cw.put_metric_alarm(AlarmName=alarm, Namespace="AWS/SageMaker",
                        MetricName="Invocation5XXErrors", Statistic="Sum", Period=60,
                        EvaluationPeriods=1, Threshold=1,
                        ComparisonOperator="GreaterThanOrEqualToThreshold",
                        Dimensions=[{"Name": "InferenceComponentName", "Value": name}])
    old_copy = _call(runtime_client(module.server.url), name)[1]
    old_tritons = _endpoint_tritons(module, name)
    _config(module, f"{name}-c5", InstanceType="ml.c5.2xlarge", InitialInstanceCount=2)
    stream = CallStream(module.server.url, name, expected=DOUBLED)
    try:
        sm.update_endpoint(EndpointName=name, EndpointConfigName=f"{name}-c5",
                           DeploymentConfig=_canary(3600, alarm))
        wait_until(lambda: any(c != old_copy for c in stream.copies), 60,
                   "the new fleet's copy answering during the canary")
        cw.set_alarm_state(AlarmName=alarm, StateValue="ALARM", StateReason="a test says so")
        answered = _answered_once_in_service(module, name, stream, "the rollback")
    finally:
        stream.stop()
    assert stream.failures == []
    assert set(stream.copies[answered:]) == {old_copy}
    done = sm.describe_endpoint(EndpointName=name)
    assert done["EndpointConfigName"] == name
    assert alarm in done["FailureReason"]
    assert _component(module, name)["RuntimeConfig"]["PlacementStatus"] == [
        {"InstanceType": "ml.m5.xlarge", "CurrentCopyCount": 1}]
    wait_until(lambda: _endpoint_tritons(module, name) == old_tritons, 30,
               "the new fleet's Triton stopped")


def test_a_guarded_update_cut_by_a_restart_comes_back_on_the_previous_config(
        module: ComponentServer) -> None:
    """A restart during the canary's bake: the endpoint is InService on its previous config,
    the interruption as FailureReason, its component answering; no new-fleet copy is left."""
    name = "cut"
    _endpoint_with_component(module, name)
    sm = module.client("sagemaker")
    _config(module, f"{name}-c5", InstanceType="ml.c5.2xlarge", InitialInstanceCount=2)
    sm.update_endpoint(EndpointName=name, EndpointConfigName=f"{name}-c5",
                       DeploymentConfig=_canary(3600))
    wait_until(lambda: len(_endpoint_tritons(module, name)) == 2, 60,
               "the new fleet's copy started")
    module.restart()
    wait_until(lambda: _status(module, name) == "InService", 60, "the endpoint back")
    described = module.client("sagemaker").describe_endpoint(EndpointName=name)
    assert described["EndpointConfigName"] == name
    assert "interrupted by a restart" in described["FailureReason"]
    assert "PendingDeploymentSummary" not in described
    _assert_answers_after_the_restart_on(module, name, "ml.m5.xlarge")
    assert len(_endpoint_tritons(module, name)) == 1
