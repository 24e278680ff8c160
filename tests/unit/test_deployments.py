"""Guarded deployments (UpdateEndpoint with DeploymentConfig) over real HTTP with boto3.

The control plane is real; the endpoint runtimes are a small in-process stand-in with two
generations (the real registry with Triton is in ``tests/integration/test_deployments.py``), and
the CloudWatch alarms a stand-in with the interface the deployment watches (``exists``, ``state``,
``subscribe``), so state machines, messages and restarts are checked in seconds.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from fastapi import FastAPI

from emulator.clock import Clock
from emulator.control import ControlPlaneService, ControlStore
from emulator.hosting import deployment as guardrails
from emulator.routes.control import build_control_router
from tests import support
from tests.support import wait_for_async
from tests.unit.test_control_plane import (
    ACCOUNT,
    FAST,
    IMAGE,
    REGION,
    FakeEndpoint,
    FakeRuntimes,
    ServerThread,
    client,
    error_of,
)

# One emulated hour per real second: a 600 s bake takes 0.17 s.
SCALE = 3600.0


class StandInAlarms:
    """The AlarmStore interface deployments use; ``set`` changes a state from the test."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.listeners: list[Callable[[str, str, str], None]] = []
        self.lock = threading.Lock()

    def exists(self, name: str) -> bool:
        return name in self.states

    def state(self, name: str) -> str | None:
        return self.states.get(name)

    def subscribe(self, callback: Callable[[str, str, str], None]) -> Callable[[], None]:
        with self.lock:
            self.listeners.append(callback)
        return lambda: self.listeners.remove(callback)

    def set(self, name: str, state: str) -> None:
        old = self.states.get(name, "INSUFFICIENT_DATA")
        self.states[name] = state
        with self.lock:
            listeners = list(self.listeners)
        for listener in listeners:
            listener(name, old, state)


@dataclass
class FakeGenerations(FakeRuntimes):
    """FakeRuntimes with a green generation beside each endpoint."""

    greens: dict[str, Any] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)
    deployments: dict[str, Any] = field(default_factory=dict)
    steps: list[tuple[str, Any]] = field(default_factory=list)
    green_gate: threading.Event = field(default_factory=threading.Event)
    drop_gate: threading.Event = field(default_factory=threading.Event)

    async def start_green(self, spec: Any) -> None:
        self.steps.append(("start_green", spec.variants[0].container.model_data))
        await wait_for_async(self.green_gate.is_set, 60, "the test to let green start")
        if "broken" in spec.variants[0].container.model_data:
            raise RuntimeError("the new container never became ready")
        self.greens[spec.name] = FakeEndpoint(spec)
        self.shares[spec.name] = 0.0

    def shift(self, name: str, share: float) -> None:
        self.steps.append(("shift", share))
        self.shares[name] = share

    def traffic_share(self, name: str) -> float:
        return self.shares.get(name, 0.0) if name in self.greens else 0.0

    def promote(self, name: str) -> Any:
        self.steps.append(("promote", name))
        old = self.running[name]
        self.running[name] = self.greens.pop(name)
        self.shares.pop(name, None)
        return old

    async def retire(self, endpoint: Any) -> None:
        self.steps.append(("retire", endpoint.spec.variants[0].container.model_data))

    def green(self, name: str) -> Any:
        return self.greens.get(name)

    async def resize_generation(self, name: str, green: bool, count: int) -> None:
        self.steps.append(("green" if green else "blue", count))

    async def drop_green(self, name: str) -> None:
        self.shares[name] = 0.0  # every new call back to blue at once, then the drain
        await wait_for_async(self.drop_gate.is_set, 60, "the test to let the drain end")
        self.steps.append(("drop_green", name))
        self.greens.pop(name, None)
        self.shares.pop(name, None)


def build(store_path: Path, runtimes: FakeGenerations, alarms: StandInAlarms,
          scale: float = SCALE) -> tuple[FastAPI, ControlPlaneService]:
    service = ControlPlaneService(store=ControlStore(store_path), registry=runtimes,
                                  region=REGION, emulated_clock=Clock(scale), alarms=alarms)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await service.restore()
        yield
        await service.aclose()

    app = FastAPI(lifespan=lifespan)
    app.include_router(build_control_router(service))
    return app, service


@pytest.fixture()
def scale() -> float:
    return SCALE  # a test that needs a long bake parametrizes "scale" lower


@pytest.fixture()
def runtimes() -> FakeGenerations:
    runtimes = FakeGenerations()
    runtimes.green_gate.set()
    runtimes.drop_gate.set()
    return runtimes


@pytest.fixture()
def alarms() -> StandInAlarms:
    alarms = StandInAlarms()
    alarms.states.update({"errors-high": "OK", "latency-high": "OK"})
    return alarms


@pytest.fixture()
def sm(tmp_path: Path, runtimes: FakeGenerations, alarms: StandInAlarms,  # type: ignore[no-untyped-def]
       scale: float):
    app, _ = build(tmp_path / "control.sqlite3", runtimes, alarms, scale)
    with ServerThread(app) as server:
        sm = unchecked_client(server.url)
        for name, data in (("m-blue", "s3://bucket/blue/"), ("m-green", "s3://bucket/green/"),
                           ("m-broken", "s3://bucket/broken/")):
            sm.create_model(ModelName=name, ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
                            PrimaryContainer={"Image": IMAGE, "Mode": "MultiModel",
                                              "ModelDataUrl": data})
        for config, model, count in (("blue", "m-blue", 2), ("green", "m-green", 4),
                                     ("broken", "m-broken", 2)):
            sm.create_endpoint_config(EndpointConfigName=config, ProductionVariants=[
                {"VariantName": "AllTraffic", "ModelName": model, "InstanceType": "ml.m5.xlarge",
                 "InitialInstanceCount": count, "InitialVariantWeight": 1.0}])
        sm.create_endpoint_config(EndpointConfigName="two-variants", ProductionVariants=[
            {"VariantName": v, "ModelName": "m-green", "InstanceType": "ml.m5.xlarge",
             "InitialInstanceCount": 2} for v in ("AllTraffic", "B")])
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="blue")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
        yield sm


def unchecked_client(url: str):  # type: ignore[no-untyped-def]
    """boto3 without its own checks of minimums, so the server's answers are what is tested."""
    return boto3.client("sagemaker", endpoint_url=url, region_name=REGION,
                        aws_access_key_id="x", aws_secret_access_key="x",
                        config=Config(parameter_validation=False))


def canary(percent: int = 25, wait: int = 600, alarm_names: tuple[str, ...] = ("errors-high",),
           **more: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"BlueGreenUpdatePolicy": {
        "TrafficRoutingConfiguration": {
            "Type": "CANARY", "WaitIntervalInSeconds": wait,
            "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": percent}},
        **more}}
    if alarm_names:
        config["AutoRollbackConfiguration"] = {"Alarms": [{"AlarmName": a} for a in alarm_names]}
    return config


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    return support.wait_for(condition, timeout, what)


def status(sm) -> str:  # type: ignore[no-untyped-def]
    return str(sm.describe_endpoint(EndpointName="ep")["EndpointStatus"])


# -- the plan ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "counts", "shares"), [
    ({"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0}}}, [1], (1.0,)),
    (canary(10), [1], (0.1, 1.0)),
    ({"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "CANARY", "WaitIntervalInSeconds": 5,
        "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 1}}}}, [4], (0.25, 1.0)),
    ({"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "LINEAR", "WaitIntervalInSeconds": 5,
        "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 30}}}}, [1],
     (0.3, 0.6, 0.9, 1.0)),
    ({"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1},
                              "WaitIntervalInSeconds": 5}}, [4], (0.25, 0.5, 0.75, 1.0)),
    ({"AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "a"}]}}, [1], (1.0,)),
])
def test_plan_steps(config: dict[str, Any], counts: list[int], shares: tuple[float, ...]) -> None:
    assert guardrails.plan(config, counts).shares == shares


# -- every bad input: AWS's error, nothing changed --------------------------------------------

BAD_INPUTS = [
    ({"DeploymentConfig": canary(alarm_names=("no-such-alarm",))}, "no-such-alarm"),
    ({"DeploymentConfig": canary(60)}, "less than or equal to 50%"),
    ({"DeploymentConfig": {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "CANARY", "WaitIntervalInSeconds": 60}}}}, "CanarySize is required"),
    ({"DeploymentConfig": {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "CANARY", "WaitIntervalInSeconds": 60,
        "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 3}}}}}, "3 instances of 4"),
    ({"DeploymentConfig": {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "LINEAR", "WaitIntervalInSeconds": 60,
        "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 5}}}}}, "between 10% and 50%"),
    ({"DeploymentConfig": {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 60,
        "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 20}}}}},
     "LinearStepSize is only valid"),
    ({"DeploymentConfig": {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 4000}}}},
     "Member must have value less than or equal to 3600"),
    ({"DeploymentConfig": canary(MaximumExecutionTimeoutInSeconds=100)},
     "Member must have value greater than or equal to 600"),
    ({"DeploymentConfig": canary(wait=600, TerminationWaitInSeconds=300,
                                 MaximumExecutionTimeoutInSeconds=800)},
     "must be larger than the total waiting time"),
    ({"DeploymentConfig": {**canary(), "RollingUpdatePolicy": {
        "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1},
        "WaitIntervalInSeconds": 5}}}, "not both"),
    ({"DeploymentConfig": {"RollingUpdatePolicy": {
        "MaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": 80},
        "WaitIntervalInSeconds": 5}}}, "between 5% and 50%"),
    ({"DeploymentConfig": {"AutoRollbackConfiguration": {"Alarms": []}}},
     "Member must have length greater than or equal to 1"),
    ({"DeploymentConfig": canary(), "RetainDeploymentConfig": True}, "not both"),
    ({"ExcludeRetainedVariantProperties": [{"VariantPropertyType": "DesiredWeight"}]},
     "only when RetainAllVariantProperties is true"),
]


@pytest.mark.parametrize(("params", "message"), BAD_INPUTS)
def test_bad_input_is_refused_and_changes_nothing(sm, runtimes: FakeGenerations,  # type: ignore[no-untyped-def]
                                                  params: dict[str, Any], message: str) -> None:
    before = sm.describe_endpoint(EndpointName="ep")
    with pytest.raises(ClientError) as excinfo:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="green", **params)
    code, text, http = error_of(excinfo)
    assert (code, http) == ("ValidationException", 400)
    assert message in text
    after = sm.describe_endpoint(EndpointName="ep")
    for key in ("EndpointStatus", "EndpointConfigName", "LastModifiedTime"):
        assert after[key] == before[key]
    assert "PendingDeploymentSummary" not in after and "LastDeploymentConfig" not in after
    assert runtimes.steps == []


def test_rolling_update_refused_for_several_variants_and_variant_names_must_match(sm) -> None:  # type: ignore[no-untyped-def]
    rolling = {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT",
                                                            "Value": 1},
                                       "WaitIntervalInSeconds": 5}}
    with pytest.raises(ClientError) as excinfo:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="two-variants",
                           DeploymentConfig=rolling)
    assert "same variant names" in error_of(excinfo)[1]
    assert status(sm) == "InService"
    # An endpoint with two variants: the names match, and a rolling update is refused
    # (documented exclusion); a blue/green one is accepted.
    sm.create_endpoint(EndpointName="ep2", EndpointConfigName="two-variants")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep2", WaiterConfig=FAST)
    with pytest.raises(ClientError) as excinfo:
        sm.update_endpoint(EndpointName="ep2", EndpointConfigName="two-variants",
                           DeploymentConfig=rolling)
    assert error_of(excinfo)[:1] == ("ValidationException",)
    assert "not supported for endpoints with multiple production variants" in \
        error_of(excinfo)[1]
    assert sm.describe_endpoint(EndpointName="ep2")["EndpointStatus"] == "InService"


def test_update_while_updating_is_refused(sm, runtimes: FakeGenerations) -> None:  # type: ignore[no-untyped-def]
    runtimes.green_gate.clear()  # green stays in Creating
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="green", DeploymentConfig=canary())
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointStatus"] == "Updating"
    (pending,) = described["PendingDeploymentSummary"]["ProductionVariants"]
    assert pending["VariantStatus"][0]["Status"] == "Creating"
    with pytest.raises(ClientError) as excinfo:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="blue")
    assert error_of(excinfo)[1] == (
        f'Cannot update in-progress endpoint "arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/ep".')
    runtimes.green_gate.set()


# -- the runs ---------------------------------------------------------------------------------


def test_canary_bakes_then_completes(sm, runtimes: FakeGenerations) -> None:  # type: ignore[no-untyped-def]
    config = canary(25, wait=1800, TerminationWaitInSeconds=600)  # 0.5 s bakes, 0.17 s wait
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="green", DeploymentConfig=config)
    baking = wait_for(lambda: (d := sm.describe_endpoint(EndpointName="ep"))
                      .get("PendingDeploymentSummary", {}).get("ProductionVariants", [{}])[0]
                      .get("VariantStatus", [{}])[0].get("Status") == "Baking" and d,
                      "the canary's bake")
    assert baking["EndpointStatus"] == "Updating"
    assert baking["EndpointConfigName"] == "blue"
    (blue,) = baking["ProductionVariants"]
    (green,) = baking["PendingDeploymentSummary"]["ProductionVariants"]
    assert blue["CurrentWeight"] == pytest.approx(0.75)
    assert green["CurrentWeight"] == pytest.approx(0.25)
    assert (green["CurrentInstanceCount"], green["DesiredInstanceCount"]) == (4, 4)
    assert "Step 1 of 2: 25% of traffic" in green["VariantStatus"][0]["StatusMessage"]
    assert baking["LastDeploymentConfig"] == config
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    done = sm.describe_endpoint(EndpointName="ep")
    assert done["EndpointConfigName"] == "green"
    assert "FailureReason" not in done and "PendingDeploymentSummary" not in done
    assert done["LastDeploymentConfig"] == config
    assert done["ProductionVariants"][0]["CurrentWeight"] == 1.0
    assert runtimes.steps == [("start_green", "s3://bucket/green/"), ("shift", 0.25),
                              ("shift", 1.0), ("promote", "ep"),
                              ("retire", "s3://bucket/blue/")]


@pytest.mark.parametrize("scale", [36.0])
def test_alarm_rolls_the_canary_back(sm, runtimes: FakeGenerations,  # type: ignore[no-untyped-def]
                                     alarms: StandInAlarms) -> None:
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="green",
                       DeploymentConfig=canary(25, wait=3600))  # a bake of 100 s
    wait_for(lambda: ("shift", 0.25) in runtimes.steps, "the canary's traffic")
    runtimes.drop_gate.clear()  # green drains until the test lets it go
    alarms.set("errors-high", "ALARM")
    rolling_back = wait_for(lambda: (d := sm.describe_endpoint(EndpointName="ep"))[
        "EndpointStatus"] == "RollingBack" and d, "RollingBack")
    assert '"errors-high"' in rolling_back["FailureReason"]
    assert rolling_back["EndpointConfigName"] == "blue"
    assert rolling_back["ProductionVariants"][0]["CurrentWeight"] == 1.0  # all back on blue
    with pytest.raises(ClientError) as excinfo:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="green")
    assert "Cannot update in-progress endpoint" in error_of(excinfo)[1]
    runtimes.drop_gate.set()
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == "blue"
    assert '"errors-high"' in described["FailureReason"]
    assert "step 1 of 2" in described["FailureReason"]
    assert "PendingDeploymentSummary" not in described
    assert runtimes.steps[-1] == ("drop_green", "ep")
    assert ("shift", 1.0) not in runtimes.steps
    assert runtimes.running["ep"].spec.variants[0].container.model_data == "s3://bucket/blue/"


def test_an_alarm_already_in_alarm_rolls_back_at_the_first_step(sm, runtimes: FakeGenerations,  # type: ignore[no-untyped-def]
                                                                alarms: StandInAlarms) -> None:
    alarms.set("latency-high", "ALARM")
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="green",
                       DeploymentConfig=canary(alarm_names=("errors-high", "latency-high")))
    wait_for(lambda: ("drop_green", "ep") in runtimes.steps, "the rollback")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    assert '"latency-high"' in sm.describe_endpoint(EndpointName="ep")["FailureReason"]


def test_green_that_cannot_start_leaves_blue_serving(sm, runtimes: FakeGenerations) -> None:  # type: ignore[no-untyped-def]
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="broken", DeploymentConfig=canary())
    wait_for(lambda: ("drop_green", "ep") in runtimes.steps, "the rollback")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == "blue"
    assert "never became ready" in described["FailureReason"]
    assert not any(step == "shift" for step, _ in runtimes.steps)


def test_retained_properties_and_deployment_config(sm, runtimes: FakeGenerations) -> None:  # type: ignore[no-untyped-def]
    config = {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0}}}
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="green", DeploymentConfig=config,
                       RetainAllVariantProperties=True)
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == "green"
    assert described["ProductionVariants"][0]["DesiredInstanceCount"] == 2  # blue's, retained
    runtimes.steps.clear()
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="blue", RetainDeploymentConfig=True,
                       RetainAllVariantProperties=True,
                       ExcludeRetainedVariantProperties=[
                           {"VariantPropertyType": "DesiredInstanceCount"}])
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["LastDeploymentConfig"] == config
    assert runtimes.steps[:2] == [("start_green", "s3://bucket/blue/"), ("shift", 1.0)]


def test_a_restart_mid_deployment_resumes_at_its_step(tmp_path: Path) -> None:
    store = tmp_path / "control.sqlite3"
    alarms = StandInAlarms()
    alarms.states["errors-high"] = "OK"
    first = FakeGenerations()
    first.green_gate.set()
    first.drop_gate.set()
    app, _ = build(store, first, alarms, scale=36.0)  # a bake of 100 s: still baking at stop
    with ServerThread(app) as server:
        sm = client(server.url)
        sm.create_model(ModelName="m1", ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
                        PrimaryContainer={"Image": IMAGE, "Mode": "MultiModel",
                                          "ModelDataUrl": "s3://bucket/blue/"})
        sm.create_model(ModelName="m2", ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
                        PrimaryContainer={"Image": IMAGE, "Mode": "MultiModel",
                                          "ModelDataUrl": "s3://bucket/green/"})
        for config, model in (("c1", "m1"), ("c2", "m2")):
            sm.create_endpoint_config(EndpointConfigName=config, ProductionVariants=[
                {"VariantName": "AllTraffic", "ModelName": model,
                 "InstanceType": "ml.m5.xlarge", "InitialInstanceCount": 1}])
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="c1")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="c2",
                           DeploymentConfig=canary(20, wait=3600))
        wait_for(lambda: ("shift", 0.2) in first.steps, "the canary's traffic")
    # The server stopped mid-bake (its lifespan cancelled the deployment, as a SIGTERM does).
    second = FakeGenerations()
    second.green_gate.set()
    second.drop_gate.set()
    # Now 4 s bakes: long enough that a busy machine still sees the resumed step baking.
    app, _ = build(store, second, copy.copy(alarms), scale=900.0)
    with ServerThread(app) as server:
        sm = client(server.url)
        resumed = wait_for(lambda: (d := sm.describe_endpoint(EndpointName="ep"))
                           .get("PendingDeploymentSummary", {}).get("ProductionVariants", [{}])
                           [0].get("VariantStatus", [{}])[0].get("Status") == "Baking" and d,
                           "the resumed bake")
        assert resumed["EndpointStatus"] == "Updating"
        message = resumed["PendingDeploymentSummary"]["ProductionVariants"][0][
            "VariantStatus"][0]["StatusMessage"]
        assert "Step 1 of 2" in message and "resumed after an emulator restart" in message
        sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
        assert sm.describe_endpoint(EndpointName="ep")["EndpointConfigName"] == "c2"
    assert second.calls[0] == ("create", "ep")  # blue came back first
    assert second.steps[:3] == [("start_green", "s3://bucket/green/"), ("shift", 0.2),
                                ("shift", 1.0)]


@pytest.mark.parametrize("scale", [36.0])
def test_delete_during_a_deployment_stops_both_generations(sm, runtimes: FakeGenerations) -> None:  # type: ignore[no-untyped-def]
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="green",
                       DeploymentConfig=canary(wait=3600))
    wait_for(lambda: ("shift", 0.25) in runtimes.steps, "the canary's traffic")
    sm.delete_endpoint(EndpointName="ep")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="ep", WaiterConfig=FAST)
    assert ("delete", "ep") in runtimes.calls


@pytest.mark.parametrize("scale", [900.0])  # the deadline 3.9 s away, not 1 s: a busy runner
def test_a_deployment_past_its_maximum_execution_time_rolls_back(  # type: ignore[no-untyped-def]
        sm, runtimes: FakeGenerations) -> None:
    # Two bakes of 1,800 s cannot finish within 3,500 s: the second step is cut at the deadline
    # (the first ends well before it, however slowly the new fleet starts on a busy machine).
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="green", DeploymentConfig=canary(
        25, wait=1800, MaximumExecutionTimeoutInSeconds=3500))
    wait_for(lambda: ("drop_green", "ep") in runtimes.steps, "the rollback")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == "blue"
    assert "MaximumExecutionTimeoutInSeconds (3500 s)" in described["FailureReason"]
    assert ("shift", 1.0) in runtimes.steps and ("promote", "ep") not in runtimes.steps


@pytest.mark.parametrize(("phase", "status", "config", "after"), [
    ("rolling_back", "RollingBack", "c1", "InService"),  # the rollback finishes
    ("terminating", "Updating", "c2", "InService"),  # green was the endpoint: the update is done
    ("rolling_back", "RollingBack", "broken", "UpdateRollbackFailed"),  # blue cannot come back
])
def test_a_restart_while_rolling_back_or_terminating_ends_the_deployment(
        tmp_path: Path, phase: str, status: str, config: str, after: str) -> None:
    from emulator.control.deployments import Progress
    from emulator.control.state_db import Deployment, EndpointRecord

    store = ControlStore(tmp_path / "control.sqlite3")
    spec = {"name": "ep", "variants": [{"name": "AllTraffic", "container": {
        "model_data": f"s3://bucket/{config}/", "mode": "MultiModel"}}]}
    plan = guardrails.plan(canary(), [1]).to_doc()
    store.add_endpoint(EndpointRecord(
        name="ep", created=1.0, modified=1.0, status=status,
        current=Deployment(config, [], spec),
        pending=Deployment("c2", [], spec) if phase == "rolling_back" else None,
        failure_reason="alarm x" if phase == "rolling_back" else None,
        deployment=Progress(plan=plan, started=1.0, phase=phase).to_doc()))
    store.close()
    runtimes = FakeGenerations()
    runtimes.green_gate.set()
    runtimes.drop_gate.set()
    app, _ = build(tmp_path / "control.sqlite3", runtimes, StandInAlarms())
    with ServerThread(app) as server:
        described = unchecked_client(server.url).describe_endpoint(EndpointName="ep")
    assert described["EndpointStatus"] == after
    assert described["EndpointConfigName"] == config
    assert "PendingDeploymentSummary" not in described
    assert runtimes.calls == [("create", "ep")] and runtimes.steps == []
    if after == "UpdateRollbackFailed":
        assert "NoSuchBucket" in described["FailureReason"]
    else:
        assert described.get("FailureReason") == ("alarm x" if phase == "rolling_back"
                                                  else None)


@pytest.mark.parametrize("scale", [36.0])
def test_a_rolling_update_moves_batches_and_rolls_back_to_full_size(  # type: ignore[no-untyped-def]
        sm, runtimes: FakeGenerations, alarms: StandInAlarms) -> None:
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="green", DeploymentConfig={
        "RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1},
                                "WaitIntervalInSeconds": 3600},  # bakes of 100 s
        "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "errors-high"}]}})
    wait_for(lambda: ("blue", 1) in runtimes.steps, "the first batch")
    alarms.set("errors-high", "ALARM")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    assert sm.describe_endpoint(EndpointName="ep")["EndpointConfigName"] == "blue"
    # green (4 instances in its config) starts with one; blue (2) gives one up; the rollback
    # brings blue back to its size before green stops.
    assert runtimes.steps[:3] == [("start_green", "s3://bucket/green/"), ("shift", 0.25),
                                  ("blue", 1)]
    assert ("resize", "ep") in runtimes.calls
    assert runtimes.steps[-1] == ("drop_green", "ep")


def test_the_page_view_of_each_phase() -> None:
    from emulator.control.deployments import DeploymentRun, Progress
    from emulator.hosting.spec import single_variant

    registry = FakeGenerations()
    registry.greens["ep"] = SimpleNamespace(  # what the view reads of a running generation
        variants=[SimpleNamespace(serving=lambda: [object()])],
        describe=lambda: {"Variants": {"AllTraffic": {"Instances": []}}})
    registry.shares["ep"] = 0.25
    plan = guardrails.plan(canary(25), [1]).to_doc()
    views = {}
    for phase in ("starting", "baking", "terminating"):
        run = DeploymentRun("ep", single_variant("ep", "s3://bucket/green/"),
                            Progress(plan=plan, started=0.0, phase=phase), registry, Clock(),
                            None, lambda _: None, lambda: None, config_name="green")
        views[phase] = run.describe()
    assert views["baking"]["GreenShare"] == 0.25
    assert views["terminating"]["GreenShare"] == 1.0  # the new fleet is the endpoint by then
    assert views["baking"]["Alarms"] == {"errors-high": None}  # no alarm store: state unknown
    assert (views["baking"]["Step"], views["baking"]["Steps"]) == (1, 2)
    assert views["starting"]["NewConfigInstances"] == 1 and views["starting"]["Green"]
