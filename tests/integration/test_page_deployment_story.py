"""The story of a guarded deployment as the live page, ``/_emulator/models`` and ``/metrics``
tell it, on a real emulator (real Tritons for both fleets, ``--clock-scale 20``) in a real
headless Chromium: the new fleet's instances carry its generation in their names everywhere
(its failed loads never read as the running fleet's), the endpoint's tile counts every error
the error list shows, the bake is labelled as emulated time, and a rollback, a completed
deployment and a scaling activity stay in the page's history once they are over.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import create_generation_configs, runtime_client
from tests.integration import test_page
from tests.integration.test_deployments import (
    ROLE,
    Module,
    baking,
    canary,
    in_service_on,
    put_model_errors_alarm,
    running_and_other,
    wait_for,
)
from tests.prometheus_support import get_json, scrape
from tests.support import scale_request, stopped_after

pytestmark = pytest.mark.slow
browser_page = test_page.browser_page  # the page tests' headless Chromium, as a fixture here
WAIT_MS = test_page.WAIT_MS
GREEN_NAME = re.compile(r"i-1-green\d+")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    # A canary's longest bake (3600 s) is 180 s of real time: room for the broken model's
    # failed load and the alarm on a busy machine before the bake would promote it.
    module = Module(tmp_path_factory.mktemp("story"), clock_scale=20)
    sm = module.client("sagemaker")
    create_generation_configs(sm, module.stores, ROLE)
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="blue")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep",
                                              WaiterConfig={"Delay": 0.25, "MaxAttempts": 480})
    # A model error on either fleet of the variant rolls a deployment back.
    put_model_errors_alarm(module.client("cloudwatch"))
    yield from stopped_after(module)


def _instance_ids(fleet: dict[str, Any]) -> list[str]:
    return [i["InstanceId"] for i in fleet["Variants"]["AllTraffic"]["Instances"]]


def _activity(url: str, kind: str) -> dict[str, Any] | None:
    state = get_json(f"{url}/_emulator/page/state")
    return next((a for a in state["Activity"] if a["endpoint"] == "ep" and a["kind"] == kind),
                None)


def test_a_rolled_back_canary_is_told_as_the_new_fleets_failure_and_stays_told(
        emulator: Module, browser_page: Any) -> None:
    sm = emulator.client("sagemaker")
    running, _ = running_and_other(sm)
    page = browser_page
    page.goto(f"{emulator.url}/_emulator/")
    before = _instance_ids(get_json(f"{emulator.url}/_emulator/models")["Endpoints"]["ep"])
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="broken",
                       DeploymentConfig=canary(50, wait=3600, alarms=("ep-model-errors",)))
    wait_for(lambda: baking(sm), "the canary's bake")

    # The running fleet keeps its name; the new one carries its generation, in every view.
    fleet = get_json(f"{emulator.url}/_emulator/models")["Endpoints"]["ep"]
    assert _instance_ids(fleet) == before  # i-1 (or a promoted fleet's name: they are kept)
    (green,) = _instance_ids(fleet["Green"])
    assert GREEN_NAME.fullmatch(green) and green not in before, green
    _types, samples = scrape(emulator.url)
    shown = {dict(labels)["instance_id"] for name, labels in samples
             if name == "mme_in_flight_requests" and dict(labels)["endpoint_name"] == "ep"}
    assert shown == {*before, green}
    block = '[data-deployment="ep"][data-phase="baking"]'
    page.wait_for_selector(f'{block} [data-instance="AllTraffic/{green}"]', timeout=WAIT_MS)
    # The bake is on the emulated clock (3600 s at --clock-scale 20: 180 s of real time).
    bake = page.inner_text(f"{block} .bake")
    assert "3600 s emulated (180 s real at --clock-scale 20) per step" in bake, bake
    assert re.search(r"left: \d+ s emulated \([\d.]+ s real\)", bake), bake

    # Calls until the canary answers with its model's error; the alarm then rolls it back.
    rt = runtime_client(emulator.url)

    def answered_by_the_canary() -> bool:
        try:
            rt.invoke_endpoint(EndpointName="ep", TargetModel="scale.tar.gz",
                               ContentType="application/json",
                               Body=scale_request([1.0, 1.0, 1.0, 1.0]))["Body"].read()
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ModelError"
            return True
        return False

    wait_for(answered_by_the_canary, "a call answered by the canary's broken model")
    described = in_service_on(sm, running)  # through RollingBack
    assert '"ep-model-errors"' in described["FailureReason"]

    # The broken model's failed loads are the new fleet's, never the running one's.
    events = [e for e in get_json(f"{emulator.url}/_emulator/page/state")["Events"]
              if e["endpoint"] == "ep" and e["step"] == "failed"]
    assert events and {e["instance"] for e in events} == {green}
    failed_item = page.wait_for_selector('#events li[data-step="failed"]', timeout=WAIT_MS)
    assert f"ep/AllTraffic/{green}" in failed_item.inner_text()
    assert "new fleet" in failed_item.inner_text()

    # The tile counts what the error list lists.
    page.wait_for_function("""() => {
        const listed = document.querySelectorAll('#errors tr[data-endpoint="ep"]').length;
        const tile = document.querySelector('.card[data-endpoint="ep"] [data-figure="errors"]');
        return listed > 0 && tile && Number(tile.textContent) === listed;
    }""", timeout=WAIT_MS)

    # The rollback stays told: why (the alarm), and that the old config serves again.
    rollback = page.wait_for_selector('#activity li[data-kind="rollback"][data-endpoint="ep"]',
                                      timeout=WAIT_MS)
    assert "ep-model-errors" in rollback.inner_text()
    done = page.wait_for_selector('#activity li[data-kind="rolled-back"][data-endpoint="ep"]',
                                  timeout=WAIT_MS)
    assert f"{running} serves again" in done.inner_text()
    assert "broken" in done.inner_text()
    card = page.wait_for_selector('.card[data-endpoint="ep"] .last-deployment', timeout=WAIT_MS)
    assert card.get_attribute("data-kind") == "rolled-back"
    told = _activity(emulator.url, "rollback")
    assert told is not None and told["details"]["Alarm"] == "ep-model-errors"
    # A page opened now, long after, paints the rollback at once.
    page.goto(f"{emulator.url}/_emulator/")
    assert page.query_selector('#activity li[data-kind="rolled-back"]') is not None


def test_a_completed_deployment_stays_in_the_history_and_its_fleet_keeps_its_name(
        emulator: Module) -> None:
    sm = emulator.client("sagemaker")
    _, other = running_and_other(sm)
    sm.update_endpoint(EndpointName="ep", EndpointConfigName=other, DeploymentConfig={
        "BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
            "Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0}}})
    in_service_on(sm, other)
    ended = wait_for(lambda: _activity(emulator.url, "deployed"), "the deployment's end told")
    assert ended["details"]["NewConfig"] == other
    assert f"{other} serves" in ended["text"]
    started = _activity(emulator.url, "deployment")
    assert started is not None and started["details"]["NewConfig"] == other
    # The fleet that now serves is the one that was green: its instances keep their names.
    fleet = get_json(f"{emulator.url}/_emulator/models")["Endpoints"]["ep"]
    (serving,) = _instance_ids(fleet)
    assert GREEN_NAME.fullmatch(serving), serving
    assert "Green" not in fleet


def test_a_scaling_activity_stays_in_the_history_with_its_alarm_policy_and_counts(
        emulator: Module, browser_page: Any) -> None:
    sm, cw = emulator.client("sagemaker"), emulator.client("cloudwatch")
    asg = emulator.client("application-autoscaling")
    key = {"ServiceNamespace": "sagemaker", "ResourceId": "endpoint/ep/variant/AllTraffic",
           "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}
    running, _ = running_and_other(sm)
    asg.register_scalable_target(**key, MinCapacity=1, MaxCapacity=2)
    arn = asg.put_scaling_policy(
        **key, PolicyName="queue-out", PolicyType="StepScaling", StepScalingPolicyConfiguration={
            "AdjustmentType": "ChangeInCapacity", "Cooldown": 60,
            "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]},
    )["PolicyARN"]
    cw.put_metric_alarm(AlarmName="queue-long", Namespace="CI/Queue", MetricName="Length",
                        Statistic="Maximum", Period=60, EvaluationPeriods=1, Threshold=10,
                        ComparisonOperator="GreaterThanOrEqualToThreshold", AlarmActions=[arn])
    stop = threading.Event()

    def publish() -> None:  # a queue that stays long, as a CI job's metric would
        client = emulator.client("cloudwatch")
        while not stop.is_set():
            client.put_metric_data(Namespace="CI/Queue", MetricData=[
                {"MetricName": "Length", "Value": 20.0}])
            stop.wait(0.2)

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    try:
        told = wait_for(lambda: _activity(emulator.url, "scaling"), "the scale-out told")
        assert {k: told["details"][k] for k in ("Alarm", "Policy", "From", "To")} == {
            "Alarm": "queue-long", "Policy": "queue-out", "From": 1, "To": 2}
        page = browser_page
        page.goto(f"{emulator.url}/_emulator/")
        item = page.wait_for_selector('#activity li[data-kind="scaling"]', timeout=WAIT_MS)
        assert ("variant AllTraffic: instances 1 -> 2, alarm queue-long triggered policy "
                "queue-out") in item.inner_text()
    finally:
        stop.set()
        publisher.join(timeout=10)
        cw.delete_alarms(AlarmNames=["queue-long"])
        asg.deregister_scalable_target(**key)
        in_service_on(sm, running)
        sm.update_endpoint_weights_and_capacities(EndpointName="ep", DesiredWeightsAndCapacities=[
            {"VariantName": "AllTraffic", "DesiredInstanceCount": 1}])
        in_service_on(sm, running)

