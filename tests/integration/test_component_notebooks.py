"""AWS's own example notebooks for inference components, their client calls against `mme serve`.

Each test follows one published notebook's sequence of boto3 / SageMaker Python SDK v2 calls,
with the notebook's LLM container and model replaced by a one-line Triton scale model (so a
copy starts in about a second): the calls, their arguments' shapes and the waits the notebook
relies on are the notebook's. One emulator for the module (``--clock-scale 240``: an emulated
minute is a quarter of a real second, so scaling alarms fire quickly); each test has its own
endpoint and names, so the tests run in any order.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.client_support import DUMMY_CREDENTIALS
from tests.component_support import ROLE, ComponentServer, put_scale_from_zero
from tests.support import output_of, scale_request, wait_until

DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
REQUEST = scale_request([1.0, 2.0, 3.0, 4.0])


class Module(ComponentServer):
    """The server on a fast emulated clock, and the notebooks' SDK session and invoke."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, clock_scale=240)

    def client(self, service: str, **config: Any) -> Any:
        return super().client(service, read_timeout=120, **config)

    def session(self) -> Any:
        """A SageMaker Python SDK v2 Session on this emulator, as the notebooks use one."""
        sagemaker = pytest.importorskip("sagemaker")
        boto_session = boto3.Session(**DUMMY_CREDENTIALS)
        return sagemaker.Session(boto_session=boto_session,
                                 sagemaker_client=self.client("sagemaker"),
                                 sagemaker_runtime_client=self.client("sagemaker-runtime"))

    def invoke(self, endpoint: str, component: str) -> tuple[list[float], str]:
        """The notebooks' invoke_endpoint with InferenceComponentName: the answer's values and
        the copy that served it (the emulator's X-Mme-Instance)."""
        answer = self.client("sagemaker-runtime").invoke_endpoint(
            EndpointName=endpoint, InferenceComponentName=component,
            ContentType="application/json", Body=REQUEST)
        copy = answer["ResponseMetadata"]["HTTPHeaders"]["x-mme-instance"]
        return output_of(answer["Body"].read()).tolist(), copy


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    # The SDK's own switch for its "v2 is on the path of deprecation" warning (the suite turns
    # warnings into errors); set before the SDK is first imported.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
        module = Module(tmp_path_factory.mktemp("component-notebooks"))
        yield module
        module.stop()


def _status_when_settled(sm: Any, component: str) -> dict[str, Any]:
    """The notebooks' wait: describe until InService or Failed (they poll every 30 s)."""
    described: dict[str, Any] = {}

    def settled() -> bool:
        described.update(sm.describe_inference_component(InferenceComponentName=component))
        return described["InferenceComponentStatus"] in ("InService", "Failed")

    wait_until(settled, 60, f"{component} InService or Failed")
    return described


def _variant(sm: Any, endpoint: str) -> dict[str, Any]:
    variant: dict[str, Any] = sm.describe_endpoint(EndpointName=endpoint)["ProductionVariants"][0]
    return variant


def test_the_inference_components_workshop_hosts_two_models_and_scales_one(
        module: Module) -> None:
    """aws/amazon-sagemaker-examples, archived/workshops/lab-inference-components-with-scaling/
    (1_create_endpoint, 2a_codegen25_FT_7b, 2c_meta-llama2-7b-lmi-autoscaling, 3_misc_cleanup)
    and deploy_and_monitor/sm-app_autoscaling_realtime_endpoints_inference_components/: an
    endpoint config naming no model, with ManagedInstanceScaling, RoutingConfig and the startup
    timeouts; a Model given as ``Containers=[...]``; one component of that Model, one of its
    own Container with StartupParameters; the SDK's Predictor with ``component_name``;
    Application Auto Scaling with the component's target tracking policies; a copy count
    raised and waited for as InService; the SDK's update_predictor with new resources only;
    the cleanup in the notebooks' order (including their
    deregistration under the variant's dimension, which finds nothing)."""
    sm, session = module.client("sagemaker"), module.session()
    from sagemaker.deserializers import JSONDeserializer
    from sagemaker.predictor import Predictor
    from sagemaker.serializers import JSONSerializer

    sm.create_endpoint_config(EndpointConfigName="lab-config", ExecutionRoleArn=ROLE,
                              ProductionVariants=[{
        "VariantName": "AllTraffic", "InstanceType": "ml.g5.12xlarge", "InitialInstanceCount": 1,
        "ModelDataDownloadTimeoutInSeconds": 3600,
        "ContainerStartupHealthCheckTimeoutInSeconds": 3600,
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 1,
                                   "MaxInstanceCount": 2},
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}}])
    sm.create_endpoint(EndpointName="lab", EndpointConfigName="lab-config")
    assert session.wait_for_endpoint("lab", poll=0.2)["EndpointStatus"] == "InService"

    sm.create_model(ModelName="lab-double", ExecutionRoleArn=ROLE, Containers=[{
        "Image": "triton", "ModelDataUrl": module.models["double"],
        "Environment": {"SM_NUM_GPUS": "1", "MAX_INPUT_LENGTH": "2048"}}])
    sm.create_inference_component(
        InferenceComponentName="lab-ic-double", EndpointName="lab", VariantName="AllTraffic",
        Specification={"ModelName": "lab-double", "ComputeResourceRequirements": {
            "NumberOfAcceleratorDevicesRequired": 1, "NumberOfCpuCoresRequired": 1,
            "MinMemoryRequiredInMb": 1024}},
        RuntimeConfig={"CopyCount": 1})
    sm.create_inference_component(
        InferenceComponentName="lab-ic-triple", EndpointName="lab", VariantName="AllTraffic",
        Specification={
            "Container": {"Image": "triton", "ArtifactUrl": module.models["triple"]},
            "StartupParameters": {"ModelDataDownloadTimeoutInSeconds": 300,
                                  "ContainerStartupHealthCheckTimeoutInSeconds": 600},
            "ComputeResourceRequirements": {"NumberOfAcceleratorDevicesRequired": 1,
                                            "MinMemoryRequiredInMb": 1024}},
        RuntimeConfig={"CopyCount": 1})
    assert _status_when_settled(sm, "lab-ic-double")["InferenceComponentStatus"] == "InService"
    triple = _status_when_settled(sm, "lab-ic-triple")
    assert triple["InferenceComponentStatus"] == "InService"
    assert triple["Specification"]["StartupParameters"] == {
        "ModelDataDownloadTimeoutInSeconds": 300,
        "ContainerStartupHealthCheckTimeoutInSeconds": 600}

    predictor = Predictor(endpoint_name="lab", sagemaker_session=session,
                          component_name="lab-ic-double", serializer=JSONSerializer(),
                          deserializer=JSONDeserializer())
    assert predictor.predict(json.loads(REQUEST))["outputs"][0]["data"] == [2.0, 4.0, 6.0, 8.0]
    assert module.invoke("lab", "lab-ic-triple")[0] == [3.0, 6.0, 9.0, 12.0]
    listed = sm.list_inference_components(EndpointNameEquals="lab")["InferenceComponents"]
    assert sorted(c["InferenceComponentName"] for c in listed) == [
        "lab-ic-double", "lab-ic-triple"]

    asg = module.client("application-autoscaling")
    key = {"ServiceNamespace": "sagemaker", "ResourceId": "inference-component/lab-ic-double",
           "ScalableDimension": DIMENSION}
    assert asg.register_scalable_target(**key, MinCapacity=1, MaxCapacity=3)[
        "ScalableTargetARN"].startswith("arn:aws:application-autoscaling:")
    for name, metric in (("lab-concurrency", "SageMakerInferenceComponentConcurrentRequests"
                                             "PerCopyHighResolution"),
                         ("lab-invocations", "SageMakerInferenceComponentInvocationsPerCopy")):
        policy = asg.put_scaling_policy(
            **key, PolicyName=name, PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration={
                "TargetValue": 50.0, "ScaleInCooldown": 300, "ScaleOutCooldown": 300,
                "PredefinedMetricSpecification": {"PredefinedMetricType": metric}})
        names = [a["AlarmName"] for a in policy["Alarms"]]
        assert ["-AlarmHigh-" in names[0], "-AlarmLow-" in names[1]] == [True, True], names
    described = asg.describe_scaling_policies(PolicyNames=["lab-invocations"], **key)
    assert [p["PolicyName"] for p in described["ScalingPolicies"]] == ["lab-invocations"]

    # A copy count raised (as a scaling action would): once InService again, both copies serve.
    sm.update_inference_component_runtime_config(InferenceComponentName="lab-ic-double",
                                                 DesiredRuntimeConfig={"CopyCount": 2})
    scaled = _status_when_settled(sm, "lab-ic-double")
    assert (scaled["InferenceComponentStatus"], scaled["RuntimeConfig"]["CurrentCopyCount"],
            scaled["RuntimeConfig"]["DesiredCopyCount"]) == ("InService", 2, 2)
    served_by = {module.invoke("lab", "lab-ic-double")[1] for _ in range(4)}
    assert len(served_by) == 2, f"calls right after InService all went to {served_by}"
    # ml.g5.12xlarge has 4 GPUs: three copies of one GPU each still fit on one instance.
    assert _variant(sm, "lab")["CurrentInstanceCount"] == 1

    # The SDK's Predictor.update_predictor(resources=...) sends a Specification with only the
    # new ComputeResourceRequirements: the component keeps its own Container.
    from sagemaker.compute_resource_requirements.resource_requirements import (
        ResourceRequirements,
    )
    # (It waits with the session's wait_for_inference_component, which polls every 20 s.)
    session.wait_for_inference_component = functools.partial(
        session.wait_for_inference_component, poll=0.2)
    Predictor(endpoint_name="lab", sagemaker_session=session,
              component_name="lab-ic-triple").update_predictor(
        resources=ResourceRequirements(requests={"num_accelerators": 1, "memory": 2048,
                                                 "copies": 1}))
    updated = sm.describe_inference_component(InferenceComponentName="lab-ic-triple")
    assert updated["InferenceComponentStatus"] == "InService"
    assert updated["Specification"]["Container"]["ArtifactUrl"] == module.models["triple"]
    assert updated["Specification"]["ComputeResourceRequirements"]["MinMemoryRequiredInMb"] == 2048
    assert module.invoke("lab", "lab-ic-triple")[0] == [3.0, 6.0, 9.0, 12.0]

    # The cleanup cells of sm-app_autoscaling_realtime_endpoints_inference_components and of
    # aws-samples/sagemaker-genai-hosting-examples scale-to-zero-endpoint/
    # llama3-8b-scale-to-zero-autoscaling.ipynb name the component with the variant's dimension
    # and catch only ObjectNotFoundException: no such target, and the component's is kept.
    wrong = {**key, "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}
    with pytest.raises(asg.exceptions.ObjectNotFoundException):
        asg.deregister_scalable_target(**wrong)
    with pytest.raises(asg.exceptions.ObjectNotFoundException):
        asg.delete_scaling_policy(PolicyName="lab-invocations", **wrong)
    assert len(asg.describe_scaling_policies(**key)["ScalingPolicies"]) == 2
    for name in ("lab-concurrency", "lab-invocations"):
        asg.delete_scaling_policy(PolicyName=name, **key)
    asg.deregister_scalable_target(**key)
    for name in ("lab-ic-double", "lab-ic-triple"):
        sm.delete_inference_component(InferenceComponentName=name)
    for name in ("lab-ic-double", "lab-ic-triple"):
        session.wait_for_inference_component_deletion(name, poll=0.2)
    sm.delete_endpoint(EndpointName="lab")
    sm.delete_endpoint_config(EndpointConfigName="lab-config")
    sm.delete_model(ModelName="lab-double")
    wait_until(lambda: not sm.list_endpoints(NameContains="lab")["Endpoints"], 30,
               "the endpoint gone")


def test_scale_down_to_zero_and_back_as_the_notebook_waits_for_it(module: Module) -> None:
    """aws-samples/sagemaker-genai-hosting-examples, 03-features/autoscaling/
    scale_down_to_zero.ipynb (the blog "Unlock cost savings with the new scale down to zero
    feature in SageMaker Inference"): ManagedInstanceScaling down to 0 instances; the
    component registered with MinCapacity 0, target tracking on
    ConcurrentRequestsPerCopyHighResolution (which scales the idle component in to 0) and a
    step scaling policy run by a CloudWatch alarm on NoCapacityInvocationFailures. The notebook
    waits for the endpoint at zero, makes a call that fails, waits for the component to be
    InService again, and calls it expecting an answer; then cleans up through the SDK."""
    sm, session = module.client("sagemaker"), module.session()
    sm.create_endpoint_config(EndpointConfigName="zero-config", ExecutionRoleArn=ROLE,
                              ProductionVariants=[{
        "VariantName": "main", "InstanceType": "ml.g5.12xlarge", "InitialInstanceCount": 1,
        "ContainerStartupHealthCheckTimeoutInSeconds": 600,
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0,
                                   "MaxInstanceCount": 2}}])
    sm.create_endpoint(EndpointName="zero", EndpointConfigName="zero-config")
    session.wait_for_endpoint("zero", poll=0.2)
    sm.create_model(ModelName="zero-model", ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": "triton", "ModelDataUrl": module.models["double"],
        "Environment": {"HF_MODEL_ID": "unused-by-triton"}})
    sm.create_inference_component(
        InferenceComponentName="zero-ic", EndpointName="zero", VariantName="main",
        Specification={"ModelName": "zero-model",
                       "StartupParameters": {"ModelDataDownloadTimeoutInSeconds": 600,
                                             "ContainerStartupHealthCheckTimeoutInSeconds": 600},
                       "ComputeResourceRequirements": {"MinMemoryRequiredInMb": 4096,
                                                       "NumberOfAcceleratorDevicesRequired": 1}},
        RuntimeConfig={"CopyCount": 1})
    assert session.wait_for_inference_component("zero-ic", poll=0.2)[
        "InferenceComponentStatus"] == "InService"
    assert module.invoke("zero", "zero-ic")[0] == [2.0, 4.0, 6.0, 8.0]

    asg, cw = module.client("application-autoscaling"), module.client("cloudwatch")
    key = {"ServiceNamespace": "sagemaker", "ResourceId": "inference-component/zero-ic",
           "ScalableDimension": DIMENSION}
    asg.register_scalable_target(**key, MinCapacity=0, MaxCapacity=2)
    asg.put_scaling_policy(
        **key, PolicyName="target-tracking-zero-ic", PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 3, "PredefinedMetricSpecification": {"PredefinedMetricType":
                "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"}})
    put_scale_from_zero(asg, cw, key, "zero-ic", "step-scaling-zero-ic", "scale-from-zero-zero-ic")

    # Idle: the high-resolution target tracking scales the copy in, then the instance goes.
    def at_zero() -> bool:
        runtime = sm.describe_inference_component(InferenceComponentName="zero-ic")
        return (runtime["InferenceComponentStatus"], runtime["RuntimeConfig"]["CurrentCopyCount"],
                _variant(sm, "zero")["CurrentInstanceCount"]) == ("InService", 0, 0)

    wait_until(at_zero, 60, "zero-ic at 0 copies on 0 instances")
    assert session.wait_for_endpoint("zero", poll=0.2)["EndpointStatus"] == "InService"

    with pytest.raises(ClientError) as raised:
        module.invoke("zero", "zero-ic")
    # AWS's words, as the notebook quotes them
    assert raised.value.response["Error"] == {"Code": "ValidationError", "Message": (
        "Inference Component has no capacity to process this request. ApplicationAutoScaling "
        "may be in-progress (if configured) or try to increase the capacity by invoking "
        "UpdateInferenceComponentRuntimeConfig API.")}

    # The notebook's wait after the failed call: the alarm's step scaling puts the component
    # in Updating; once InService again its copy answers the very next call.
    try:
        wait_until(lambda: sm.describe_inference_component(InferenceComponentName="zero-ic")[
            "RuntimeConfig"]["DesiredCopyCount"] == 1, 60, "the scale-out from zero begun")
    except AssertionError as exc:  # what the alarm and Auto Scaling did, to read the failure
        history = cw.describe_alarm_history(AlarmName="scale-from-zero-zero-ic")
        activities = asg.describe_scaling_activities(ServiceNamespace="sagemaker")
        raise AssertionError(f"{exc}; alarm history: {[(h['HistoryItemType'], h['HistorySummary']) for h in history['AlarmHistoryItems']]}; scaling: {[(a['Description'], a['StatusCode'], a.get('StatusMessage')) for a in activities['ScalingActivities']]}") from None  # noqa: E501
    woken = _status_when_settled(sm, "zero-ic")
    assert (woken["InferenceComponentStatus"], woken["RuntimeConfig"]["CurrentCopyCount"]) == (
        "InService", 1)
    assert module.invoke("zero", "zero-ic")[0] == [2.0, 4.0, 6.0, 8.0]
    assert _variant(sm, "zero")["CurrentInstanceCount"] == 1

    # The notebook's cleanup: every policy described and deleted, the alarm, the target; then
    # the SDK deletes the component, endpoint, config and model.
    policies = asg.describe_scaling_policies(**key)["ScalingPolicies"]
    assert sorted(p["PolicyName"] for p in policies) == [
        "step-scaling-zero-ic", "target-tracking-zero-ic"]
    for policy in policies:
        asg.delete_scaling_policy(PolicyName=policy["PolicyName"], **key)
    cw.delete_alarms(AlarmNames=["scale-from-zero-zero-ic"])
    asg.deregister_scalable_target(**key)
    assert not [a for a in cw.describe_alarms()["MetricAlarms"] if "zero-ic" in a["AlarmName"]]
    session.delete_inference_component("zero-ic")
    session.wait_for_inference_component_deletion("zero-ic", poll=0.2)
    session.delete_endpoint("zero")
    session.delete_endpoint_config("zero-config")
    session.delete_model("zero-model")
    wait_until(lambda: not sm.list_endpoints(NameContains="zero")["Endpoints"], 30,
               "the endpoint gone")
