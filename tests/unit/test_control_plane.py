"""The control plane over real HTTP with an unmodified boto3 ``sagemaker`` client.

The endpoint runtimes are the unit's neighbour, so a small in-process registry stands in for
them here (the real one, with Triton, is exercised in ``test_control_plane_e2e.py``): it lets a
test hold an endpoint in ``Creating`` or ``Updating`` and make a start fail on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
import uvicorn
from botocore.exceptions import ClientError, WaiterError
from fastapi import FastAPI

from emulator.control import ControlPlaneService, ControlStore
from emulator.hosting.spec import single_variant
from emulator.processes import free_port
from emulator.routes.control import build_control_router
from tests.support import wait_for, wait_until

REGION = "us-east-1"
ACCOUNT = "123456789012"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
FAST = {"Delay": 1, "MaxAttempts": 30}


@dataclass
class FakeEndpoint:
    """What the service reads of a running endpoint: its spec and each variant's instances."""

    spec: Any

    def variant(self, name: str) -> Any:
        found = self.spec.variant(name)
        if found is None:
            return None
        return SimpleNamespace(serving=lambda: [object()] * found.instance_count)


@dataclass
class FakeRuntimes:
    """Runtimes that start when their gate opens; ``model_data`` containing "broken" fails."""

    running: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    hold: set[str] = field(default_factory=set)
    loops: dict[str, asyncio.AbstractEventLoop] = field(default_factory=dict)

    async def _wait(self, name: str) -> None:
        if name in self.hold:
            self.loops[name] = asyncio.get_running_loop()
            gate = self.gates[name] = asyncio.Event()
            await gate.wait()

    async def create(self, spec: Any) -> None:
        self.calls.append(("create", spec.name))
        await self._wait(spec.name)
        model_data = spec.variants[0].container.model_data
        if "broken" in model_data:
            raise RuntimeError(f"could not read {model_data}: NoSuchBucket")
        self.running[spec.name] = FakeEndpoint(spec)

    async def replace(self, spec: Any) -> None:
        self.calls.append(("replace", spec.name))
        await self._wait(spec.name)
        if "broken" in spec.variants[0].container.model_data:
            raise RuntimeError("the new container never became ready")
        self.running[spec.name] = FakeEndpoint(spec)

    async def resize(self, spec: Any) -> None:
        self.calls.append(("resize", spec.name))
        await self._wait(spec.name)
        self.running[spec.name] = FakeEndpoint(spec)

    async def delete(self, name: str) -> None:
        self.calls.append(("delete", name))
        self.running.pop(name, None)

    def get(self, name: str) -> Any:
        return self.running.get(name)

    def names(self) -> list[str]:
        return sorted(self.running)


class ServerThread:
    """A uvicorn server in a thread, with the loop exposed so tests can open gates."""

    def __init__(self, app: FastAPI):
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        wait_until(lambda: self.server.started, 30, "the server to start",
                   still_going=self._thread_alive, interval_s=0.01)
        return self

    def _thread_alive(self) -> None:
        assert self.thread.is_alive(), "the server's thread ended before it started"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def build(tmp_path: Path, runtimes: FakeRuntimes) -> tuple[FastAPI, ControlPlaneService]:
    store = ControlStore(tmp_path / "control.sqlite3")
    service = ControlPlaneService(store=store, registry=runtimes, region=REGION)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await service.restore()  # as the emulator's app does at startup
        yield

    app = FastAPI(lifespan=lifespan)
    app.include_router(build_control_router(service))
    return app, service


def client(url: str):  # type: ignore[no-untyped-def]
    return boto3.client(
        "sagemaker",
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )


@pytest.fixture()
def runtimes() -> FakeRuntimes:
    return FakeRuntimes()


@pytest.fixture()
def server(tmp_path: Path, runtimes: FakeRuntimes) -> Iterator[ServerThread]:
    app, _ = build(tmp_path, runtimes)
    with ServerThread(app) as running:
        yield running


@pytest.fixture()
def sm(server: ServerThread):  # type: ignore[no-untyped-def]
    return client(server.url)


def make_model(sm, name: str, data: str = "s3://bucket/models/", **container: Any) -> str:  # type: ignore[no-untyped-def]
    definition = {"Image": IMAGE, "Mode": "MultiModel", "ModelDataUrl": data, **container}
    return sm.create_model(
        ModelName=name,
        PrimaryContainer=definition,
        ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
    )["ModelArn"]


def make_config(sm, name: str, model: str, variant: str = "AllTraffic") -> str:  # type: ignore[no-untyped-def]
    return sm.create_endpoint_config(
        EndpointConfigName=name,
        ProductionVariants=[
            {
                "VariantName": variant,
                "ModelName": model,
                "InstanceType": "ml.m5.xlarge",
                "InitialInstanceCount": 1,
            }
        ],
    )["EndpointConfigArn"]


def error_of(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, str, int]:
    err = excinfo.value.response
    return err["Error"]["Code"], err["Error"]["Message"], err["ResponseMetadata"]["HTTPStatusCode"]


def test_model_crud_with_arns_and_epoch_times(sm) -> None:  # type: ignore[no-untyped-def]
    before = time.time()
    arn = make_model(sm, "My-Model", Environment={"SAGEMAKER_TRITON_LOG_INFO": "false"})
    assert arn == f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model/my-model"
    described = sm.describe_model(ModelName="My-Model")
    assert described["ModelName"] == "My-Model"
    assert described["ModelArn"] == arn
    assert described["PrimaryContainer"]["Environment"] == {"SAGEMAKER_TRITON_LOG_INFO": "false"}
    assert described["PrimaryContainer"]["Mode"] == "MultiModel"
    assert before - 1 <= described["CreationTime"].timestamp() <= time.time() + 1
    with pytest.raises(ClientError) as excinfo:
        make_model(sm, "my-model")  # names are unique without regard to case, like the ARN
    assert error_of(excinfo) == (
        "ValidationException",
        f'Cannot create already existing model "{arn}".',
        400,
    )
    sm.delete_model(ModelName="My-Model")
    with pytest.raises(ClientError) as excinfo:
        sm.describe_model(ModelName="My-Model")
    assert error_of(excinfo)[1] == f'Could not find model "{arn}".'


def test_field_validation_messages(sm) -> None:  # type: ignore[no-untyped-def]
    # botocore validates lengths client-side but not patterns: the service must answer.
    with pytest.raises(ClientError) as excinfo:
        sm.create_model(
            ModelName="bad_name", PrimaryContainer={"Image": IMAGE, "ModelDataUrl": "s3://b/k"}
        )
    code, message, status = error_of(excinfo)
    assert (code, status) == ("ValidationException", 400)
    assert message.startswith("1 validation error detected: Value 'bad_name' at 'modelName'")
    assert "regular expression pattern" in message
    with pytest.raises(ClientError) as excinfo:
        sm.create_model(ModelName="m1")
    assert "PrimaryContainer or Containers" in error_of(excinfo)[1]
    make_model(sm, "m1")
    with pytest.raises(ClientError) as excinfo:
        make_config(sm, "c1", "m1", variant="bad variant")
    assert "'productionVariants.1.member.variantName'" in error_of(excinfo)[1]
    with pytest.raises(ClientError) as excinfo:
        make_config(sm, "c1", "missing-model")
    assert error_of(excinfo)[1] == (
        f'Could not find model "arn:aws:sagemaker:{REGION}:{ACCOUNT}:model/missing-model".'
    )


def test_endpoint_lifecycle_and_waiters(sm, runtimes: FakeRuntimes) -> None:  # type: ignore[no-untyped-def]
    make_model(sm, "m1", MultiModelConfig={"ModelCacheSetting": "Disabled"})
    make_config(sm, "c1", "m1")
    arn = sm.create_endpoint(EndpointName="Ep1", EndpointConfigName="c1")["EndpointArn"]
    assert arn == f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/ep1"
    sm.get_waiter("endpoint_in_service").wait(EndpointName="Ep1", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="Ep1")
    assert described["EndpointStatus"] == "InService"
    assert described["EndpointConfigName"] == "c1"
    (variant,) = described["ProductionVariants"]
    assert variant["VariantName"] == "AllTraffic"
    assert variant["CurrentInstanceCount"] == 1
    assert variant["DeployedImages"][0]["SpecifiedImage"] == IMAGE
    spec = runtimes.running["Ep1"].spec.variants[0].container
    assert (spec.mode, spec.model_data, spec.model_cache_enabled) == (
        "MultiModel",
        "s3://bucket/models/",
        False,
    )
    with pytest.raises(ClientError) as excinfo:
        sm.create_endpoint(EndpointName="ep1", EndpointConfigName="c1")
    assert error_of(excinfo)[1] == f'Cannot create already existing endpoint "{arn}".'

    sm.delete_endpoint(EndpointName="Ep1")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="Ep1", WaiterConfig=FAST)
    assert "Ep1" not in runtimes.running
    with pytest.raises(ClientError) as excinfo:
        sm.delete_endpoint(EndpointName="Ep1")
    assert error_of(excinfo)[1] == f'Could not find endpoint "{arn}".'


def test_creating_then_failed_with_reason(sm, runtimes: FakeRuntimes, server) -> None:  # type: ignore[no-untyped-def]
    make_model(sm, "broken-model", data="s3://broken-bucket/models/")
    make_config(sm, "c-broken", "broken-model")
    runtimes.hold.add("ep-broken")
    sm.create_endpoint(EndpointName="ep-broken", EndpointConfigName="c-broken")
    # The runtime is held: the endpoint must be observable in Creating, as on AWS.
    assert sm.describe_endpoint(EndpointName="ep-broken")["EndpointStatus"] == "Creating"
    assert sm.list_endpoints(StatusEquals="Creating")["Endpoints"][0]["EndpointName"] == "ep-broken"
    open_gate(server, runtimes, "ep-broken")
    with pytest.raises(WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="ep-broken", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="ep-broken")
    assert described["EndpointStatus"] == "Failed"
    assert "NoSuchBucket" in described["FailureReason"]
    with pytest.raises(ClientError) as excinfo:
        sm.update_endpoint(EndpointName="ep-broken", EndpointConfigName="c-broken")
    assert "only DeleteEndpoint" in error_of(excinfo)[1]
    sm.delete_endpoint(EndpointName="ep-broken")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="ep-broken", WaiterConfig=FAST)


def open_gate(server: ServerThread, runtimes: FakeRuntimes, name: str) -> None:
    runtimes.hold.discard(name)
    gate = wait_for(lambda: runtimes.gates.get(name), 10, "the runtime to start waiting",
                    interval_s=0.01)
    # The gate lives on the server's loop; set it from that loop's thread.
    runtimes.loops[name].call_soon_threadsafe(gate.set)


def test_update_swaps_without_leaving_service(sm, runtimes: FakeRuntimes, server) -> None:  # type: ignore[no-untyped-def]
    make_model(sm, "m-a", data="s3://bucket/a/")
    make_model(sm, "m-b", data="s3://bucket/b/")
    make_config(sm, "c-a", "m-a")
    make_config(sm, "c-b", "m-b")
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="c-a")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    runtimes.hold.add("ep")
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="c-b")
    during = sm.describe_endpoint(EndpointName="ep")
    assert during["EndpointStatus"] == "Updating"
    assert during["EndpointConfigName"] == "c-a"  # still serving the old deployment
    assert during["PendingDeploymentSummary"]["EndpointConfigName"] == "c-b"
    with pytest.raises(ClientError) as excinfo:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="c-b")
    assert error_of(excinfo)[1].startswith("Cannot update in-progress endpoint")
    open_gate(server, runtimes, "ep")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    after = sm.describe_endpoint(EndpointName="ep")
    assert after["EndpointConfigName"] == "c-b"
    assert "PendingDeploymentSummary" not in after
    assert runtimes.running["ep"].spec.variants[0].container.model_data == "s3://bucket/b/"
    assert ("delete", "ep") not in runtimes.calls  # replaced in place, never stopped

    # A failing update rolls back: still InService on the old config, with the reason.
    make_model(sm, "m-broken", data="s3://broken/")
    make_config(sm, "c-broken", "m-broken")
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="c-broken")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    rolled_back = sm.describe_endpoint(EndpointName="ep")
    assert rolled_back["EndpointConfigName"] == "c-b"
    assert "never became ready" in rolled_back["FailureReason"]


def test_list_endpoints_pagination_sorting_filters(sm) -> None:  # type: ignore[no-untyped-def]
    make_model(sm, "m1")
    make_config(sm, "c1", "m1")
    names = [f"ep-{i:02d}" for i in range(7)] + ["other"]
    for name in names:
        sm.create_endpoint(EndpointName=name, EndpointConfigName="c1")
    for name in names:
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        kwargs = {"MaxResults": 3, "SortBy": "Name", "SortOrder": "Ascending"}
        if token:
            kwargs["NextToken"] = token
        page = sm.list_endpoints(NameContains="ep-", **kwargs)
        pages += 1
        seen += [e["EndpointName"] for e in page["Endpoints"]]
        token = page.get("NextToken")
        if not token:
            break
    assert seen == names[:7]
    assert pages == 3
    desc = sm.list_endpoints(SortBy="Name", SortOrder="Descending", MaxResults=100)["Endpoints"]
    assert [e["EndpointName"] for e in desc] == sorted(names, reverse=True)
    # Default order is CreationTime, newest first.
    newest = sm.list_endpoints(MaxResults=1)["Endpoints"][0]["EndpointName"]
    assert newest == "other"
    paginated = sm.get_paginator("list_endpoints").paginate(
        PaginationConfig={"PageSize": 2}, StatusEquals="InService"
    )
    assert sorted(e["EndpointName"] for p in paginated for e in p["Endpoints"]) == sorted(names)
    assert sm.list_endpoints(StatusEquals="Failed")["Endpoints"] == []
    with pytest.raises(ClientError) as excinfo:
        sm.list_endpoints(NextToken="not-a-token")
    assert error_of(excinfo)[0] == "ValidationException"


def test_list_models_and_configs(sm) -> None:  # type: ignore[no-untyped-def]
    for name in ("alpha", "beta", "gamma"):
        make_model(sm, name)
        make_config(sm, f"cfg-{name}", name)
    models = sm.list_models(SortBy="Name", SortOrder="Ascending")["Models"]
    assert [m["ModelName"] for m in models] == ["alpha", "beta", "gamma"]
    assert models[0]["ModelArn"].endswith(":model/alpha")
    configs = sm.list_endpoint_configs(NameContains="BET")["EndpointConfigs"]
    assert [c["EndpointConfigName"] for c in configs] == ["cfg-beta"]
    described = sm.describe_endpoint_config(EndpointConfigName="cfg-beta")
    assert described["ProductionVariants"][0]["ModelName"] == "beta"
    sm.delete_endpoint_config(EndpointConfigName="cfg-beta")
    with pytest.raises(ClientError) as excinfo:
        sm.delete_endpoint_config(EndpointConfigName="cfg-beta")
    assert error_of(excinfo)[1] == (
        f'Could not find endpoint configuration "arn:aws:sagemaker:{REGION}:{ACCOUNT}:'
        'endpoint-config/cfg-beta".'
    )


def test_list_tags_gives_each_resources_creation_tags(sm, runtimes: FakeRuntimes) -> None:  # type: ignore[no-untyped-def]
    team = [{"Key": "team", "Value": "ml"}, {"Key": "cost-center", "Value": "42"}]
    model_arn = sm.create_model(
        ModelName="Tagged", ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/x", Tags=team,
        PrimaryContainer={"Image": IMAGE, "Mode": "MultiModel",
                          "ModelDataUrl": "s3://bucket/models/"})["ModelArn"]
    config_arn = sm.create_endpoint_config(
        EndpointConfigName="tagged-config", Tags=team[:1], ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": "Tagged", "InstanceType": "ml.m5.xlarge",
            "InitialInstanceCount": 1}])["EndpointConfigArn"]
    endpoint_arn = sm.create_endpoint(EndpointName="tagged", EndpointConfigName="tagged-config",
                                      Tags=team[1:])["EndpointArn"]
    untagged_arn = make_config(sm, "untagged", "Tagged")
    assert sm.list_tags(ResourceArn=model_arn)["Tags"] == team  # the ARN's name is lowercased
    assert sm.list_tags(ResourceArn=config_arn)["Tags"] == team[:1]
    assert sm.list_tags(ResourceArn=endpoint_arn, MaxResults=50)["Tags"] == team[1:]
    assert sm.list_tags(ResourceArn=untagged_arn)["Tags"] == []
    # The endpoint of ``mme serve --model-data`` (no CreateEndpoint made it) has none.
    runtimes.running["local"] = FakeEndpoint(single_variant("local", "s3://bucket/models/"))
    local_arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/local"
    assert sm.list_tags(ResourceArn=local_arn)["Tags"] == []
    with pytest.raises(ClientError) as excinfo:
        sm.list_tags(ResourceArn=model_arn.replace("tagged", "gone"))
    assert error_of(excinfo)[:2] == (
        "ValidationException",
        f'Could not find model "arn:aws:sagemaker:{REGION}:{ACCOUNT}:model/gone".')
    with pytest.raises(ClientError) as excinfo:
        sm.list_tags(ResourceArn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/t")
    assert "names no model, endpoint config, endpoint or inference component" in \
        error_of(excinfo)[1]


def test_unknown_operation_and_bad_json(server) -> None:  # type: ignore[no-untyped-def]
    import json
    import urllib.error
    import urllib.request

    def post(target: str, body: bytes) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            server.url + "/",
            data=body,
            headers={"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1"},
        )
        try:
            with urllib.request.urlopen(request) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    assert post("SageMaker.CreateTrainingJob", b"{}")[1]["__type"] == "UnknownOperationException"
    assert post("SageMaker.ListModels", b"{nope")[1]["__type"] == "SerializationException"
    status, body = post("SageMaker.DescribeEndpoint", b"{}")
    assert status == 400
    assert body == {
        "__type": "ValidationException",
        "message": "1 validation error detected: Value null at 'endpointName' failed to satisfy "
        "constraint: Member must not be null",
    }


def test_state_survives_restart(tmp_path: Path) -> None:
    first = FakeRuntimes()
    app, _ = build(tmp_path, first)
    with ServerThread(app) as running:
        sm = client(running.url)
        make_model(sm, "m1")
        make_config(sm, "c1", "m1")
        sm.create_endpoint(EndpointName="kept", EndpointConfigName="c1")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="kept", WaiterConfig=FAST)
        created = sm.describe_endpoint(EndpointName="kept")["CreationTime"]
    second = FakeRuntimes()
    app, _ = build(tmp_path, second)
    with ServerThread(app) as running:
        sm = client(running.url)
        # restore() ran at startup: the runtime is back and the endpoint InService.
        assert ("create", "kept") in second.calls
        described = sm.describe_endpoint(EndpointName="kept")
        assert described["EndpointStatus"] == "InService"
        assert described["CreationTime"] == created
        assert [m["ModelName"] for m in sm.list_models()["Models"]] == ["m1"]
        assert sm.describe_endpoint_config(EndpointConfigName="c1")["EndpointConfigName"] == "c1"
