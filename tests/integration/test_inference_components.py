"""Inference components' control plane against a real emulator, with boto3.

One emulator for the module. Its model is the trivial scale model (a copy is a Triton that
starts in a few seconds), so components reach InService as on AWS; one model is not a
readable tarball, so its copies fail to start and its Create ends Failed. How copies serve
is tested in test_inference_component_copies.py.
Each test uses names of its own: the tests run in any order, one of them restarts the server.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from botocore.exceptions import ClientError

from emulator.contract.control_plane import check_output
from tests.client_support import runtime_client, validation_error
from tests.component_support import (
    ROLE,
    ComponentServer,
    create_component,
    create_component_endpoint,
)
from tests.support import wait_until

ACCOUNT = "123456789012"
RESOURCES = {"NumberOfCpuCoresRequired": 1, "MinMemoryRequiredInMb": 1024}


class Module(ComponentServer):
    """The server with its model, and a model whose tarball is not one."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, scales={"model": 2.0})
        self.model_data = self.models["model"]
        self.broken = root / "store" / "broken.tar.gz"
        self.broken.write_bytes(b"not a tarball: the copies cannot start")

    def sm(self, **config: Any) -> Any:
        return self.client("sagemaker", **config)


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    module = Module(tmp_path_factory.mktemp("components"))
    yield module
    module.stop()


def _model(module: Module, name: str, broken: bool = False) -> None:
    module.sm().create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": "triton",
        "ModelDataUrl": module.broken.as_uri() if broken else module.model_data})


def _component_endpoint(module: Module, name: str, instance_type: str = "ml.g5.12xlarge",
                        **variant: Any) -> None:
    create_component_endpoint(module.sm(), name, instance_type, **variant)


def _component(module: Module, name: str, endpoint: str, model: str, copies: int = 1,
               **spec: Any) -> str:
    sm = module.sm()
    arn: str = sm.create_inference_component(
        InferenceComponentName=name, EndpointName=endpoint, VariantName="AllTraffic",
        Specification={"ModelName": model, "ComputeResourceRequirements": RESOURCES, **spec},
        RuntimeConfig={"CopyCount": copies})["InferenceComponentArn"]
    return arn


def _status(sm: Any, name: str) -> str:
    status: str = sm.describe_inference_component(
        InferenceComponentName=name)["InferenceComponentStatus"]
    return status


def _wait_in_service(sm: Any, name: str) -> dict[str, Any]:
    wait_until(lambda: _status(sm, name) == "InService", 30, f"component {name} InService")
    described: dict[str, Any] = sm.describe_inference_component(InferenceComponentName=name)
    return described


def test_component_lifecycle_and_describe_shapes(module: Module) -> None:
    sm = module.sm()
    _model(module, "life-model")
    _component_endpoint(module, "life", ManagedInstanceScaling={
        "Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 3},
        RoutingConfig={"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"})
    endpoint = sm.describe_endpoint(EndpointName="life")
    variant = endpoint["ProductionVariants"][0]
    assert variant["ManagedInstanceScaling"]["MinInstanceCount"] == 0
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert variant["CurrentInstanceCount"] == 1
    config = sm.describe_endpoint_config(EndpointConfigName="life")
    assert config["ExecutionRoleArn"] == ROLE and "ModelName" not in config["ProductionVariants"][0]

    arn = _component(module, "life-ic", "life", "life-model", copies=2,
                     StartupParameters={"ModelDataDownloadTimeoutInSeconds": 600,
                                        "ContainerStartupHealthCheckTimeoutInSeconds": 600})
    assert arn == f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:inference-component/life-ic"
    described = _wait_in_service(sm, "life-ic")
    assert described["RuntimeConfig"] == {"DesiredCopyCount": 2, "CurrentCopyCount": 2,
                                          "PlacementStatus": [{"InstanceType": "ml.g5.12xlarge",
                                                               "CurrentCopyCount": 2}]}
    assert described["EndpointName"] == "life" and described["VariantName"] == "AllTraffic"
    assert described["EndpointArn"].endswith(":endpoint/life")
    assert described["Specification"]["ModelName"] == "life-model"
    assert described["Specification"]["StartupParameters"][
        "ContainerStartupHealthCheckTimeoutInSeconds"] == 600
    assert described["Specification"]["ComputeResourceRequirements"]["MinMemoryRequiredInMb"] \
        == 1024
    assert described["LastModifiedTime"] >= described["CreationTime"]

    # A name is unique without regard to case.
    assert "Cannot create already existing inference component" in validation_error(
        sm.create_inference_component, InferenceComponentName="LIFE-ic", EndpointName="life",
        Specification={"ModelName": "life-model", "ComputeResourceRequirements": RESOURCES},
        RuntimeConfig={"CopyCount": 1})

    sm.update_inference_component_runtime_config(InferenceComponentName="life-ic",
                                                 DesiredRuntimeConfig={"CopyCount": 3})
    # Updating until the copies started (as on AWS), then InService with three.
    assert _wait_in_service(sm, "life-ic")["RuntimeConfig"]["CurrentCopyCount"] == 3
    _model(module, "life-model-2")
    sm.update_inference_component(
        InferenceComponentName="life-ic", RuntimeConfig={"CopyCount": 1},
        Specification={"ModelName": "life-model-2", "ComputeResourceRequirements": RESOURCES})
    wait_until(lambda: sm.describe_inference_component(InferenceComponentName="life-ic")[
        "Specification"]["ModelName"] == "life-model-2", 30, "the new model")
    assert _wait_in_service(sm, "life-ic")["RuntimeConfig"]["DesiredCopyCount"] == 1

    # The endpoint cannot go while a component is on it; the component can.
    message = validation_error(sm.delete_endpoint, EndpointName="life")
    assert "life-ic" in message and "DeleteInferenceComponent" in message
    sm.delete_inference_component(InferenceComponentName="life-ic")
    wait_until(lambda: not sm.list_inference_components(EndpointNameEquals="life")[
        "InferenceComponents"], 30, "the component gone")
    assert 'Could not find inference component "arn:aws:sagemaker:us-east-1:' in validation_error(
        sm.describe_inference_component, InferenceComponentName="life-ic")
    sm.delete_endpoint(EndpointName="life")


def test_describe_outputs_match_botocore(module: Module) -> None:
    """Raw JSON outputs checked against botocore's output shapes (required members, types)."""
    sm = module.sm()
    _model(module, "shape-model")
    _component_endpoint(module, "shape", RoutingConfig={"RoutingStrategy": "RANDOM"})
    _component(module, "shape-ic", "shape", "shape-model")
    _wait_in_service(sm, "shape-ic")
    for operation, body in (("DescribeInferenceComponent", {"InferenceComponentName": "shape-ic"}),
                            ("ListInferenceComponents", {}),
                            ("DescribeEndpoint", {"EndpointName": "shape"})):
        request = urllib.request.Request(
            module.server.url + "/", data=json.dumps(body).encode(), method="POST",
            headers={"X-Amz-Target": f"SageMaker.{operation}",
                     "Content-Type": "application/x-amz-json-1.1"})
        with urllib.request.urlopen(request) as response:
            assert check_output(operation, json.loads(response.read())) == []


def test_a_components_tags_and_no_data_capture_for_components(module: Module) -> None:
    sm = module.sm()
    _model(module, "tags-model")
    _component_endpoint(module, "tags")
    team = [{"Key": "team", "Value": "ml"}]
    arn = sm.create_inference_component(
        InferenceComponentName="tags-ic", EndpointName="tags", VariantName="AllTraffic",
        Specification={"ModelName": "tags-model", "ComputeResourceRequirements": RESOURCES},
        RuntimeConfig={"CopyCount": 1}, Tags=team)["InferenceComponentArn"]
    assert sm.list_tags(ResourceArn=arn)["Tags"] == team
    assert 'Could not find inference component "' in validation_error(
        sm.list_tags, ResourceArn=arn.replace("tags-ic", "gone-ic"))
    # An endpoint for components does not capture its calls here: refused, not ignored.
    sm.create_endpoint_config(
        EndpointConfigName="tags-capture", ExecutionRoleArn=ROLE,
        ProductionVariants=[{"VariantName": "AllTraffic", "InstanceType": "ml.g5.12xlarge",
                             "InitialInstanceCount": 1}],
        DataCaptureConfig={"InitialSamplingPercentage": 100,
                           "DestinationS3Uri": "s3://bucket/capture",
                           "CaptureOptions": [{"CaptureMode": "InputAndOutput"}]})
    message = validation_error(sm.create_endpoint, EndpointName="tags-capture",
                               EndpointConfigName="tags-capture")
    assert "hosts inference components and has a DataCaptureConfig" in message
    _wait_in_service(sm, "tags-ic")
    sm.delete_inference_component(InferenceComponentName="tags-ic")
    wait_until(lambda: not sm.list_inference_components(EndpointNameEquals="tags")[
        "InferenceComponents"], 30, "the component gone")


def test_a_stop_during_a_delete_still_stops_and_reaps_its_copies(tmp_path: Path) -> None:
    """The server stops while a DeleteInferenceComponent's copies are stopping (its task is
    cancelled): the stops finish all the same, and no Triton is left, not even unreaped."""
    server = ComponentServer(tmp_path)
    try:
        server.create_models()
        sm = server.client("sagemaker")
        create_component_endpoint(sm, "bye")
        create_component(sm, "bye-ic", "bye", ModelName="double",
                         ComputeResourceRequirements=RESOURCES)
        copies = [p.pid for p in server.tritons()]
        assert copies  # the copy's Triton runs
        sm.delete_inference_component(InferenceComponentName="bye-ic")
    finally:
        server.stop()  # at once: the copy is still stopping
    # Gone, not a zombie this process never waited for.
    assert [pid for pid in copies if psutil.pid_exists(pid)] == []


def test_list_filters_sort_and_pages(module: Module) -> None:
    sm = module.sm()
    _model(module, "list-model")
    _component_endpoint(module, "list-a")
    _component_endpoint(module, "list-b")
    for name, endpoint in (("list-c1", "list-a"), ("list-a2", "list-a"), ("list-b1", "list-b")):
        _component(module, name, endpoint, "list-model")
    for name in ("list-c1", "list-a2", "list-b1"):
        _wait_in_service(sm, name)

    def names(**kwargs: Any) -> list[str]:
        return [c["InferenceComponentName"]
                for c in sm.list_inference_components(**kwargs)["InferenceComponents"]]

    assert names(EndpointNameEquals="list-a", SortBy="Name", SortOrder="Ascending") == [
        "list-a2", "list-c1"]
    assert names(NameContains="list-", SortBy="CreationTime", SortOrder="Ascending") == [
        "list-c1", "list-a2", "list-b1"]
    assert names(NameContains="LIST-B") == ["list-b1"]
    assert names(NameContains="list-", StatusEquals="Creating") == []
    assert names(NameContains="list-", VariantNameEquals="Other") == []
    first = sm.list_inference_components(NameContains="list-", SortBy="Name", MaxResults=2)
    assert [c["InferenceComponentName"] for c in first["InferenceComponents"]] == [
        "list-c1", "list-b1"]
    rest = sm.list_inference_components(NameContains="list-", SortBy="Name", MaxResults=2,
                                        NextToken=first["NextToken"])
    assert [c["InferenceComponentName"] for c in rest["InferenceComponents"]] == ["list-a2"]
    assert "NextToken" not in rest
    summary = first["InferenceComponents"][0]
    assert summary["EndpointName"] == "list-a"
    assert summary["InferenceComponentStatus"] == "InService"
    paginated = [c["InferenceComponentName"] for page in sm.get_paginator(
        "list_inference_components").paginate(NameContains="list-", PaginationConfig={
            "PageSize": 1}) for c in page["InferenceComponents"]]
    assert sorted(paginated) == ["list-a2", "list-b1", "list-c1"]


def test_endpoint_config_rules_for_components(module: Module) -> None:
    sm = module.sm()
    _model(module, "cfg-model")

    def config(**variant: Any) -> str:
        return validation_error(sm.create_endpoint_config, EndpointConfigName="cfg-refused",
                                ProductionVariants=[{"VariantName": "A", "InitialInstanceCount": 1,
                                                     "InstanceType": "ml.m5.xlarge", **variant}])

    assert "mix the two" in validation_error(
        sm.create_endpoint_config, EndpointConfigName="cfg-mixed", ProductionVariants=[
        {"VariantName": "A", "InstanceType": "ml.m5.xlarge", "InitialInstanceCount": 1},
        {"VariantName": "B", "ModelName": "cfg-model", "InstanceType": "ml.m5.xlarge",
         "InitialInstanceCount": 1}])
    assert "MinInstanceCount (3) must not exceed MaxInstanceCount (2)" in config(
        ManagedInstanceScaling={"MinInstanceCount": 3, "MaxInstanceCount": 2})
    assert "InitialInstanceCount (1) of production variant A must not be below" in config(
        ManagedInstanceScaling={"MinInstanceCount": 2, "MaxInstanceCount": 4})
    assert "RoutingStrategy KV_AWARE" in config(RoutingConfig={"RoutingStrategy": "KV_AWARE"})
    assert "PrefixLength is required" in config(RoutingConfig={"RoutingStrategy":
                                                               "PREFIX_AWARE"})
    assert "ServerlessConfig is not supported" in validation_error(
        sm.create_endpoint_config, EndpointConfigName="cfg-serverless", ProductionVariants=[{
            "VariantName": "A", "ServerlessConfig": {"MemorySizeInMB": 2048,
                                                     "MaxConcurrency": 1}}])
    assert "InitialInstanceCount is required" in validation_error(
        sm.create_endpoint_config, EndpointConfigName="cfg-count",
        ProductionVariants=[{"VariantName": "A", "InstanceType": "ml.m5.xlarge"}])
    # Nothing of a refused config was stored.
    assert not sm.list_endpoint_configs(NameContains="cfg-")["EndpointConfigs"]


def test_component_request_errors(module: Module) -> None:
    sm = module.sm()
    _model(module, "err-model")
    _component_endpoint(module, "err", instance_type="ml.m5.large")  # 2 vCPUs, 8 GiB, no GPU

    def create(spec: dict[str, Any] | None = None, **params: Any) -> str:
        request: dict[str, Any] = {"InferenceComponentName": "err-ic", "EndpointName": "err",
                                   "RuntimeConfig": {"CopyCount": 1}, **params}
        if spec is not None:
            request["Specification"] = spec
        return validation_error(sm.create_inference_component, **request)

    base = {"ModelName": "err-model", "ComputeResourceRequirements": RESOURCES}
    assert create(base, EndpointName="err-none") == \
        f'Could not find endpoint "arn:aws:sagemaker:us-east-1:{ACCOUNT}:endpoint/err-none".'
    assert create({**base, "ModelName": "nope"}) == \
        f'Could not find model "arn:aws:sagemaker:us-east-1:{ACCOUNT}:model/nope".'
    assert 'variant "Other" does not exist' in create(base, VariantName="Other")
    too_big = create({**base, "ComputeResourceRequirements": {
        "NumberOfCpuCoresRequired": 4, "NumberOfAcceleratorDevicesRequired": 1,
        "MinMemoryRequiredInMb": 9000}})
    assert "does not fit on one ml.m5.large instance" in too_big
    assert "4 > its 2 vCPUs" in too_big and "its 0 accelerator devices" in too_big
    assert "its 8192 MiB" in too_big
    assert "adapter inference components" in create({**base, "BaseInferenceComponentName": "x"})
    assert "AvailabilityZoneBalance" in create({**base, "SchedulingConfig": {
        "PlacementStrategy": "SPREAD", "AvailabilityZoneBalance": {"EnforcementMode":
                                                                   "PERMISSIVE"}}})
    assert "ComputeResourceRequirements is required" in create({"ModelName": "err-model"})
    assert "Specification is required" in create(None)
    assert "RuntimeConfig (CopyCount) is required" in validation_error(
        sm.create_inference_component, InferenceComponentName="err-ic", EndpointName="err",
        Specification=base)
    assert "Container.Image is required" in create({
        "Container": {"ArtifactUrl": "s3://bucket/model.tar.gz"},
        "ComputeResourceRequirements": RESOURCES})
    assert "MinMemoryRequiredInMb (2048)" in create({**base, "ComputeResourceRequirements": {
        "MinMemoryRequiredInMb": 2048, "MaxMemoryRequiredInMb": 1024}})
    # botocore's constraints, as the service words them (the client's own checks off).
    unchecked = module.sm(parameter_validation=False)
    message = validation_error(
        unchecked.create_inference_component, InferenceComponentName="err-ic",
        EndpointName="err", Specification={
            "ModelName": "err-model", "ComputeResourceRequirements": {
                "MinMemoryRequiredInMb": 64}}, RuntimeConfig={"CopyCount": -1})
    assert message.startswith("2 validation errors detected: ")
    # Zero copies passes botocore's constraint (an update to 0 is scale to zero) but not
    # CreateInferenceComponent: AWS's words as users quote them.
    assert validation_error(
        sm.create_inference_component, InferenceComponentName="err-ic", EndpointName="err",
        Specification=base, RuntimeConfig={"CopyCount": 0}) == \
        "Inference components copy count an integer larger than 0"
    assert "'runtimeConfig.copyCount' failed to satisfy constraint: Member must have value " \
        "greater than or equal to 0" in message
    # An endpoint whose variant names a model takes no component: AWS's own words. Its model
    # data is missing, so it fails without starting a Triton.
    sm.create_model(ModelName="err-mme", ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": "triton", "Mode": "MultiModel",
        "ModelDataUrl": (module.root / "missing").as_uri() + "/"})
    sm.create_endpoint_config(EndpointConfigName="err-mme", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "err-mme", "InstanceType": "ml.m5.large",
        "InitialInstanceCount": 1}])
    sm.create_endpoint(EndpointName="err-mme", EndpointConfigName="err-mme")
    assert create(base, EndpointName="err-mme") == (
        "Invalid request provided: Inference Components are not supported in this Endpoint. "
        "Please make sure this endpoint can deploy inference components.")
    # UpdateEndpoint of the component endpoint to a config for models is refused
    # (tests/integration/test_component_endpoint_update.py has the updates that run).
    assert "hosts inference components" in validation_error(
        sm.update_endpoint, EndpointName="err", EndpointConfigName="err-mme")
    # Nothing was created by any refused request.
    assert not sm.list_inference_components(EndpointNameEquals="err")["InferenceComponents"]
    # Instances are bookkeeping, but bounded as for any endpoint of the emulator.
    sm.create_endpoint_config(EndpointConfigName="err-huge", ProductionVariants=[{
        "VariantName": "AllTraffic", "InstanceType": "ml.m5.large",
        "InitialInstanceCount": 1_000_000_000}])
    with pytest.raises(ClientError) as raised:
        sm.create_endpoint(EndpointName="err-huge", EndpointConfigName="err-huge")
    assert raised.value.response["Error"]["Code"] == "ResourceLimitExceeded"


def test_components_survive_a_restart(module: Module) -> None:
    sm = module.sm()
    _model(module, "restart-model")
    _component_endpoint(module, "restart")
    _component(module, "restart-ic", "restart", "restart-model", copies=1)
    before = _wait_in_service(sm, "restart-ic")
    module.restart()
    sm = module.sm()
    after = sm.describe_inference_component(InferenceComponentName="restart-ic")
    for key in ("InferenceComponentStatus", "RuntimeConfig", "Specification", "CreationTime",
                "LastModifiedTime", "EndpointArn", "VariantName"):
        assert after[key] == before[key], key
    assert sm.describe_endpoint(EndpointName="restart")["EndpointStatus"] == "InService"
    assert [c["InferenceComponentName"] for c in sm.list_inference_components(
        EndpointNameEquals="restart")["InferenceComponents"]] == ["restart-ic"]
    # The endpoint answers as one for components again (the runtime came back too).
    with pytest.raises(ClientError) as raised:
        runtime_client(module.server.url).invoke_endpoint(
            EndpointName="restart", ContentType="application/json", Body=b"{}")
    assert raised.value.response["Error"]["Message"].startswith(
        "Inference Component Name header is required")


def test_invocations_on_an_endpoint_for_components(module: Module) -> None:
    """What the front end answers before a copy is reached, and for a component whose copies
    could not start (its model is not a tarball): its Create ends Failed, saying why."""
    sm = module.sm()
    _model(module, "rt-model")
    _model(module, "rt-broken", broken=True)
    _component_endpoint(module, "rt")
    _component_endpoint(module, "rt-other")
    _component(module, "rt-ic", "rt", "rt-broken")
    _component(module, "rt-zero", "rt", "rt-model")
    _component(module, "rt-elsewhere", "rt-other", "rt-broken")
    _wait_in_service(sm, "rt-zero")
    sm.update_inference_component_runtime_config(  # scale to zero: allowed by an update
        InferenceComponentName="rt-zero", DesiredRuntimeConfig={"CopyCount": 0})
    wait_until(lambda: sm.describe_inference_component(InferenceComponentName="rt-zero")[
        "RuntimeConfig"]["CurrentCopyCount"] == 0, 30, "rt-zero at 0 copies")
    _wait_in_service(sm, "rt-zero")
    wait_until(lambda: _status(sm, "rt-ic") == "Failed", 30, "rt-ic Failed")
    failed = sm.describe_inference_component(InferenceComponentName="rt-ic")
    assert failed["FailureReason"].startswith(
        "The inference component's copies failed to start: ")
    assert "not a readable .tar.gz archive" in failed["FailureReason"]
    assert failed["RuntimeConfig"]["CurrentCopyCount"] == 0
    rt = runtime_client(module.server.url)

    def invoke(**kwargs: Any) -> tuple[str, str]:
        with pytest.raises(ClientError) as raised:
            rt.invoke_endpoint(EndpointName="rt", ContentType="application/json", Body=b"{}",
                               **kwargs)
        error = raised.value.response["Error"]
        return error["Code"], error["Message"]

    assert invoke() == ("ValidationError", (
        "Inference Component Name header is required for endpoints to which you plan to deploy "
        "inference components. Please include Inference Component Name header or consider "
        "using SageMaker models."))
    assert invoke(InferenceComponentName="nope") == (
        "ValidationError", "Inference component nope was not found on endpoint rt.")
    assert invoke(InferenceComponentName="rt-elsewhere")[1] == \
        "Inference component rt-elsewhere was not found on endpoint rt."
    for name in ("rt-zero", "rt-ic"):  # no copy: scaled to zero, or Failed
        code, message = invoke(InferenceComponentName=name)
        assert code == "ValidationError" and "has no capacity to process this request" in message
    # InvokeEndpointAsync cannot name a component (botocore's request has no such member).
    with pytest.raises(ClientError) as raised:
        rt.invoke_endpoint_async(EndpointName="rt", ContentType="application/json", Body=b"{}")
    error = raised.value.response["Error"]
    assert error["Code"] == "ValidationError"
    assert "no InferenceComponentName member" in error["Message"]
    assert "InvokeEndpoint and InferenceComponentName" in error["Message"]


def test_copies_that_fit_nowhere_stay_pending_until_room_frees(module: Module) -> None:
    """Two ml.m5.large instances (2 vCPUs each): 3 one-core copies of the first component
    leave one core free, so the second component's two-core copy is pending until an instance
    is added, or until the first gives up a copy."""
    sm = module.sm()
    _model(module, "fit-model")
    _component_endpoint(module, "fit", instance_type="ml.m5.large", InitialInstanceCount=2)
    one_core = {"NumberOfCpuCoresRequired": 1, "MinMemoryRequiredInMb": 1024}
    sm.create_inference_component(
        InferenceComponentName="fit-small", EndpointName="fit", RuntimeConfig={"CopyCount": 3},
        Specification={"ModelName": "fit-model", "ComputeResourceRequirements": one_core,
                       "SchedulingConfig": {"PlacementStrategy": "BINPACK"}})
    _wait_in_service(sm, "fit-small")
    sm.create_inference_component(
        InferenceComponentName="fit-big", EndpointName="fit", RuntimeConfig={"CopyCount": 1},
        Specification={"ModelName": "fit-model", "ComputeResourceRequirements": {
            "NumberOfCpuCoresRequired": 2, "MinMemoryRequiredInMb": 1024}})
    big = _wait_in_service(sm, "fit-big")
    assert big["RuntimeConfig"] == {"DesiredCopyCount": 1, "CurrentCopyCount": 0}
    small = sm.describe_inference_component(InferenceComponentName="fit-small")
    assert small["RuntimeConfig"]["CurrentCopyCount"] == 3

    def resize(instances: int, big_copies: int, what: str) -> None:
        sm.update_endpoint_weights_and_capacities(EndpointName="fit", DesiredWeightsAndCapacities=[
            {"VariantName": "AllTraffic", "DesiredInstanceCount": instances}])
        wait_until(lambda: sm.describe_inference_component(InferenceComponentName="fit-big")[
            "RuntimeConfig"]["CurrentCopyCount"] == big_copies, 30, what)
        wait_until(lambda: sm.describe_endpoint(EndpointName="fit")["EndpointStatus"] ==
                   "InService", 30, "the endpoint resized")

    # An instance added: the pending copy is placed on it.
    resize(3, 1, "the pending copy placed")
    assert sm.describe_endpoint(EndpointName="fit")["ProductionVariants"][0][
        "CurrentInstanceCount"] == 3
    # Back to two: the newest component's copy is pending again.
    resize(2, 0, "the copy pending again")
    # Fewer copies of the first: an instance frees, the pending copy is placed.
    sm.update_inference_component_runtime_config(InferenceComponentName="fit-small",
                                                 DesiredRuntimeConfig={"CopyCount": 2})
    wait_until(lambda: sm.describe_inference_component(InferenceComponentName="fit-big")[
        "RuntimeConfig"]["CurrentCopyCount"] == 1, 30, "the pending copy placed")
    assert sm.describe_inference_component(InferenceComponentName="fit-big")["RuntimeConfig"][
        "PlacementStatus"] == [{"InstanceType": "ml.m5.large", "CurrentCopyCount": 1}]
