"""A Ctrl-C while a change's call is in flight: SageMaker may have taken the change before its
answer came back. The deployer asks the service, and says the change goes on where it was taken
(nothing of it undone), or that nothing was changed where it was not. The interrupt is raised by
botocore's own events, after the (stubbed) service answered or before the request left."""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, cast

import boto3
import pytest
from botocore.stub import Stubber

from harness import component_deployer
from harness.deployer import Clients, Deployer, deployment_config
from harness.deployment import ComponentSpec, DeployConfig, Interrupted
from harness.model_versions import ModelStore

NOW = datetime(2026, 11, 25, tzinfo=timezone.utc)
ARN = "arn:aws:sagemaker:us-east-1:123456789012"
NOT_FOUND = "Could not find inference component"


def _ctrl_c(**_: Any) -> None:
    raise KeyboardInterrupt


def _deployer(stage: str, operation: str) -> tuple[Deployer, Any, Stubber]:
    """A deployer whose ``operation`` call is cut by a Ctrl-C at ``stage``: ``after-call`` (the
    service answered) or ``provide-client-params`` (the request never left)."""
    sm = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x",
                      aws_secret_access_key="x")
    stub = Stubber(sm)
    # after-call: the Stubber has answered; provide-client-params: before the Stubber sees the call
    sm.meta.events.register(f"{stage}.sagemaker.{operation}", _ctrl_c)
    deployer = Deployer(Clients(sm, None, None, "us-east-1", "aws"), out=io.StringIO(),
                        progress=False)
    return deployer, sm, stub


def _component(status: str) -> dict[str, Any]:
    return {"InferenceComponentName": "slow", "InferenceComponentArn": f"{ARN}:ic/slow",
            "EndpointName": "shared", "EndpointArn": f"{ARN}:endpoint/shared",
            "VariantName": "AllTraffic", "InferenceComponentStatus": status,
            "CreationTime": NOW, "LastModifiedTime": NOW,
            "Specification": {"ModelName": "m1"}}


def _create_component(deployer: Deployer) -> None:
    config = DeployConfig("shared", [], wait_delay_s=0)
    created = component_deployer._Created(deployer)
    component_deployer._ensure_component(deployer, config, ComponentSpec("slow"), "m1", created)


def _outcome(step: Callable[[], object]) -> BaseException | None:
    """What ``step`` raised: a KeyboardInterrupt is caught here, never left to end pytest."""
    try:
        step()
    except BaseException as exc:  # noqa: BLE001 - the Ctrl-C is the subject
        return exc
    return None


@pytest.mark.parametrize("stage", ["after-call", "provide-client-params"])
def test_ctrl_c_in_create_inference_component_says_what_the_service_took(stage: str) -> None:
    deployer, _, stub = _deployer(stage, "CreateInferenceComponent")
    with stub:
        stub.add_client_error("describe_inference_component", "ValidationException", NOT_FOUND)
        if stage == "after-call":
            stub.add_response("create_inference_component",
                              {"InferenceComponentArn": f"{ARN}:ic/slow"})
            stub.add_response("describe_inference_component", _component("Creating"))
        else:
            stub.add_client_error("describe_inference_component", "ValidationException",
                                  NOT_FOUND)
        raised = _outcome(lambda: _create_component(deployer))
        stub.assert_no_pending_responses()
    if stage == "after-call":  # taken: it goes on, and nothing of it is undone
        assert isinstance(raised, Interrupted) and raised.kind == "component-create", raised
        assert "the creation of inference component slow continues in endpoint shared" in (
            str(raised))
    else:  # nothing asked: the Ctrl-C goes on, and the run undoes what it made
        assert type(raised) is KeyboardInterrupt


def _stub_create_endpoint(stub: Any, stage: str, name: str, config_name: str) -> None:
    """What the service answers around CreateEndpoint of ``name``: where the Ctrl-C came after
    the call, the endpoint is Creating; before it, there is still no endpoint."""
    if stage == "after-call":
        stub.add_response("create_endpoint", {"EndpointArn": f"{ARN}:endpoint/{name}"})
        stub.add_response("describe_endpoint", {
            "EndpointName": name, "EndpointArn": f"{ARN}:endpoint/{name}",
            "EndpointConfigName": config_name, "EndpointStatus": "Creating",
            "CreationTime": NOW, "LastModifiedTime": NOW})
    else:
        stub.add_client_error("describe_endpoint", "ValidationException",
                              "Could not find endpoint")


@pytest.mark.parametrize("stage", ["after-call", "provide-client-params"])
def test_ctrl_c_in_create_endpoint_leaves_the_creation_asked_only_where_taken(stage: str) -> None:
    deployer, _, stub = _deployer(stage, "CreateEndpoint")
    config = DeployConfig("demo", [], wait_delay_s=0)
    with stub:
        stub.add_client_error("describe_endpoint", "ValidationException",
                              "Could not find endpoint")
        _stub_create_endpoint(stub, stage, "demo", "new")
        raised = _outcome(lambda: deployer._ensure_endpoint(config, "new"))
        stub.assert_no_pending_responses()
    assert type(raised) is KeyboardInterrupt
    if stage == "after-call":  # what the interrupted run then says
        interrupted = deployer._interrupted(config, "new", cast(ModelStore, None), [])
        assert interrupted.kind == "create"
        assert "the creation of endpoint demo to new continues" in str(interrupted)
    else:  # the run's own clean-up follows (it deletes what it made): nothing was asked
        assert deployer._asked is None


@pytest.mark.parametrize("stage", ["after-call", "provide-client-params"])
def test_ctrl_c_in_create_endpoint_for_components_says_what_the_service_took(stage: str) -> None:
    deployer, _, stub = _deployer(stage, "CreateEndpoint")
    config = DeployConfig("shared", [], wait_delay_s=0)
    with stub:
        stub.add_client_error("describe_endpoint", "ValidationException",
                              "Could not find endpoint")
        stub.add_client_error("describe_endpoint_config", "ValidationException",
                              "Could not find endpoint configuration")
        stub.add_response("create_endpoint_config",
                          {"EndpointConfigArn": f"{ARN}:endpoint-config/shared"})
        _stub_create_endpoint(stub, stage, "shared", "shared-config")
        created = component_deployer._Created(deployer)
        raised = _outcome(lambda: component_deployer._ensure_endpoint(
            deployer, config, ComponentSpec("slow"), f"{ARN}:role/r", created))
        stub.assert_no_pending_responses()
    if stage == "after-call":  # taken: it goes on, and the component is not created yet
        assert isinstance(raised, Interrupted) and raised.kind == "endpoint-create", raised
        assert "the creation of endpoint shared continues" in str(raised)
    else:  # nothing asked: the Ctrl-C goes on, and the run undoes what it made
        assert type(raised) is KeyboardInterrupt


def _endpoint(status: str, config: str) -> dict[str, Any]:
    return {"EndpointName": "demo", "EndpointArn": f"{ARN}:endpoint/demo",
            "EndpointConfigName": config, "EndpointStatus": status, "CreationTime": NOW,
            "LastModifiedTime": NOW}


@pytest.mark.parametrize("stage", ["after-call", "provide-client-params"])
def test_ctrl_c_in_a_guarded_update_endpoint_leaves_it_asked_only_where_taken(stage: str) -> None:
    deployer, _, stub = _deployer(stage, "UpdateEndpoint")
    guarded = deployment_config("canary", 600, canary_size="10%", termination_wait_s=120,
                                rollback_alarms=["demo-5xx"])
    config = DeployConfig("demo", [], wait_delay_s=0, deployment_config=guarded)
    with stub:
        stub.add_response("describe_endpoint", _endpoint("InService", "old"))
        if stage == "after-call":
            stub.add_response("update_endpoint", {"EndpointArn": f"{ARN}:endpoint/demo"})
            stub.add_response("describe_endpoint", _endpoint("Updating", "old"))
        else:
            stub.add_response("describe_endpoint", _endpoint("InService", "old"))
        raised = _outcome(lambda: deployer._ensure_endpoint(config, "new"))
        stub.assert_no_pending_responses()
    assert type(raised) is KeyboardInterrupt
    if stage == "after-call":  # taken: it goes on, its rollback alarms watching it
        interrupted = deployer._interrupted(config, "new", cast(ModelStore, None), [])
        assert interrupted.kind == "guarded" and interrupted.alarms == ["demo-5xx"]
        assert "the guarded update of endpoint demo to new continues" in str(interrupted)
    else:
        assert deployer._asked is None


@pytest.mark.parametrize("stage", ["after-call", "provide-client-params"])
def test_ctrl_c_in_update_inference_component_says_what_the_service_took(stage: str) -> None:
    deployer, _, stub = _deployer(stage, "UpdateInferenceComponent")
    running = {**_component("InService"), "Specification": {"ModelName": "m0"}}
    with stub:
        stub.add_response("describe_inference_component", running)
        if stage == "after-call":
            stub.add_response("update_inference_component",
                              {"InferenceComponentArn": f"{ARN}:ic/slow"})
            stub.add_response("describe_inference_component", _component("Updating"))
        else:
            stub.add_response("describe_inference_component", running)
        raised = _outcome(lambda: _create_component(deployer))
        stub.assert_no_pending_responses()
    if stage == "after-call":
        assert isinstance(raised, Interrupted) and raised.kind == "component-update", raised
        assert "the update of inference component slow continues in endpoint shared" in (
            str(raised))
    else:
        assert type(raised) is KeyboardInterrupt
