"""Application Auto Scaling of an inference component's copies, and scale to zero as AWS
documents it: boto3 against a real emulator, ``--clock-scale 240`` (an
emulated minute is a quarter of a real second).

Back from zero runs on the runtime's own NoCapacityInvocationFailures (a call that found no
copy). The scale-in to zero tracks a metric the test publishes (PutMetricData refuses the AWS/
namespaces, as on AWS): the runtime publishes InvocationsPerCopy only when calls come, so an
idle component has no datapoint there (docs/inference-components.md, Scaling). The decisions
step by step, on the predefined metrics, are in tests/unit/test_component_scaling.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import validation_error
from tests.component_support import ROLE, ComponentServer, deploy_component, put_scale_from_zero
from tests.support import scale_request, wait_until

DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
# ml.m5.xlarge: 4 vCPUs; a copy takes 3 cores, so one copy per instance.
RESOURCES = {"NumberOfCpuCoresRequired": 3, "MinMemoryRequiredInMb": 1024}


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentServer]:
    module = ComponentServer(tmp_path_factory.mktemp("component-scaling"), scales={"m": 2.0},
                             clock_scale=240)
    yield module
    module.stop()


def _key(component: str) -> dict[str, str]:
    return {"ServiceNamespace": "sagemaker", "ResourceId": f"inference-component/{component}",
            "ScalableDimension": DIMENSION}


def _deploy(module: ComponentServer, name: str, copies: int, **variant: Any) -> None:
    """An endpoint for components on ml.m5.xlarge and one component ``name``-ic on it."""
    sm = module.client("sagemaker")
    sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": "triton", "ModelDataUrl": module.models["m"]})
    deploy_component(sm, name, f"{name}-ic", name, copies, RESOURCES, **variant)
    wait_until(lambda: _copies(sm, f"{name}-ic") == (copies, copies), 60,
               f"{name}-ic InService with {copies} copies")


def _copies(sm: Any, component: str) -> tuple[int, int] | None:
    described = sm.describe_inference_component(InferenceComponentName=component)
    if described["InferenceComponentStatus"] != "InService":
        return None
    runtime = described["RuntimeConfig"]
    return runtime["DesiredCopyCount"], runtime["CurrentCopyCount"]


def _instances(sm: Any, endpoint: str) -> int:
    count: int = sm.describe_endpoint(EndpointName=endpoint)["ProductionVariants"][0][
        "CurrentInstanceCount"]
    return count


def test_register_a_component_and_the_refusals(module: ComponentServer) -> None:
    _deploy(module, "reg", 1)
    asg = module.client("application-autoscaling")
    asg.register_scalable_target(**_key("reg-ic"), MinCapacity=0, MaxCapacity=3)
    (target,) = asg.describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=["inference-component/reg-ic"],
        ScalableDimension=DIMENSION)["ScalableTargets"]
    assert (target["ScalableDimension"], target["MinCapacity"], target["MaxCapacity"]) == (
        DIMENSION, 0, 3)
    assert validation_error(asg.register_scalable_target, **_key("missing"), MinCapacity=0,
                            MaxCapacity=1) == (
        "The inference component missing does not exist. Create it (CreateInferenceComponent) "
        "before registering it as a scalable target.")
    assert "MinCapacity must be at least 1" in validation_error(
        asg.register_scalable_target, ServiceNamespace="sagemaker",
        ResourceId="endpoint/reg/variant/AllTraffic",
        ScalableDimension="sagemaker:variant:DesiredInstanceCount", MinCapacity=0,
        MaxCapacity=1)
    assert "Unsupported service namespace, resource type or scalable dimension" in validation_error(
        asg.register_scalable_target, **{**_key("reg-ic"), "ScalableDimension":
                                          "sagemaker:variant:DesiredInstanceCount"},
        MinCapacity=1, MaxCapacity=2)
    assert "Unsupported metric type SageMakerVariantInvocationsPerInstance" in validation_error(
        asg.put_scaling_policy, **_key("reg-ic"), PolicyName="wrong",
        PolicyType="TargetTrackingScaling", TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 5.0, "PredefinedMetricSpecification": {
                "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}})


def test_scale_to_zero_and_back_through_the_no_capacity_alarm(module: ComponentServer) -> None:
    """SageMaker's "Scale an endpoint to zero instances", its commands as boto3 calls."""
    _deploy(module, "zero", 1, ManagedInstanceScaling={
        "Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 2})
    sm, cw = module.client("sagemaker"), module.client("cloudwatch")
    asg = module.client("application-autoscaling")
    key = _key("zero-ic")
    asg.register_scalable_target(**key, MinCapacity=0, MaxCapacity=2)
    asg.put_scaling_policy(
        **key, PolicyName="per-copy", PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 5.0, "ScaleInCooldown": 60, "CustomizedMetricSpecification": {
                "Namespace": "CI/Components", "MetricName": "CallsPerCopy",
                "Statistic": "Sum", "Dimensions": [{"Name": "InferenceComponentName",
                                                    "Value": "zero-ic"}]}})
    put_scale_from_zero(asg, cw, key, "zero-ic", "from-zero", "zero-ic-no-capacity",
                        TreatMissingData="missing")

    stop = threading.Event()

    def publish() -> None:  # idle: no call per copy
        client = module.client("cloudwatch")
        while not stop.wait(0.05):
            client.put_metric_data(Namespace="CI/Components", MetricData=[{
                "MetricName": "CallsPerCopy", "Value": 0.0,
                "Dimensions": [{"Name": "InferenceComponentName", "Value": "zero-ic"}]}])

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        # 15 emulated minutes under the target: the copy goes, then the instance
        wait_until(lambda: _copies(sm, "zero-ic") == (0, 0), 30, "zero-ic scaled to 0 copies")
        wait_until(lambda: _instances(sm, "zero") == 0, 10, "the endpoint at 0 instances")
        stop.set()
        # a call finds no copy: it fails, and counts in NoCapacityInvocationFailures
        rt = module.client("sagemaker-runtime")
        with pytest.raises(ClientError) as raised:
            rt.invoke_endpoint(EndpointName="zero", InferenceComponentName="zero-ic",
                               ContentType="application/json", Body=b"{}")
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        wait_until(lambda: _copies(sm, "zero-ic") == (1, 1), 60, "zero-ic back to 1 copy")
        assert _instances(sm, "zero") == 1
    finally:
        stop.set()
        thread.join(timeout=10)

    def activities() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = asg.describe_scaling_activities(
            ServiceNamespace="sagemaker", ResourceId="inference-component/zero-ic",
            ScalableDimension=DIMENSION)["ScalingActivities"]
        return found

    # the engine's next visit finds the component InService: the activity is done
    wait_until(lambda: {a["StatusCode"] for a in activities()} == {"Successful"}, 10,
               "both activities Successful")
    newest, scale_in = activities()[0], activities()[-1]
    assert newest["Cause"] == ("monitor alarm zero-ic-no-capacity in state ALARM triggered "
                               "policy from-zero")
    assert newest["Description"] == "Setting desired copy count to 1."
    assert scale_in["Description"] == "Setting desired copy count to 0."
    assert "-AlarmLow-" in scale_in["Cause"]
    assert newest["StatusMessage"] == ("Successfully set desired copy count to 1. Change "
                                       "successfully fulfilled by sagemaker.")


def test_target_tracking_adds_a_copy_under_load(module: ComponentServer) -> None:
    """The runtime's own InvocationsPerCopy: calls above the target per copy for three
    (emulated) minutes add a copy, which ManagedInstanceScaling gives an instance of its own
    (one copy fits an ml.m5.xlarge); the calls succeed meanwhile."""
    _deploy(module, "busy", 1, ManagedInstanceScaling={
        "Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 2})
    sm, asg = module.client("sagemaker"), module.client("application-autoscaling")
    asg.register_scalable_target(**_key("busy-ic"), MinCapacity=1, MaxCapacity=2)
    asg.put_scaling_policy(
        **_key("busy-ic"), PolicyName="per-copy", PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 2.0, "PredefinedMetricSpecification": {
                "PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"}})
    rt = module.client("sagemaker-runtime")
    failed: list[str] = []

    def call() -> None:
        try:
            rt.invoke_endpoint(EndpointName="busy", InferenceComponentName="busy-ic",
                               ContentType="application/json", Body=scale_request([1, 2, 3, 4]))
        except ClientError as exc:
            failed.append(str(exc))

    # a call every few milliseconds: far above 2 per copy per (quarter-second) minute (the
    # wait's polls are the load: their interval is given, so they do not slow down)
    wait_until(lambda: call() is None and _copies(sm, "busy-ic") == (2, 2), 60,
               "busy-ic scaled out to 2 copies", interval_s=0.02)
    assert failed == []
    assert _instances(sm, "busy") == 2
    (activity,) = asg.describe_scaling_activities(
        ServiceNamespace="sagemaker", ResourceId="inference-component/busy-ic")[
        "ScalingActivities"]
    assert activity["Description"] == "Setting desired copy count to 2."
    assert "-AlarmHigh-" in activity["Cause"]


def test_an_idle_component_scales_in_on_concurrent_requests_per_copy(
        module: ComponentServer) -> None:
    """The runtime publishes ConcurrentRequestsPerCopy every 10 emulated seconds, 0 when no
    call is in flight, so target tracking on the high-resolution predefined metric scales an
    idle component in (to its MinCapacity) with no call at all."""
    _deploy(module, "idle", 2, InitialInstanceCount=2)  # one copy per ml.m5.xlarge
    sm, asg = module.client("sagemaker"), module.client("application-autoscaling")
    asg.register_scalable_target(**_key("idle-ic"), MinCapacity=1, MaxCapacity=2)
    asg.put_scaling_policy(
        **_key("idle-ic"), PolicyName="concurrency", PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 1.0, "PredefinedMetricSpecification": {"PredefinedMetricType":
                "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"}})
    wait_until(lambda: _copies(sm, "idle-ic") == (1, 1), 60, "idle-ic scaled in to 1 copy")
    (activity,) = asg.describe_scaling_activities(
        ServiceNamespace="sagemaker", ResourceId="inference-component/idle-ic")[
        "ScalingActivities"]
    assert activity["Description"] == "Setting desired copy count to 1."
    assert "-AlarmLow-" in activity["Cause"]
