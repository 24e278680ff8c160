"""Application Auto Scaling on the emulator's port: boto3 against a real emulator with real
Tritons. The issue's scaling code runs verbatim (only ``endpoint_url`` added) and the endpoint
really scales out under load and back in when the load falls, with ``--clock-scale 60``."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from emulator.server import EmulatorServer
from emulator.settings import Settings
from harness.loadtest.invokers import HttpInvoker
from tests.client_support import DUMMY_CREDENTIALS
from tests.support import SUITE_ENV, package, scale_request, wait_for, write_scale_model

KEY = {"ServiceNamespace": "sagemaker", "ResourceId": "endpoint/mme/variant/AllTraffic",
       "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}


@pytest.fixture
def emulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorServer]:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    store = tmp_path / "store"
    store.mkdir()
    package(write_scale_model(tmp_path / "work", "m", 2.0), store / "m.tar.gz", "folder")
    server = EmulatorServer(Settings.from_env(
        env=SUITE_ENV, model_data=str(store), cache_dir=tmp_path / "cache", port=0,
        endpoint_name="mme", clock_scale=60)).start()
    yield server
    server.stop()


def _client(name: str, url: str) -> Any:
    return boto3.client(name, endpoint_url=url, **DUMMY_CREDENTIALS)


class Load:
    """Traffic from a background thread: ``busy`` workers flat out, else one call per 0.25 s."""

    def __init__(self, url: str, workers: int = 8) -> None:
        self.busy = True
        self.ok = self.failed = 0
        self._stop = False
        self._invoker = HttpInvoker(url, "mme", scale_request([1, 2, 3, 4]),
                                    "application/octet-stream")
        self._workers = workers
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _worker(self, index: int) -> None:
        while not self._stop:
            if not self.busy and index:
                await asyncio.sleep(0.05)
                continue
            outcome = await self._invoker.invoke("m.tar.gz")
            if outcome.ok:
                self.ok += 1
            else:
                self.failed += 1
            if not self.busy:
                await asyncio.sleep(0.25)

    async def _run(self) -> None:
        await asyncio.gather(*(self._worker(i) for i in range(self._workers)))
        await self._invoker.close()

    def stop(self) -> None:
        self._stop = True
        self._thread.join(timeout=30)


def _counts(sm: Any) -> tuple[int, int]:
    variant = sm.describe_endpoint(EndpointName="mme")["ProductionVariants"][0]
    return variant["CurrentInstanceCount"], variant["DesiredInstanceCount"]


def test_a_users_scaling_code_scales_out_under_load_and_back_in(emulator: EmulatorServer) -> None:
    EMU = emulator.url  # the name the user's code uses
    # --- a user's code, verbatim but for endpoint_url ---------------------------------------
    asg = boto3.client("application-autoscaling", endpoint_url=EMU, region_name="us-east-1")
    asg.register_scalable_target(ServiceNamespace="sagemaker", ResourceId="endpoint/mme/variant/AllTraffic",  # noqa: E501
        ScalableDimension="sagemaker:variant:DesiredInstanceCount", MinCapacity=1, MaxCapacity=4)
    asg.put_scaling_policy(PolicyName="p", ServiceNamespace="sagemaker", ResourceId="endpoint/mme/variant/AllTraffic",  # noqa: E501
        ScalableDimension="sagemaker:variant:DesiredInstanceCount", PolicyType="TargetTrackingScaling",  # noqa: E501
        TargetTrackingScalingPolicyConfiguration={"TargetValue": 70.0,
            "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},  # noqa: E501
            "ScaleInCooldown": 300, "ScaleOutCooldown": 60})
    cw = boto3.client("cloudwatch", endpoint_url=EMU, region_name="us-east-1")
    # ------------------------------------------------------------------------------------------
    sm = _client("sagemaker", EMU)
    assert _counts(sm) == (1, 1)
    load = Load(EMU)
    try:
        peak = 0

        def scaled_out() -> bool:
            nonlocal peak
            current, desired = _counts(sm)
            peak = max(peak, current)
            return current >= 3 and current == desired

        wait_for(scaled_out, 30, "a scale-out to 3 or more instances")
        load.busy = False  # a trickle: data keeps coming, well under the target
        wait_for(lambda: _counts(sm) == (1, 1), 45, "the scale-in back to 1 instance")
    finally:
        load.stop()
    assert peak >= 3
    assert load.ok > 0 and load.failed == 0

    def activities() -> list[dict[str, Any]]:
        return asg.describe_scaling_activities(ServiceNamespace="sagemaker")["ScalingActivities"]

    # the autoscaler sees the change fulfilled at its next evaluation
    wait_for(lambda: all(a["StatusCode"] == "Successful" for a in activities()), 10,
          "every scaling activity to succeed")
    newest, oldest = activities()[0], activities()[-1]
    assert "-AlarmHigh-" in oldest["Cause"] and "-AlarmLow-" in newest["Cause"]
    assert newest["Description"] == "Setting desired instance count to 1."
    assert newest["StatusMessage"] == ("Successfully set desired instance count to 1. "
                                       "Change successfully fulfilled by sagemaker.")
    policy = asg.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"][0]
    assert [a["AlarmName"] in oldest["Cause"] + newest["Cause"] for a in policy["Alarms"]] == [
        True, True]

    now = dt.datetime.utcnow()
    hits = cw.get_metric_statistics(
        Namespace="AWS/SageMaker", MetricName="ModelCacheHit", Statistics=["Average"], Period=60,
        Dimensions=[{"Name": "EndpointName", "Value": "mme"},
                    {"Name": "VariantName", "Value": "AllTraffic"}],
        StartTime=now - dt.timedelta(hours=2), EndTime=now)
    assert hits["Datapoints"] and all(0 <= d["Average"] <= 1 for d in hits["Datapoints"])

    # the policy's two alarms are real CloudWatch alarms, with AWS's settings
    alarms = cw.describe_alarms(AlarmNamePrefix="TargetTracking-")["MetricAlarms"]
    assert sorted(a["AlarmName"] for a in alarms) == sorted(a["AlarmName"]
                                                            for a in policy["Alarms"])
    settings = {a["ComparisonOperator"]: (a["MetricName"], a["Statistic"], a["Period"],
                                          a["EvaluationPeriods"], a["Threshold"],
                                          a["AlarmActions"]) for a in alarms}
    assert settings == {
        "GreaterThanThreshold": ("InvocationsPerInstance", "Sum", 60, 3, 70.0,
                                 [policy["PolicyARN"]]),
        "LessThanThreshold": ("InvocationsPerInstance", "Sum", 60, 15, 63.0,
                              [policy["PolicyARN"]])}
    history = cw.describe_alarm_history(AlarmName=policy["Alarms"][0]["AlarmName"],
                                        HistoryItemType="Action")["AlarmHistoryItems"]
    assert history and history[0]["HistorySummary"] == (
        f"Successfully executed action {policy['PolicyARN']}")


def test_step_scaling_on_alarms_over_a_published_metric(emulator: EmulatorServer) -> None:
    """A queue length the test publishes: an alarm over 10 runs a +1 step policy, one under 5
    a -1 step policy; the endpoint scales out to 2 instances and back to 1."""
    asg = _client("application-autoscaling", emulator.url)
    cw = _client("cloudwatch", emulator.url)
    sm = _client("sagemaker", emulator.url)
    asg.register_scalable_target(**KEY, MinCapacity=1, MaxCapacity=2)

    def policy(name: str, steps: list[dict[str, Any]]) -> str:
        arn: str = asg.put_scaling_policy(
            **KEY, PolicyName=name, PolicyType="StepScaling", StepScalingPolicyConfiguration={
                "AdjustmentType": "ChangeInCapacity", "StepAdjustments": steps,
                "Cooldown": 60, "MetricAggregationType": "Average"})["PolicyARN"]
        return arn

    out = policy("queue-out", [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}])
    back = policy("queue-in", [{"MetricIntervalUpperBound": 0, "ScalingAdjustment": -1}])
    for name, operator, threshold, arn in (("queue-long", "GreaterThanOrEqualToThreshold", 10,
                                            out),
                                           ("queue-short", "LessThanThreshold", 5, back)):
        cw.put_metric_alarm(AlarmName=name, Namespace="CI/Queue", MetricName="Length",
                            Statistic="Average", Period=60, EvaluationPeriods=1,
                            Threshold=threshold, ComparisonOperator=operator,
                            AlarmActions=[arn])
    length = {"value": 20.0}
    stop = threading.Event()

    def publish() -> None:
        client = _client("cloudwatch", emulator.url)
        while not stop.is_set():
            client.put_metric_data(Namespace="CI/Queue", MetricData=[
                {"MetricName": "Length", "Value": length["value"]}])
            stop.wait(0.2)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        wait_for(lambda: _counts(sm) == (2, 2), 60, "the scale-out to 2 instances")
        length["value"] = 1.0
        wait_for(lambda: _counts(sm) == (1, 1), 60, "the scale-in back to 1 instance")
    finally:
        stop.set()
        thread.join(timeout=10)
    causes = [a["Cause"] for a in asg.describe_scaling_activities(
        ServiceNamespace="sagemaker")["ScalingActivities"]]
    assert causes[0] == "monitor alarm queue-short in state ALARM triggered policy queue-in"
    assert causes[-1] == "monitor alarm queue-long in state ALARM triggered policy queue-out"
    described = asg.describe_scaling_policies(ServiceNamespace="sagemaker",
                                              PolicyNames=["queue-out"])["ScalingPolicies"][0]
    assert described["StepScalingPolicyConfiguration"]["MetricAggregationType"] == "Average"
    assert [a["AlarmName"] for a in described["Alarms"]] == ["queue-long"]


# ---------------------------------------------------------------------------------------------
# Bad requests, answered as AWS answers them


def test_register_describe_deregister(emulator: EmulatorServer) -> None:
    asg = _client("application-autoscaling", emulator.url)
    arn = asg.register_scalable_target(**KEY, MinCapacity=1, MaxCapacity=2)["ScalableTargetARN"]
    asg.register_scalable_target(**KEY, MaxCapacity=3)  # an update keeps MinCapacity
    (target,) = asg.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert (target["MinCapacity"], target["MaxCapacity"], target["ScalableTargetARN"]) == (
        1, 3, arn)
    assert target["SuspendedState"]["DynamicScalingInSuspended"] is False
    asg.deregister_scalable_target(**KEY)
    assert asg.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []


def test_unknown_resource_id(emulator: EmulatorServer) -> None:
    asg = _client("application-autoscaling", emulator.url)
    with pytest.raises(asg.exceptions.ValidationException) as raised:
        asg.register_scalable_target(**{**KEY, "ResourceId": "endpoint/nope/variant/AllTraffic"},
                                     MinCapacity=1, MaxCapacity=2)
    assert "nope" in raised.value.response["Error"]["Message"]
    with pytest.raises(asg.exceptions.ValidationException) as raised:
        asg.register_scalable_target(**{**KEY, "ResourceId": "mme/AllTraffic"},
                                     MinCapacity=1, MaxCapacity=2)
    assert raised.value.response["Error"]["Message"] == (
        "Unsupported service namespace, resource type or scalable dimension")


def test_min_greater_than_max(emulator: EmulatorServer) -> None:
    asg = _client("application-autoscaling", emulator.url)
    with pytest.raises(asg.exceptions.ValidationException) as raised:
        asg.register_scalable_target(**KEY, MinCapacity=3, MaxCapacity=2)
    assert raised.value.response["Error"]["Message"] == (
        "Minimum capacity cannot be greater than maximum capacity")


def test_unknown_and_unsupported_metric_types(emulator: EmulatorServer) -> None:
    asg = _client("application-autoscaling", emulator.url)
    asg.register_scalable_target(**KEY, MinCapacity=1, MaxCapacity=2)

    def policy(metric_type: str) -> None:
        asg.put_scaling_policy(**KEY, PolicyName="p", PolicyType="TargetTrackingScaling",
                               TargetTrackingScalingPolicyConfiguration={
                                   "TargetValue": 70.0, "PredefinedMetricSpecification": {
                                       "PredefinedMetricType": metric_type}})

    with pytest.raises(asg.exceptions.ValidationException) as raised:
        policy("SageMakerVariantBogus")
    message = raised.value.response["Error"]["Message"]
    assert message.startswith("1 validation error detected: Value 'SageMakerVariantBogus' at "
                              "'targetTrackingScalingPolicyConfiguration."
                              "predefinedMetricSpecification.predefinedMetricType' failed to "
                              "satisfy constraint: Member must satisfy enum value set: [")
    with pytest.raises(asg.exceptions.ValidationException) as raised:
        policy("SageMakerInferenceComponentInvocationsPerCopy")
    assert "SageMakerInferenceComponentInvocationsPerCopy" in raised.value.response["Error"][
        "Message"]
    assert asg.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"] == []


def test_policy_on_an_unregistered_target(emulator: EmulatorServer) -> None:
    asg = _client("application-autoscaling", emulator.url)
    with pytest.raises(asg.exceptions.ObjectNotFoundException) as raised:
        asg.put_scaling_policy(**KEY, PolicyName="p", PolicyType="TargetTrackingScaling",
                               TargetTrackingScalingPolicyConfiguration={
                                   "TargetValue": 70.0, "PredefinedMetricSpecification": {
                                       "PredefinedMetricType":
                                           "SageMakerVariantInvocationsPerInstance"}})
    assert raised.value.response["Error"]["Message"] == (
        "No scalable target registered for service namespace: sagemaker, resource ID: "
        "endpoint/mme/variant/AllTraffic, scalable dimension: "
        "sagemaker:variant:DesiredInstanceCount")
    with pytest.raises(asg.exceptions.ObjectNotFoundException):
        asg.delete_scaling_policy(**KEY, PolicyName="p")
    with pytest.raises(asg.exceptions.ObjectNotFoundException):
        asg.deregister_scalable_target(**KEY)
