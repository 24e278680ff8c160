"""Application Auto Scaling of inference components' copies, and ManagedInstanceScaling of their
variant, step by step: the real components' control plane on a SQLite store,
the real metric store, alarms and engine, a fake clock so every period is exact. Datapoints are
put as the component's metrics would be (AWS/SageMaker, dimension InferenceComponentName).

The same paths over HTTP with boto3: tests/integration/test_component_scaling.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from emulator.autoscaling import AutoScalingService, SageMakerVariants, ScalingEngine
from emulator.autoscaling.wire import ScalingError
from emulator.clock import Clock
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.series import MetricStore
from emulator.control.inference_components import InferenceComponents
from emulator.control.state_db import ControlStore, Deployment, EndpointRecord
from tests.clock_support import FakeTime

IC = "inference-component/ic"
KEY = {"ServiceNamespace": "sagemaker", "ResourceId": IC,
       "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount"}
DIMS = {"InferenceComponentName": "ic"}
# ml.m5.xlarge: 4 vCPUs, 16 GiB; a copy takes 3 cores, so one copy per instance.
THREE_CORES = {"NumberOfCpuCoresRequired": 3, "MinMemoryRequiredInMb": 1024}


def _arn(kind: str, name: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:123456789012:{kind}/{name.lower()}"


class Control:
    """The control plane as the autoscaler reaches it: the components' operations."""

    def __init__(self, components: InferenceComponents) -> None:
        self.components = components
        self.updates: list[tuple[str, dict[str, Any]]] = []

    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        if not operation.startswith("Describe"):
            self.updates.append((operation, params))
        return await self.components.handlers()[operation](params)


class Rig:
    def __init__(self, root: Path, managed: dict[str, Any] | None = None, instances: int = 1,
                 copies: int = 1) -> None:
        self.time = FakeTime()
        self.clock = Clock(60, time_fn=self.time)
        self.store = ControlStore(root / "control.sqlite3")
        variant: dict[str, Any] = {"VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge",
                                   "InitialInstanceCount": instances}
        if managed is not None:
            variant["ManagedInstanceScaling"] = managed
        self.store.add_endpoint(EndpointRecord(
            name="ep", created=1.0, modified=1.0, status="InService",
            current=Deployment(config_name="ep", variants=[variant], spec={})))
        self.components = InferenceComponents(self.store, _arn, clock=self.time)
        self.metrics = MetricStore(self.clock)
        self.alarms = AlarmStore(self.metrics, self.clock, "us-east-1", "123456789012")
        self.control = Control(self.components)
        self.service = AutoScalingService(SageMakerVariants(self.control),
                                          self.clock, "us-east-1", "123456789012", self.alarms)
        self.engine = ScalingEngine(self.service, self.metrics, self.clock)
        self.copies = copies

    async def start(self) -> None:
        await self.components.create({
            "InferenceComponentName": "ic", "EndpointName": "ep",
            "Specification": {"Container": {"Image": "img"},
                              "ComputeResourceRequirements": THREE_CORES},
            "RuntimeConfig": {"CopyCount": self.copies}})
        await self.until_in_service()

    async def until_in_service(self) -> None:
        """The component's task runs on this loop: let it reach InService."""
        for _ in range(100):
            if (await self.describe())["InferenceComponentStatus"] == "InService":
                return
            await asyncio.sleep(0)
        raise AssertionError(f"not InService: {await self.describe()}")

    async def describe(self) -> dict[str, Any]:
        return await self.components.describe({"InferenceComponentName": "ic"})

    async def copies_now(self) -> tuple[int, int]:
        runtime = (await self.describe())["RuntimeConfig"]
        return runtime["DesiredCopyCount"], runtime["CurrentCopyCount"]

    def instances(self) -> int:
        endpoint = self.store.get_endpoint("ep")
        assert endpoint is not None
        return int(endpoint.current.variants[0]["InitialInstanceCount"])

    def minute(self, metric: str, value: float, *, points: int = 1) -> None:
        """One emulated minute (one real second) with ``points`` datapoints of ``value``."""
        for _ in range(points):
            self.time.now += 1 / points
            self.metrics.record("AWS/SageMaker", metric, DIMS, value, "None")

    def record_then_wait(self, metric: str, value: float, period: int) -> None:
        """One datapoint, then the emulated ``period`` it falls in passes."""
        self.metrics.record("AWS/SageMaker", metric, DIMS, value, "None")
        self.time.now += self.clock.real_duration(period)

    async def evaluate(self) -> None:
        """The alarms (their actions run the policies), the component's update, the engine's
        visit of the target (activities settled, Min/Max kept)."""
        await self.alarms.evaluate_all()
        await self.until_in_service()
        await self.engine.evaluate(self.service.targets[IC])

    async def activities(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await self.service.handle(
            "DescribeScalingActivities", {"ServiceNamespace": "sagemaker"}))["ScalingActivities"]
        return found


def _run(root: Path, test: Callable[[Rig], Awaitable[None]], **rig: Any) -> None:
    async def main() -> None:
        scaling = Rig(root, **rig)
        await scaling.start()
        try:
            await test(scaling)
        finally:
            await scaling.components.aclose()

    asyncio.run(main())


def test_register_a_component_and_the_refusals(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        register = rig.service.handle
        await register("RegisterScalableTarget", {**KEY, "MinCapacity": 0, "MaxCapacity": 4})
        (target,) = (await register("DescribeScalableTargets", {
            "ServiceNamespace": "sagemaker"}))["ScalableTargets"]
        assert target["ScalableDimension"] == KEY["ScalableDimension"]
        assert (target["ResourceId"], target["MinCapacity"], target["MaxCapacity"]) == (IC, 0, 4)
        with pytest.raises(ScalingError, match="The inference component nope does not exist"):
            await register("RegisterScalableTarget", {
                **KEY, "ResourceId": "inference-component/nope", "MinCapacity": 0,
                "MaxCapacity": 1})
        with pytest.raises(ScalingError, match="MaxCapacity must be at least 1"):
            await register("RegisterScalableTarget", {**KEY, "MinCapacity": 0, "MaxCapacity": 0})
        with pytest.raises(ScalingError, match="Unsupported service namespace, resource type"):
            await register("RegisterScalableTarget", {
                **KEY, "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
                "MinCapacity": 1, "MaxCapacity": 2})
        with pytest.raises(ScalingError, match="MinCapacity must be at least 1 for the scalable "
                                               "dimension sagemaker:variant:DesiredInstanceCount"):
            await register("RegisterScalableTarget", {
                "ServiceNamespace": "sagemaker", "ResourceId": "endpoint/ep/variant/AllTraffic",
                "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
                "MinCapacity": 0, "MaxCapacity": 2})
        with pytest.raises(ScalingError, match="Unsupported metric type "
                                               "SageMakerVariantInvocationsPerInstance"):
            await register("PutScalingPolicy", {
                **KEY, "PolicyName": "p", "PolicyType": "TargetTrackingScaling",
                "TargetTrackingScalingPolicyConfiguration": {
                    "TargetValue": 5.0, "PredefinedMetricSpecification": {
                        "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}}})

    _run(tmp_path, test)


@pytest.mark.parametrize(("metric_type", "metric", "statistic", "period"), [
    ("SageMakerInferenceComponentInvocationsPerCopy", "InvocationsPerCopy", "Sum", 60),
    ("SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution",
     "ConcurrentRequestsPerCopy", "Maximum", 10),
])
def test_the_predefined_metrics_alarms(tmp_path: Path, metric_type: str, metric: str,
                                       statistic: str, period: int) -> None:
    async def test(rig: Rig) -> None:
        await rig.service.handle("RegisterScalableTarget",
                                 {**KEY, "MinCapacity": 0, "MaxCapacity": 4})
        out = await rig.service.handle("PutScalingPolicy", {
            **KEY, "PolicyName": "p", "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 5.0,
                "PredefinedMetricSpecification": {"PredefinedMetricType": metric_type}}})
        for item in out["Alarms"]:
            alarm = rig.alarms.get(item["AlarmName"])
            assert alarm is not None
            assert item["AlarmName"].startswith(f"TargetTracking-{IC}-Alarm")
            assert (alarm.config["Namespace"], alarm.config["MetricName"],
                    alarm.config["Statistic"], alarm.config["Period"]) == (
                "AWS/SageMaker", metric, statistic, period)
            assert alarm.config["Dimensions"] == [{"Name": "InferenceComponentName",
                                                   "Value": "ic"}]

    _run(tmp_path, test)


def test_target_tracking_on_invocations_per_copy_adds_copies(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.service.handle("RegisterScalableTarget",
                                 {**KEY, "MinCapacity": 1, "MaxCapacity": 4})
        await rig.service.handle("PutScalingPolicy", {
            **KEY, "PolicyName": "p", "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 70.0, "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"}}})
        for _ in range(2):
            rig.minute("InvocationsPerCopy", 1.0, points=200)
            await rig.evaluate()
        assert await rig.copies_now() == (1, 1)  # two high minutes are not enough
        rig.minute("InvocationsPerCopy", 1.0, points=200)
        await rig.alarms.evaluate_all()
        # The same path as UpdateInferenceComponentRuntimeConfig (Updating, then InService)
        assert rig.control.updates == [("UpdateInferenceComponentRuntimeConfig", {
            "InferenceComponentName": "ic", "DesiredRuntimeConfig": {"CopyCount": 3}})]
        assert (await rig.copies_now())[0] == 3  # ceil(1 * 200 / 70)
        (activity,) = await rig.activities()
        assert activity["ScalableDimension"] == KEY["ScalableDimension"]
        assert activity["Description"] == "Setting desired copy count to 3."
        assert activity["StatusCode"] == "InProgress"
        await rig.evaluate()
        # one copy per instance and one instance: two copies stay pending, the change is done
        assert await rig.copies_now() == (3, 1)
        (activity,) = await rig.activities()
        assert activity["StatusCode"] == "Successful"
        assert activity["StatusMessage"] == ("Successfully set desired copy count to 3. "
                                             "Change successfully fulfilled by sagemaker.")

    _run(tmp_path, test)


def test_scale_in_to_zero_then_back_through_the_no_capacity_alarm(tmp_path: Path) -> None:
    """AWS's scale-to-zero recipe: MinCapacity 0 on the component, MinInstanceCount 0 on the
    variant; a step policy (+1 copy) run by an alarm on NoCapacityInvocationFailures."""

    async def test(rig: Rig) -> None:
        assert (await rig.copies_now(), rig.instances()) == ((2, 2), 2)
        await rig.service.handle("RegisterScalableTarget",
                                 {**KEY, "MinCapacity": 0, "MaxCapacity": 2})
        await rig.service.handle("PutScalingPolicy", {
            **KEY, "PolicyName": "tracking", "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 5.0, "ScaleInCooldown": 60, "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"}}})
        step = await rig.service.handle("PutScalingPolicy", {
            **KEY, "PolicyName": "from-zero", "PolicyType": "StepScaling",
            "StepScalingPolicyConfiguration": {
                "AdjustmentType": "ChangeInCapacity", "MetricAggregationType": "Maximum",
                "Cooldown": 60,
                "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]}})
        rig.alarms.put("no-capacity", "MetricAlarm", {
            "Namespace": "AWS/SageMaker", "MetricName": "NoCapacityInvocationFailures",
            "Dimensions": [{"Name": "InferenceComponentName", "Value": "ic"}],
            "Statistic": "Maximum", "Period": 30, "EvaluationPeriods": 1,
            "DatapointsToAlarm": 1, "Threshold": 1.0,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "missing", "ActionsEnabled": True,
            "AlarmActions": [step["PolicyARN"]], "OKActions": [],
            "InsufficientDataActions": []}, {})
        for _ in range(16):  # idle: no call per copy, 15 full minutes below the target
            rig.minute("InvocationsPerCopy", 0.0)
            await rig.evaluate()
        assert await rig.copies_now() == (0, 0)
        assert rig.instances() == 0  # ManagedInstanceScaling released both, down to Min 0
        rig.record_then_wait("NoCapacityInvocationFailures", 1.0, 30)  # a call found no copy
        await rig.evaluate()
        assert await rig.copies_now() == (1, 1)
        assert rig.instances() == 1  # an instance for the pending copy
        causes = [a["Cause"] for a in await rig.activities()]
        assert causes[0] == ("monitor alarm no-capacity in state ALARM triggered policy "
                             "from-zero")

    _run(tmp_path, test, copies=2, instances=2,
         managed={"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 2})


def test_managed_instance_scaling_adds_for_pending_copies_and_releases_idle(
        tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        assert (await rig.copies_now(), rig.instances()) == ((1, 1), 1)

        async def copies(count: int) -> tuple[int, int, int]:
            await rig.components.update_runtime_config({
                "InferenceComponentName": "ic", "DesiredRuntimeConfig": {"CopyCount": count}})
            await rig.until_in_service()
            desired, current = await rig.copies_now()
            return desired, current, rig.instances()

        assert await copies(3) == (3, 3, 3)  # an instance per pending copy
        assert await copies(5) == (5, 4, 4)  # up to MaxInstanceCount: one stays pending
        assert await copies(2) == (2, 2, 2)  # idle instances released
        assert await copies(0) == (0, 0, 1)  # down to MinInstanceCount

    _run(tmp_path, test,
         managed={"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 4})


def test_without_managed_instance_scaling_the_count_is_the_users(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.components.update_runtime_config({
            "InferenceComponentName": "ic", "DesiredRuntimeConfig": {"CopyCount": 3}})
        await rig.until_in_service()
        assert (await rig.copies_now(), rig.instances()) == ((3, 1), 1)

    _run(tmp_path, test,
         managed={"Status": "DISABLED", "MinInstanceCount": 1, "MaxInstanceCount": 4})


def test_a_component_target_and_its_policy_survive_a_restart(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        state = tmp_path / "scaling.json"
        rig.service.state_file = state
        await rig.service.handle("RegisterScalableTarget",
                                 {**KEY, "MinCapacity": 0, "MaxCapacity": 3})
        await rig.service.handle("PutScalingPolicy", {
            **KEY, "PolicyName": "from-zero", "PolicyType": "StepScaling",
            "StepScalingPolicyConfiguration": {
                "AdjustmentType": "ChangeInCapacity",
                "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]}})
        again = AutoScalingService(SageMakerVariants(rig.control), rig.clock, "us-east-1",
                                   "123456789012", rig.alarms, state_file=state)
        (target,) = (await again.handle("DescribeScalableTargets", {
            "ServiceNamespace": "sagemaker", "ScalableDimension": KEY["ScalableDimension"]}
        ))["ScalableTargets"]
        assert (target["ResourceId"], target["ScalableDimension"], target["MinCapacity"]) == (
            IC, KEY["ScalableDimension"], 0)
        (policy,) = (await again.handle("DescribeScalingPolicies", {
            "ServiceNamespace": "sagemaker", "ResourceId": IC}))["ScalingPolicies"]
        assert (policy["PolicyName"], policy["ScalableDimension"]) == (
            "from-zero", KEY["ScalableDimension"])
        # the other dimension's filter finds none of them
        assert (await again.handle("DescribeScalableTargets", {
            "ServiceNamespace": "sagemaker",
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}
        ))["ScalableTargets"] == []

    _run(tmp_path, test)
