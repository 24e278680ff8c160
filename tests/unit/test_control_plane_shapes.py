"""Control-plane outputs checked against botocore's own service model, and the store's durability.

``check_output`` walks an output with the operation's output shape: every required member is
present, every member is modelled, strings satisfy enums/patterns/lengths, timestamps are epoch
numbers. Every operation's output goes through it, in every endpoint state we can produce.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emulator.contract import control_plane as wire
from emulator.control import ControlPlaneService, ControlStore
from emulator.control.state_db import MODELS, Resource

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"


class Runtimes:
    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def create(self, spec: Any) -> None:
        if "broken" in spec.variants[0].container.model_data:
            raise RuntimeError("container failed its ping for 240 s")

    async def replace(self, spec: Any) -> None:
        await self.gate.wait()

    async def resize(self, spec: Any) -> None:
        await self.gate.wait()

    async def delete(self, name: str) -> None:
        return None

    def get(self, name: str) -> Any:
        return None  # nothing reports instances: CurrentInstanceCount stays 0

    def names(self) -> list[str]:
        return []


def test_every_output_matches_the_service_model(tmp_path: Path) -> None:
    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        runtimes = Runtimes()
        service = ControlPlaneService(ControlStore(tmp_path / "db.sqlite3"), runtimes)
        outputs: list[tuple[str, dict[str, Any]]] = []

        async def call(op: str, **params: Any) -> dict[str, Any]:
            _, parsed = wire.parse_request(f"SageMaker.{op}", json.dumps(params).encode())
            result = await service.handle(op, parsed)
            outputs.append((op, result))
            return result

        container = {
            "Image": IMAGE,
            "Mode": "MultiModel",
            "ModelDataUrl": "s3://bucket/prefix/",
            "Environment": {"SAGEMAKER_TRITON_THREAD_COUNT": "4"},
            "MultiModelConfig": {"ModelCacheSetting": "Enabled"},
        }
        await call("CreateModel", ModelName="m", PrimaryContainer=container)
        await call(
            "CreateModel",
            ModelName="m-broken",
            Containers=[{**container, "ModelDataUrl": "s3://broken/"}],
            Tags=[{"Key": "team", "Value": "ml"}],
        )
        # c2 captures its calls: DescribeEndpoint then carries a DataCaptureConfig summary.
        capture = {"DataCaptureConfig": {
            "InitialSamplingPercentage": 50, "DestinationS3Uri": "s3://bucket/capture",
            "CaptureOptions": [{"CaptureMode": "InputAndOutput"}]}}
        for config, model in (("c", "m"), ("c2", "m"), ("c-broken", "m-broken")):
            await call(
                "CreateEndpointConfig",
                **(capture if config == "c2" else {}),
                EndpointConfigName=config,
                ProductionVariants=[
                    {
                        "VariantName": "AllTraffic",
                        "ModelName": model,
                        "InstanceType": "ml.g5.xlarge",
                        "InitialInstanceCount": 1,
                        "InitialVariantWeight": 1.0,
                    }
                ],
            )
        await call("CreateEndpoint", EndpointName="ep", EndpointConfigName="c")
        await call("DescribeEndpoint", EndpointName="ep")  # Creating
        await call("CreateEndpoint", EndpointName="ep-broken", EndpointConfigName="c-broken")
        await service.wait_idle()
        await call("DescribeEndpoint", EndpointName="ep")  # InService
        await call("DescribeEndpoint", EndpointName="ep-broken")  # Failed
        await call("UpdateEndpoint", EndpointName="ep", EndpointConfigName="c2")
        await call("DescribeEndpoint", EndpointName="ep")  # Updating, with a pending deployment
        runtimes.gate.set()
        await service.wait_idle()
        runtimes.gate.clear()
        await call("UpdateEndpointWeightsAndCapacities", EndpointName="ep",
                   DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic",
                                                 "DesiredInstanceCount": 2}])
        await call("DescribeEndpoint", EndpointName="ep")  # Updating, DesiredInstanceCount 2
        runtimes.gate.set()
        await service.wait_idle()
        for op in ("DescribeModel",):
            await call(op, ModelName="m")
            await call(op, ModelName="m-broken")
        await call("DescribeEndpointConfig", EndpointConfigName="c")
        tagged = await call("ListTags", ResourceArn=service.arn("model", "m-broken"))
        assert tagged["Tags"] == [{"Key": "team", "Value": "ml"}]
        await call("ListTags", ResourceArn=service.arn("endpoint", "ep"), MaxResults=50)
        await call("ListModels", MaxResults=1)
        await call("ListEndpointConfigs", SortBy="Name")
        await call("ListEndpoints", MaxResults=1, SortBy="Status")
        await call("DeleteEndpoint", EndpointName="ep")
        await call("DescribeEndpoint", EndpointName="ep")  # Deleting
        await service.wait_idle()
        await call("DeleteEndpointConfig", EndpointConfigName="c")
        await call("DeleteModel", ModelName="m")
        return outputs

    outputs = asyncio.run(scenario())
    assert {op for op, _ in outputs} == set(wire.OPERATIONS)
    statuses = {o["EndpointStatus"] for op, o in outputs if op == "DescribeEndpoint"}
    assert any(o.get("DataCaptureConfig") == {
        "EnableCapture": True, "CaptureStatus": "Started", "CurrentSamplingPercentage": 50,
        "DestinationS3Uri": "s3://bucket/capture", "KmsKeyId": ""}
        for op, o in outputs if op == "DescribeEndpoint")
    assert statuses == {"Creating", "InService", "Failed", "Updating", "Deleting"}
    for op, output in outputs:
        assert wire.check_output(op, output) == [], (op, output)
    # Paginated listings hand back a token the next call accepts.
    tokens = [o.get("NextToken") for op, o in outputs if op in ("ListModels", "ListEndpoints")]
    assert all(tokens)


def test_the_shape_check_catches_defects() -> None:
    # A check that cannot fail proves nothing: feed it the mistakes it must find.
    problems = wire.check_output(
        "DescribeEndpoint",
        {
            "EndpointName": "ep",
            "EndpointArn": "arn:aws:sagemaker:us-east-1:123:endpoint/ep",  # 3-digit account
            "EndpointStatus": "Running",  # not in the enum
            "CreationTime": "2024-01-01T00:00:00Z",  # JSON 1.1 wants epoch seconds
            "Stray": 1,
        },
    )
    assert any("LastModifiedTime: required" in p for p in problems)
    assert any("EndpointArn" in p and "pattern" in p for p in problems)
    assert any("EndpointStatus" in p for p in problems)
    assert any("CreationTime" in p for p in problems)
    assert any("Stray" in p for p in problems)


def test_validation_reports_every_violation() -> None:
    body = json.dumps(
        {
            "EndpointConfigName": "x" * 64,
            "ProductionVariants": [
                {
                    "VariantName": "a",
                    "ModelName": "m",
                    "InstanceType": "ml.nope",
                    "InitialInstanceCount": 0,
                }
            ],
        }
    ).encode()
    with pytest.raises(wire.ControlPlaneError) as excinfo:
        wire.parse_request("SageMaker.CreateEndpointConfig", body)
    message = excinfo.value.message
    assert message.startswith("4 validation errors detected: ")  # length and pattern
    assert (
        "at 'endpointConfigName' failed to satisfy constraint: Member must have length less "
        "than or equal to 63" in message
    )
    assert "'productionVariants.1.member.instanceType'" in message
    assert "Member must satisfy enum value set" in message
    assert (
        "Value '0' at 'productionVariants.1.member.initialInstanceCount' failed to satisfy "
        "constraint: Member must have value greater than or equal to 1" in message
    )
    assert excinfo.value.body()["__type"] == "ValidationException"


def test_local_model_data_urls_are_accepted() -> None:
    for url in ("s3://b/p/", "https://b.s3.amazonaws.com/p/", "file:///srv/models/", "/srv/m/"):
        body = {"ModelName": "m", "PrimaryContainer": {"Mode": "MultiModel", "ModelDataUrl": url}}
        wire.parse_request("SageMaker.CreateModel", json.dumps(body).encode())
    body = {"ModelName": "m", "PrimaryContainer": {"ModelDataUrl": "ftp://nope"}}
    with pytest.raises(wire.ControlPlaneError):
        wire.parse_request("SageMaker.CreateModel", json.dumps(body).encode())


_CRASH_MID_WRITE = """
import os, signal, sys
from emulator.control.state_db import ControlStore, Resource, MODELS
store = ControlStore(sys.argv[1])
store.add(MODELS, Resource("committed", 1.0, {"ModelName": "committed"}))
with store._tx() as cur:
    cur.execute("INSERT INTO models (key, name, created, doc) VALUES ('torn', 'torn', 2, '{}')")
    os.kill(os.getpid(), signal.SIGKILL)  # dies holding an open write transaction
"""


def test_a_crash_mid_write_keeps_the_last_committed_state(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH_MID_WRITE, str(db)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    store = ControlStore(db)
    assert [r.name for r in store.all(MODELS)] == ["committed"]
    store.add(MODELS, Resource("after", 3.0, {}))
    assert store.get(MODELS, "AFTER") is not None  # case-insensitive keys
    assert store.get(MODELS, "torn") is None
