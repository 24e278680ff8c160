"""Target tracking decisions, step by step: a fake SageMaker (the two operations the autoscaler
uses), the real metric store, alarms and engine, and a fake clock so every period is exact."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from emulator.autoscaling import AutoScalingService, SageMakerVariants, ScalingEngine
from emulator.clock import Clock
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.series import MetricStore
from emulator.contract.control_plane import ControlPlaneError
from tests.clock_support import FakeTime

RESOURCE = "endpoint/mme/variant/AllTraffic"
DIMS = {"EndpointName": "mme", "VariantName": "AllTraffic"}


class FakeSageMaker:
    """DescribeEndpoint and UpdateEndpointWeightsAndCapacities; updates complete on ``settle``."""

    def __init__(self, count: int = 1) -> None:
        self.current = self.desired = count
        self.status = "InService"
        self.updates: list[int] = []

    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        if params["EndpointName"] != "mme":
            raise ControlPlaneError(f"Could not find endpoint \"{params['EndpointName']}\".")
        if operation == "DescribeEndpoint":
            return {"EndpointStatus": self.status, "ProductionVariants": [{
                "VariantName": "AllTraffic", "CurrentInstanceCount": self.current,
                "DesiredInstanceCount": self.desired}]}
        assert operation == "UpdateEndpointWeightsAndCapacities"
        if self.status != "InService":
            raise ControlPlaneError("Cannot update in-progress endpoint")
        self.desired = params["DesiredWeightsAndCapacities"][0]["DesiredInstanceCount"]
        self.updates.append(self.desired)
        self.status = "Updating"
        return {"EndpointArn": "arn"}

    def settle(self) -> None:
        self.current, self.status = self.desired, "InService"


class Rig:
    def __init__(self, **config: Any) -> None:
        self.time = FakeTime()
        self.clock = Clock(60, time_fn=self.time)
        self.store = MetricStore(self.clock)
        self.sagemaker = FakeSageMaker()
        self.alarms = AlarmStore(self.store, self.clock, "us-east-1", "123456789012")
        self.service = AutoScalingService(SageMakerVariants(self.sagemaker), self.clock,
                                          "us-east-1", "123456789012", self.alarms)
        self.engine = ScalingEngine(self.service, self.store, self.clock)
        key = {"ServiceNamespace": "sagemaker", "ResourceId": RESOURCE,
               "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}
        self.run(self.service.handle("RegisterScalableTarget",
                                     {**key, "MinCapacity": 1, "MaxCapacity": 4}))
        self.run(self.service.handle("PutScalingPolicy", {
            **key, "PolicyName": "p", "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 70.0, "ScaleInCooldown": 300, "ScaleOutCooldown": 60,
                "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
                **config}}))

    @staticmethod
    def run(coroutine: Any) -> Any:
        return asyncio.run(coroutine)

    def minute(self, invocations: int) -> None:
        """One emulated minute (one real second) of traffic, spread over the minute."""
        for _ in range(invocations):
            self.time.now += 1 / max(invocations, 1)
            self.store.record("AWS/SageMaker", "InvocationsPerInstance", DIMS,
                              1 / self.sagemaker.current, "None")
        if not invocations:
            self.time.now += 1

    def minutes(self, count: int, invocations: int) -> None:
        """``count`` such minutes."""
        for _ in range(count):
            self.minute(invocations)

    def evaluate(self) -> None:
        """One evaluation: the policy's alarms (their actions run the policy), then the
        engine's visit of the target (activities settled, Min/Max kept)."""
        self.run(self.alarms.evaluate_all())
        self.run(self.engine.evaluate(self.service.targets[RESOURCE]))

    def activities(self) -> list[dict[str, Any]]:
        return self.run(self.service.handle("DescribeScalingActivities",
                                            {"ServiceNamespace": "sagemaker"}))["ScalingActivities"]


def test_scale_out_needs_three_high_minutes_and_is_proportional() -> None:
    rig = Rig()
    for _ in range(2):
        rig.minute(200)
        rig.evaluate()
    assert rig.sagemaker.updates == []  # two high datapoints are not enough
    rig.minute(200)
    rig.evaluate()
    assert rig.sagemaker.updates == [3]  # ceil(1 * 200 / 70)
    (activity,) = rig.activities()
    assert activity["StatusCode"] == "InProgress"
    assert activity["Description"] == "Setting desired instance count to 3."
    assert activity["Cause"].startswith(f"monitor alarm TargetTracking-{RESOURCE}-AlarmHigh-")
    assert activity["Cause"].endswith(" in state ALARM triggered policy p")
    rig.sagemaker.settle()
    rig.evaluate()
    (activity,) = rig.activities()
    assert activity["StatusCode"] == "Successful"
    assert activity["StatusMessage"] == ("Successfully set desired instance count to 3. "
                                         "Change successfully fulfilled by sagemaker.")


def test_scale_out_is_capped_by_max_capacity() -> None:
    rig = Rig()
    rig.minutes(3, 1000)
    rig.evaluate()
    assert rig.sagemaker.updates == [4]


def test_scale_in_needs_fifteen_low_minutes_then_waits_for_the_cooldown() -> None:
    rig = Rig()
    rig.sagemaker.current = rig.sagemaker.desired = 3
    for minute in range(15):
        rig.minute(30)  # 10 per instance per minute: well under 0.9 * 70
        rig.evaluate()
        if minute < 14:
            assert rig.sagemaker.updates == [], minute
    assert rig.sagemaker.updates == [1]  # ceil(3 * 10 / 70)
    assert "-AlarmLow-" in rig.activities()[0]["Cause"]
    rig.sagemaker.settle()
    rig.evaluate()
    assert rig.activities()[0]["StatusCode"] == "Successful"


@pytest.mark.parametrize(("config", "instances", "minutes", "invocations"), [
    # 60 per instance: under 63, but 3 instances would make it 80
    ({}, 4, 15, 4 * 60),
    ({}, 3, 20, 0),  # no traffic means no datapoints
    ({"DisableScaleIn": True}, 3, 16, 3),
], ids=["stops-where-the-metric-would-pass-the-target", "no-traffic", "disabled"])
def test_no_scale_in(config: dict[str, Any], instances: int, minutes: int,
                     invocations: int) -> None:
    rig = Rig(**config)
    rig.sagemaker.current = rig.sagemaker.desired = instances
    for _ in range(minutes):
        rig.minute(invocations)
        rig.evaluate()
    assert rig.sagemaker.updates == []


def test_scale_out_cooldown_then_scale_out_again() -> None:
    rig = Rig(ScaleOutCooldown=120)
    rig.minutes(3, 150)
    rig.evaluate()
    assert rig.sagemaker.updates == [3]
    rig.sagemaker.settle()
    rig.evaluate()  # the activity completes: the two-minute cooldown starts from its start
    rig.minutes(3, 3 * 100)  # 100 per instance
    rig.evaluate()
    assert rig.sagemaker.updates == [3, 4]


def test_suspended_scale_out_and_refused_update() -> None:
    rig = Rig()
    rig.run(rig.service.handle("RegisterScalableTarget", {
        "ServiceNamespace": "sagemaker", "ResourceId": RESOURCE,
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "SuspendedState": {"DynamicScalingOutSuspended": True}}))
    rig.minutes(3, 300)
    rig.evaluate()
    assert rig.sagemaker.updates == []
    rig.run(rig.service.handle("RegisterScalableTarget", {
        "ServiceNamespace": "sagemaker", "ResourceId": RESOURCE,
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "SuspendedState": {"DynamicScalingOutSuspended": False}}))
    rig.sagemaker.status = "Updating"  # someone else's update: nothing is tried meanwhile
    rig.evaluate()
    assert rig.sagemaker.updates == [] and rig.activities() == []
    rig.sagemaker.status = "InService"
    rig.evaluate()
    assert rig.sagemaker.updates == [4]


def test_capacity_below_min_is_raised() -> None:
    rig = Rig()
    rig.run(rig.service.handle("RegisterScalableTarget", {
        "ServiceNamespace": "sagemaker", "ResourceId": RESOURCE,
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount", "MinCapacity": 2}))
    rig.evaluate()
    assert rig.sagemaker.updates == [2]


@pytest.mark.parametrize("statistic", ["Average", "Maximum"])
def test_customized_metric(statistic: str) -> None:
    rig = Rig()
    rig.run(rig.service.handle("PutScalingPolicy", {
        "ServiceNamespace": "sagemaker", "ResourceId": RESOURCE, "PolicyName": "p",
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": 50.0, "ScaleOutCooldown": 60,
            "CustomizedMetricSpecification": {
                "Namespace": "/aws/sagemaker/Endpoints", "MetricName": "CPUUtilization",
                "Dimensions": [{"Name": k, "Value": v} for k, v in DIMS.items()],
                "Statistic": statistic, "Unit": "Percent"}}}))
    for _ in range(3):
        for _ in range(6):
            rig.time.now += 1 / 6
            rig.store.record("/aws/sagemaker/Endpoints", "CPUUtilization", DIMS, 90.0, "Percent")
    rig.evaluate()
    assert rig.sagemaker.updates == [2]  # ceil(1 * 90 / 50)


def test_an_activity_overtaken_by_another_update_does_not_block_the_target() -> None:
    rig = Rig()
    rig.minutes(3, 200)
    rig.evaluate()
    assert rig.sagemaker.updates == [3]
    rig.sagemaker.desired = 2  # a person's UpdateEndpointWeightsAndCapacities meanwhile
    rig.sagemaker.settle()
    rig.evaluate()
    assert rig.activities()[0]["StatusCode"] == "Successful"
