"""Inference components' states that a live server passes through too fast to catch: an update
refused while one is in progress, and what a restart finds half-done.

The integration test (tests/integration/test_inference_components.py) covers the operations
over HTTP with boto3; here the state machine runs on a real SQLite store, no server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from emulator.auth.requests import classify
from emulator.contract import inference_components as rules
from emulator.contract.control_plane import ControlPlaneError
from emulator.control.inference_components import ComponentRecord, InferenceComponents
from emulator.control.state_db import (
    INFERENCE_COMPONENTS,
    ControlStore,
    Deployment,
    EndpointRecord,
)

VARIANT = {"VariantName": "AllTraffic", "InstanceType": "ml.g5.2xlarge", "InitialInstanceCount": 1}
SPEC = {"ModelName": "m", "ComputeResourceRequirements": {"MinMemoryRequiredInMb": 1024}}


def _arn(kind: str, name: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:123456789012:{kind}/{name.lower()}"


def _store(tmp_path: Path, endpoint_status: str = "InService") -> ControlStore:
    store = ControlStore(tmp_path / "control.sqlite3")
    store.add_endpoint(EndpointRecord(
        name="ep", created=1.0, modified=1.0, status=endpoint_status,
        failure_reason="the image could not be pulled" if endpoint_status == "Failed" else None,
        current=Deployment(config_name="ep", variants=[VARIANT], spec={})))
    return store


def _record(name: str, status: str, copies: int = 2) -> ComponentRecord:
    return ComponentRecord(name=name, created=2.0, modified=2.0, status=status,
                           endpoint_name="ep", variant_name="AllTraffic", specification=SPEC,
                           desired_copies=copies, current_copies=0)


def _components(store: ControlStore) -> InferenceComponents:
    return InferenceComponents(store, _arn, clock=lambda: 10.0)


@pytest.mark.parametrize("status", ["Creating", "Updating", "Deleting"])
def test_no_update_while_in_progress(tmp_path: Path, status: str) -> None:
    store = _store(tmp_path)
    store.add(INFERENCE_COMPONENTS, _record("ic", status).to_resource())
    components = _components(store)
    for call, params in ((components.update, {"RuntimeConfig": {"CopyCount": 3}}),
                         (components.update_runtime_config,
                          {"DesiredRuntimeConfig": {"CopyCount": 3}})):
        with pytest.raises(ControlPlaneError) as raised:
            asyncio.run(call({"InferenceComponentName": "ic", **params}))
        assert raised.value.message == (
            f'Cannot update in-progress inference component "{_arn("inference-component", "ic")}"'
            f" (status {status}); wait until it is InService.")
    # Nothing changed.
    resource = store.get(INFERENCE_COMPONENTS, "ic")
    assert resource is not None and resource.doc["desired_copies"] == 2


def test_a_restart_carries_interrupted_changes_to_their_end(tmp_path: Path) -> None:
    store = _store(tmp_path)
    updating = _record("updating", "Updating", copies=5)
    updating.pending_specification = {**SPEC, "ModelName": "m2"}
    for record in (_record("creating", "Creating"), updating, _record("deleting", "Deleting")):
        store.add(INFERENCE_COMPONENTS, record.to_resource())

    async def restart() -> None:
        components = _components(ControlStore(store.path))  # a new process: a new connection
        await components.restore()
        while components.lifecycle.tasks:  # the Create waits for its endpoint (InService: at once)
            await asyncio.gather(*components.lifecycle.tasks.values())

    asyncio.run(restart())
    states = {r.name: ComponentRecord.from_resource(r) for r in store.all(INFERENCE_COMPONENTS)}
    assert sorted(states) == ["creating", "updating"]
    assert states["creating"].status == "InService" and states["creating"].current_copies == 2
    assert states["updating"].status == "InService" and states["updating"].current_copies == 5
    assert states["updating"].specification["ModelName"] == "m2"


def test_a_component_fails_with_its_endpoint(tmp_path: Path) -> None:
    store = _store(tmp_path, endpoint_status="Failed")
    store.add(INFERENCE_COMPONENTS, _record("ic", "Creating").to_resource())
    components = _components(store)

    async def restore() -> None:
        await components.restore()
        await asyncio.gather(*components.lifecycle.tasks.values())

    asyncio.run(restore())
    described = asyncio.run(components.describe({"InferenceComponentName": "ic"}))
    assert described["InferenceComponentStatus"] == "Failed"
    assert described["FailureReason"] == \
        "Endpoint ep is Failed: the image could not be pulled"
    assert described["RuntimeConfig"]["CurrentCopyCount"] == 0


def test_requests_the_rules_do_not_own_go_to_the_control_plane() -> None:
    model_config = {"EndpointConfigName": "c", "ProductionVariants": [
        {"VariantName": "A", "ModelName": "m", "InstanceType": "ml.m5.large"}]}
    assert rules.parse_request("SageMaker.CreateEndpointConfig",
                               json.dumps(model_config).encode()) is None
    assert rules.parse_request("SageMaker.DescribeEndpoint", b"{}") is None
    assert rules.parse_request(None, b"{}") is None
    parsed = rules.parse_request("SageMaker.DescribeInferenceComponent",
                                 b'{"InferenceComponentName": "ic"}')
    assert parsed == ("DescribeInferenceComponent", {"InferenceComponentName": "ic"})
    with pytest.raises(ControlPlaneError) as raised:
        rules.parse_request("SageMaker.ListInferenceComponents", b"[1]")
    assert raised.value.code == "SerializationException"


def test_iam_sees_the_component_as_the_resource() -> None:
    body = json.dumps({"InferenceComponentName": "IC-1", "EndpointName": "ep"}).encode()
    call = classify("POST", "/", {"x-amz-target": "SageMaker.CreateInferenceComponent",
                                  "content-type": "application/x-amz-json-1.1"},
                    body, "us-east-1", "123456789012")
    assert call is not None and call.action == "sagemaker:CreateInferenceComponent"
    assert call.resource == "arn:aws:sagemaker:us-east-1:123456789012:inference-component/ic-1"
