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


def _call(client: Any, name: str) -> tuple[list[float], str]:
    """The answer and the copy that gave it (X-Mme-Instance, emulator-only)."""
    answer = client.invoke_endpoint(EndpointName=name, InferenceComponentName=name,
                                    ContentType="application/json",
                                    Body=scale_request([1, 2, 3, 4]))
    copy = answer["ResponseMetadata"]["HTTPHeaders"]["x-mme-instance"]
    return output_of(answer["Body"].read()).tolist(), copy


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
        wait_until(lambda: _status(module, name) == "InService", 60, "the update done")
        answered = len(stream.copies)
        wait_until(lambda: len(stream.copies) >= answered + 3, 30, "calls after the update")
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
    client = runtime_client(module.server.url)

    def answers() -> bool:
        try:
            return _call(client, name)[0] == DOUBLED
        except ClientError:
            return False

    wait_until(answers, 60, "the component answering after the restart")
    assert _component(module, name)["RuntimeConfig"]["PlacementStatus"] == [
        {"InstanceType": "ml.c5.2xlarge", "CurrentCopyCount": 1}]
    assert len(module.tritons(name)) == 1


def _refusal(module: ComponentServer, endpoint: str, config: str, **params: Any) -> str:
    with pytest.raises(ClientError) as raised:
        module.client("sagemaker").update_endpoint(EndpointName=endpoint, EndpointConfigName=config,
                                        **params)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert _status(module, endpoint) == "InService"
    return str(raised.value.response["Error"]["Message"])


def test_what_an_update_of_an_endpoint_for_components_refuses(module: ComponentServer) -> None:
    """A config for models onto it, a variant of its components missing, a DeploymentConfig;
    and a config for components onto an endpoint for models. Nothing changes."""
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
    message = _refusal(module, name, f"{name}-c5", DeploymentConfig={"BlueGreenUpdatePolicy": {
        "TrafficRoutingConfiguration": {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0}}})
    assert "DeploymentConfig is not supported by the emulator" in message
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
