"""Step scaling run by CloudWatch alarms, step by step: a fake SageMaker, the real metric store,
alarms, Application Auto Scaling service and engine, and a fake clock (scale 60)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from emulator.autoscaling import AutoScalingService, SageMakerVariants, ScalingEngine, step
from emulator.autoscaling.wire import ScalingError
from emulator.clock import Clock
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.series import MetricStore
from emulator.cloudwatch.service import CloudWatchService
from tests.unit.test_autoscaling_engine import DIMS, RESOURCE, FakeSageMaker, FakeTime

KEY = {"ServiceNamespace": "sagemaker", "ResourceId": RESOURCE,
       "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}


class Rig:
    def __init__(self, state_dir: Path | None = None, maximum: int = 10) -> None:
        self.time = FakeTime()
        self.clock = Clock(60, time_fn=self.time)
        self.store = MetricStore(self.clock)
        self.alarms = AlarmStore(self.store, self.clock, "us-east-1", "123456789012",
                                 state_dir / "alarms.json" if state_dir else None)
        self.cloudwatch = CloudWatchService(self.store, self.clock, self.alarms)
        self.sagemaker = FakeSageMaker()
        self.service = AutoScalingService(
            SageMakerVariants(self.sagemaker), self.clock, "us-east-1", "123456789012",
            self.alarms, state_dir / "autoscaling.json" if state_dir else None)
        self.engine = ScalingEngine(self.service, self.store, self.clock)
        self.call("RegisterScalableTarget", MinCapacity=1, MaxCapacity=maximum)

    def call(self, operation: str, **params: Any) -> Any:
        return asyncio.run(self.service.handle(operation, {**KEY, **params}))

    def step_policy(self, name: str, alarm: str, threshold: float, operator: str,
                    **config: Any) -> str:
        arn: str = self.call("PutScalingPolicy", PolicyName=name, PolicyType="StepScaling",
                             StepScalingPolicyConfiguration=config)["PolicyARN"]
        self.cloudwatch.call("PutMetricAlarm", {
            "AlarmName": alarm, "Namespace": "CI", "MetricName": "Queue", "Statistic": "Average",
            "Period": 60, "EvaluationPeriods": 1, "Threshold": threshold,
            "ComparisonOperator": operator, "AlarmActions": [arn]})
        return arn

    def minute(self, queue: float | None = None, invocations: int = 0) -> None:
        """One emulated minute: a queue length, invocations per instance; the alarms, then
        the engine's visit."""
        if queue is not None:
            self.store.record("CI", "Queue", {}, queue, "None")
        for _ in range(invocations * self.sagemaker.current):
            self.store.record("AWS/SageMaker", "InvocationsPerInstance", DIMS,
                              1 / self.sagemaker.current, "None")
        self.time.now += 1.0
        asyncio.run(self.alarms.evaluate_all())
        asyncio.run(self.engine.evaluate(self.service.targets[RESOURCE]))
        self.sagemaker.settle()
        asyncio.run(self.engine.evaluate(self.service.targets[RESOURCE]))

    def activities(self) -> list[dict[str, Any]]:
        return self.call("DescribeScalingActivities")["ScalingActivities"]  # type: ignore[no-any-return]


OUT_STEPS = [{"MetricIntervalLowerBound": 0, "MetricIntervalUpperBound": 10,
              "ScalingAdjustment": 1},
             {"MetricIntervalLowerBound": 10, "ScalingAdjustment": 3}]


def test_step_scaling_out_by_the_step_that_holds_the_breach_then_in() -> None:
    rig = Rig()
    rig.step_policy("out", "queue-high", 20.0, "GreaterThanOrEqualToThreshold",
                    AdjustmentType="ChangeInCapacity", StepAdjustments=OUT_STEPS, Cooldown=180)
    rig.step_policy("in", "queue-low", 5.0, "LessThanThreshold",
                    AdjustmentType="ChangeInCapacity", Cooldown=90,
                    StepAdjustments=[{"MetricIntervalUpperBound": 0, "ScalingAdjustment": -1}])
    rig.minute(queue=25.0)  # 5 above the threshold: the first step, +1
    assert rig.sagemaker.updates == [2]
    newest = rig.activities()[0]
    assert newest["Cause"] == "monitor alarm queue-high in state ALARM triggered policy out"
    assert newest["Description"] == "Setting desired instance count to 2."
    rig.minute(queue=25.0)  # still in ALARM, in the cooldown: +1 again is no larger
    assert rig.sagemaker.updates == [2]
    rig.minute(queue=45.0)  # 25 above: the second step, +3 from before the cooldown: 4
    assert rig.sagemaker.updates == [2, 4]
    rig.minute(queue=45.0)
    rig.minute(queue=45.0)  # +3 from 1 is still 4, within the cooldown (180 s)
    assert rig.sagemaker.updates == [2, 4]
    rig.minute(queue=45.0)  # the cooldown is over: +3 again
    assert rig.sagemaker.updates == [2, 4, 7]
    rig.minute(queue=1.0)  # below 5: the scale-in policy, -1
    assert rig.sagemaker.updates == [2, 4, 7, 6]
    rig.minute(queue=1.0)  # its cooldown (90 s, from the end of the scale-in) holds it
    rig.minute(queue=1.0)
    assert rig.sagemaker.updates[-1] == 5
    assert rig.activities()[0]["Cause"] == (
        "monitor alarm queue-low in state ALARM triggered policy in")
    (policy,) = rig.call("DescribeScalingPolicies", PolicyNames=["out"])["ScalingPolicies"]
    assert policy["PolicyType"] == "StepScaling"
    assert policy["StepScalingPolicyConfiguration"]["StepAdjustments"] == OUT_STEPS
    assert [a["AlarmName"] for a in policy["Alarms"]] == ["queue-high"]


def test_percent_change_and_exact_capacity() -> None:
    config = {"AdjustmentType": "PercentChangeInCapacity", "MinAdjustmentMagnitude": 2}
    assert step.capacity(config, 10, 25, 1, 100) == 12  # 2.5 rounded down
    assert step.capacity(config, 2, 25, 1, 100) == 4  # 0.5 -> 1, at least 2
    assert step.capacity(config, 10, -25, 1, 100) == 8  # -2.5 rounded up
    assert step.capacity({"AdjustmentType": "PercentChangeInCapacity"}, 3, 10, 1, 100) == 4
    assert step.capacity({"AdjustmentType": "ExactCapacity"}, 3, 7, 1, 5) == 5  # MaxCapacity
    assert step.capacity({"AdjustmentType": "ChangeInCapacity"}, 2, -5, 1, 5) == 1
    # below the threshold: lower bound exclusive, upper inclusive
    steps = {"StepAdjustments": [{"MetricIntervalUpperBound": -10, "ScalingAdjustment": -2},
                                 {"MetricIntervalLowerBound": -10, "MetricIntervalUpperBound": 0,
                                  "ScalingAdjustment": -1}]}
    assert step.adjustment(steps, -10) == -2 and step.adjustment(steps, -9.5) == -1
    assert step.adjustment(steps, 0.0) is None


@pytest.mark.parametrize(("config", "words"), [
    ({"AdjustmentType": "ChangeInCapacity", "StepAdjustments": [
        {"MetricIntervalLowerBound": 0, "MetricIntervalUpperBound": 10, "ScalingAdjustment": 1},
        {"MetricIntervalLowerBound": 5, "ScalingAdjustment": 2}]}, "overlap"),
    ({"AdjustmentType": "ChangeInCapacity", "StepAdjustments": [
        {"MetricIntervalLowerBound": 0, "MetricIntervalUpperBound": 10, "ScalingAdjustment": 1},
        {"MetricIntervalLowerBound": 20, "ScalingAdjustment": 2}]}, "gap"),
    ({"AdjustmentType": "ChangeInCapacity", "StepAdjustments": [
        {"MetricIntervalUpperBound": 0, "ScalingAdjustment": -1},
        {"MetricIntervalUpperBound": 5, "ScalingAdjustment": -2}]}, "null lower bound"),
    ({"AdjustmentType": "ChangeInCapacity", "MinAdjustmentMagnitude": 2, "StepAdjustments": [
        {"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]}, "PercentChangeInCapacity"),
    ({"AdjustmentType": "ChangeInCapacity", "StepAdjustments": []}, "at least one"),
    ({"StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]},
     "AdjustmentType"),
])
def test_bad_step_configurations_are_refused(config: dict[str, Any], words: str) -> None:
    rig = Rig()
    with pytest.raises(ScalingError) as raised:
        rig.call("PutScalingPolicy", PolicyName="bad", PolicyType="StepScaling",
                 StepScalingPolicyConfiguration=config)
    assert words in str(raised.value)
    assert rig.call("DescribeScalingPolicies")["ScalingPolicies"] == []


def test_target_tracking_and_step_disagree_the_larger_capacity_wins() -> None:
    rig = Rig()
    rig.call("PutScalingPolicy", PolicyName="tt", PolicyType="TargetTrackingScaling",
             TargetTrackingScalingPolicyConfiguration={
                 "TargetValue": 100.0, "ScaleOutCooldown": 0, "PredefinedMetricSpecification": {
                     "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}})
    rig.step_policy("out", "queue-high", 20.0, "GreaterThanOrEqualToThreshold",
                    AdjustmentType="ExactCapacity", StepAdjustments=[
                        {"MetricIntervalLowerBound": 0, "ScalingAdjustment": 3}])
    rig.minute(queue=30.0, invocations=250)
    rig.minute(queue=30.0, invocations=250)
    assert rig.sagemaker.updates == [3]  # step: exactly 3 (tracking not in ALARM yet)
    rig.minute(queue=30.0, invocations=250)
    # tracking: ceil(3 * 250 / 100) = 8 > step's 3: 8 wins
    assert rig.sagemaker.updates == [3, 8]
    assert "-AlarmHigh-" in rig.activities()[0]["Cause"]


def test_tracking_alarms_exist_with_aws_settings_and_go_with_the_policy() -> None:
    rig = Rig()
    out = rig.call("PutScalingPolicy", PolicyName="tt", PolicyType="TargetTrackingScaling",
                   TargetTrackingScalingPolicyConfiguration={
                       "TargetValue": 70.0, "PredefinedMetricSpecification": {
                           "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}})
    high, low = (rig.alarms.get(a["AlarmName"]) for a in out["Alarms"])
    assert high is not None and low is not None
    assert high.name.startswith(f"TargetTracking-{RESOURCE}-AlarmHigh-")
    assert {k: high.config[k] for k in ("MetricName", "Namespace", "Statistic", "Period",
                                        "EvaluationPeriods", "DatapointsToAlarm", "Threshold",
                                        "ComparisonOperator", "AlarmActions")} == {
        "MetricName": "InvocationsPerInstance", "Namespace": "AWS/SageMaker",
        "Statistic": "Sum", "Period": 60, "EvaluationPeriods": 3, "DatapointsToAlarm": 3,
        "Threshold": 70.0, "ComparisonOperator": "GreaterThanThreshold",
        "AlarmActions": [out["PolicyARN"]]}
    assert (low.config["EvaluationPeriods"], low.config["Threshold"],
            low.config["ComparisonOperator"]) == (15, 63.0, "LessThanThreshold")
    assert high.config["AlarmDescription"].startswith("DO NOT EDIT OR DELETE. ")
    rig.call("DeleteScalingPolicy", PolicyName="tt")
    assert not rig.alarms.exists(high.name) and not rig.alarms.exists(low.name)


def test_targets_policies_and_activities_survive_a_restart(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    arn = rig.step_policy("out", "queue-high", 20.0, "GreaterThanOrEqualToThreshold",
                          AdjustmentType="ChangeInCapacity", StepAdjustments=OUT_STEPS)
    rig.minute(queue=25.0)
    before = rig.activities()
    again = Rig.__new__(Rig)  # a second process on the same cache folder
    again.time, again.clock = rig.time, rig.clock
    again.store = MetricStore(rig.clock)
    again.alarms = AlarmStore(again.store, rig.clock, "us-east-1", "123456789012",
                              tmp_path / "alarms.json")
    again.sagemaker = rig.sagemaker
    again.service = AutoScalingService(SageMakerVariants(rig.sagemaker), rig.clock,
                                       "us-east-1", "123456789012", again.alarms,
                                       tmp_path / "autoscaling.json")
    assert again.service.policy_by_arn(arn) is not None
    assert again.activities() == before
    assert again.call("DescribeScalableTargets")["ScalableTargets"][0]["MaxCapacity"] == 10
    assert again.alarms.state("queue-high") == "ALARM"


def test_a_step_policy_runs_from_ok_actions_too() -> None:
    """An alarm's OKActions may name a step policy: it runs at the change to OK (once: only
    ALARM repeats), with the step that holds the breach below the threshold."""
    rig = Rig()
    out = rig.step_policy("out", "queue", 20.0, "GreaterThanOrEqualToThreshold",
                          AdjustmentType="ChangeInCapacity", StepAdjustments=OUT_STEPS)
    back: str = rig.call("PutScalingPolicy", PolicyName="back", PolicyType="StepScaling",
                         StepScalingPolicyConfiguration={
                             "AdjustmentType": "ChangeInCapacity", "StepAdjustments": [
                                 {"MetricIntervalUpperBound": 0, "ScalingAdjustment": -1}]})[
        "PolicyARN"]
    alarm = rig.alarms.get("queue")
    assert alarm is not None
    rig.cloudwatch.call("PutMetricAlarm", {"AlarmName": "queue", **alarm.config,
                                           "AlarmActions": [out], "OKActions": [back]})
    rig.minute(queue=25.0)
    assert rig.sagemaker.updates == [2]
    rig.minute(queue=1.0)
    rig.minute(queue=1.0)
    assert rig.sagemaker.updates == [2, 1]
    assert rig.activities()[0]["Cause"] == "monitor alarm queue in state OK triggered policy back"
