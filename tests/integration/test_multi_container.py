"""Multi-container endpoints whose containers are all Triton, on the embedded launcher: one
Triton per container, Direct invocation by TargetContainerHostname, a Serial pipeline whose
failing step is named, ContainerLatency in CloudWatch. Clients are unmodified boto3 clients."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.multi_container_support import (
    FAST,
    ROLE,
    TRITON_IMAGE,
    cloudwatch_client,
    container_latency_samples,
    deploy,
    sagemaker_client,
    triton_tarball,
    wait_for_status,
)
from tests.support import output_of, scale_request

pytestmark = pytest.mark.slow


def triton(store: Path, tmp_path: Path, hostname: str, scale: float) -> dict[str, object]:
    return {"Image": TRITON_IMAGE, "ContainerHostname": hostname,
            "ModelDataUrl": f"file://{triton_tarball(tmp_path, store, hostname, scale)}",
            "Environment": {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": hostname}}


def error_of(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = excinfo.value.response["Error"]
    return error["Code"], error["Message"]


def test_direct_and_serial_with_one_triton_per_container(start_emulator, store: Path,
                                                         tmp_path: Path) -> None:
    server = start_emulator()
    sm, rt, cw = sagemaker_client(server.url), runtime_client(server.url), \
        cloudwatch_client(server.url)
    double, triple = triton(store, tmp_path, "double", 2), triton(store, tmp_path, "triple", 3)
    deploy(sm, "direct", [double, triple], mode="Direct")

    model = sm.describe_model(ModelName="direct")
    assert model["InferenceExecutionConfig"] == {"Mode": "Direct"}
    assert [c["ContainerHostname"] for c in model["Containers"]] == ["double", "triple"]
    variant = sm.describe_endpoint(EndpointName="direct")["ProductionVariants"][0]
    assert [i["SpecifiedImage"] for i in variant["DeployedImages"]] == [TRITON_IMAGE] * 2
    instance = server.registry.get("direct").instances[0]
    urls = {m.label: m.instance.launcher.http_url for m in instance.members}
    assert len(set(urls.values())) == 2, "each container has its own Triton"
    with urllib.request.urlopen(f"{server.url}/_emulator/models") as page:
        fleet = json.loads(page.read())["Endpoints"]["direct"]
    shown = fleet["Variants"]["AllTraffic"]["Instances"][0]
    assert shown["ExecutionMode"] == "Direct"
    assert [c["ContainerName"] for c in shown["Containers"]] == ["double", "triple"]

    def invoke(endpoint: str, **extra: object) -> list[float]:
        resp = rt.invoke_endpoint(EndpointName=endpoint, ContentType="application/json",
                                  Body=scale_request([1, 2, 3, 4]), **extra)
        return output_of(resp["Body"].read()).tolist()

    assert invoke("direct", TargetContainerHostname="double") == [2, 4, 6, 8]
    assert invoke("direct", TargetContainerHostname="triple") == [3, 6, 9, 12]
    assert invoke("direct", TargetContainerHostname="triple") == [3, 6, 9, 12]
    with urllib.request.urlopen(f"{server.url}/_emulator/models") as page:
        loaded = json.loads(page.read())["Endpoints"]["direct"]["Models"]
    assert sorted(m["ContainerName"] for m in loaded) == ["double", "triple"]

    # The three ValidationErrors SageMaker's documentation lists.
    with pytest.raises(ClientError) as excinfo:
        invoke("direct", TargetContainerHostname="quadruple")
    assert error_of(excinfo) == ("ValidationError", "TargetContainerHostname quadruple does "
                                 "not exist in endpoint direct; its containers are double, "
                                 "triple.")
    with pytest.raises(ClientError) as excinfo:
        invoke("direct")
    assert error_of(excinfo)[0] == "ValidationError"
    assert "configured for direct invocation" in error_of(excinfo)[1]

    deploy(sm, "serial", [double, triple])  # no InferenceExecutionConfig: Serial
    assert "InferenceExecutionConfig" not in sm.describe_model(ModelName="serial")
    with pytest.raises(ClientError) as excinfo:
        invoke("serial", TargetContainerHostname="double")
    assert error_of(excinfo)[0] == "ValidationError"
    assert "not configured for direct invocation" in error_of(excinfo)[1]

    # Serial: double's response is triple's request. A Triton response ("outputs") is no
    # Triton request ("inputs"), so step 2 fails -- and the error names that container.
    with pytest.raises(ClientError) as excinfo:
        invoke("serial")
    code, message = error_of(excinfo)
    assert code == "ModelError" and "from triple with message" in message, message
    assert "Unable to parse 'inputs'" in excinfo.value.response["OriginalMessage"]

    # ContainerLatency per container, through the CloudWatch API (dimension ContainerName).
    assert container_latency_samples(cw, "direct", "double") == 1
    assert container_latency_samples(cw, "direct", "triple") == 2
    assert container_latency_samples(cw, "serial", "double") == 0  # the chain never finished
    sm.delete_endpoint(EndpointName="direct")
    sm.delete_endpoint(EndpointName="serial")


def test_a_hostname_on_a_single_container_endpoint_is_refused(start_emulator, store: Path,
                                                              tmp_path: Path) -> None:
    triton_tarball(tmp_path, store, "double", 2)
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    with pytest.raises(ClientError) as excinfo:
        rt.invoke_endpoint(EndpointName="local", TargetModel="double.tar.gz",
                           TargetContainerHostname="primary", Body=scale_request([1, 2, 3, 4]))
    assert error_of(excinfo)[0] == "ValidationError"
    assert "not configured for direct invocation" in error_of(excinfo)[1]
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel="double.tar.gz",
                              Body=scale_request([1, 2, 3, 4]))
    assert output_of(resp["Body"].read()).tolist() == [2, 4, 6, 8]


def test_bad_models_are_refused_with_nothing_created(start_emulator) -> None:
    server = start_emulator()
    sm = sagemaker_client(server.url)
    sklearn = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
    cases = {
        "16 containers": ([{"Image": TRITON_IMAGE, "ContainerHostname": f"c{i}",
                            "ModelDataUrl": "s3://b/m.tar.gz"} for i in range(16)], None,
                          "Member must have length less than or equal to 15"),
        "duplicate hostnames": ([{"Image": TRITON_IMAGE, "ContainerHostname": "a",
                                  "ModelDataUrl": "s3://b/m.tar.gz"}] * 2, "Direct",
                                "ContainerHostname a is used by more than one container"),
        "direct without hostnames": ([{"Image": TRITON_IMAGE, "ModelDataUrl": "s3://b/m"}] * 2,
                                     "Direct", "must be specified for every container"),
        "multi-model in a pipeline": ([{"Image": TRITON_IMAGE, "Mode": "MultiModel",
                                        "ModelDataUrl": "s3://b/p/"}] * 2, None,
                                      "More than one container in MultiModel mode is not "
                                      "supported with inference pipeline."),
        # The embedded launcher runs Triton only: a scikit-learn image is refused up front.
        "not a Triton image": ([{"Image": sklearn, "ModelDataUrl": "s3://b/m.tar.gz"}], None,
                               f"Requested image {sklearn} not found"),
    }
    for case, (containers, mode, expected) in cases.items():
        extra = {"InferenceExecutionConfig": {"Mode": mode}} if mode else {}
        with pytest.raises(ClientError) as excinfo:
            sm.create_model(ModelName="bad", ExecutionRoleArn=ROLE,
                            Containers=containers, **extra)
        code, message = error_of(excinfo)
        assert code == "ValidationException" and expected in message, (case, message)
    assert sm.list_models()["Models"] == []


def test_a_multi_container_endpoint_survives_a_restart_and_an_update(start_emulator, store: Path,
                                                                     tmp_path: Path) -> None:
    cache = tmp_path / "state"
    server = start_emulator(cache_dir=cache)
    sm = sagemaker_client(server.url)
    double, triple = triton(store, tmp_path, "double", 2), triton(store, tmp_path, "triple", 3)
    deploy(sm, "mce", [double, triple], mode="Direct")
    server.stop()

    server = start_emulator(cache_dir=cache)  # the endpoint comes back from the state
    sm, rt = sagemaker_client(server.url), runtime_client(server.url)
    wait_for_status(sm, "mce", ("InService",))

    def invoke(**extra: object) -> list[float]:
        resp = rt.invoke_endpoint(EndpointName="mce", ContentType="application/json",
                                  Body=scale_request([1, 2, 3, 4]), **extra)
        return output_of(resp["Body"].read()).tolist()

    assert invoke(TargetContainerHostname="triple") == [3, 6, 9, 12]

    # UpdateEndpoint to a single-container config: the hostname header is refused from then on.
    sm.create_model(ModelName="one", ExecutionRoleArn=ROLE, PrimaryContainer={
        k: v for k, v in double.items() if k != "ContainerHostname"})
    sm.create_endpoint_config(EndpointConfigName="one", ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": "one", "InitialInstanceCount": 1,
         "InstanceType": "ml.m5.xlarge"}])
    sm.update_endpoint(EndpointName="mce", EndpointConfigName="one")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="mce", WaiterConfig=FAST)
    assert invoke() == [2, 4, 6, 8]
    with pytest.raises(ClientError) as excinfo:
        invoke(TargetContainerHostname="double")
    assert "not configured for direct invocation" in error_of(excinfo)[1]
