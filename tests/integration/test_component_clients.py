"""Clients of inference components against a real `mme serve`: the shared
deployer (`mme deploy --inference-component`) and the SageMaker Python SDK v2, unmodified.

One emulator for the module (real Tritons: each copy is one). Each test uses names of its own;
the tests run in any order.
"""

from __future__ import annotations

import io
import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError

from ensembles.packaging import package
from harness.deploy_cli import main as cli_main
from harness.deployer import Deployer, make_clients, triton_image_uri
from harness.deployment import ComponentSpec, DeployConfig
from tests.client_support import (
    DUMMY_CREDENTIALS,
    put_target_tracking,
    shared_runtime_client,
)
from tests.component_support import ROLE, ComponentServer
from tests.support import (
    output_of,
    scale_request,
    wait_until,
    write_scale_ensemble,
    write_scale_model,
)


class Module(ComponentServer):
    """The server (no tarballs: the deployers package the repositories), and the CLI on it."""

    def __init__(self, root: Path) -> None:
        self.repos = root / "repos"
        write_scale_model(self.repos / "double", "double", scale=2.0)
        write_scale_ensemble(self.repos / "chain", scale_a=2.0, scale_b=5.0)
        super().__init__(root, scales={})

    def sm(self) -> Any:
        return self.client("sagemaker")

    def mme(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
        """`mme deploy|teardown --target local ...` in this process, on this emulator."""
        command, *rest = args
        code = cli_main([command, "--target", "local", "--emulator-url", self.server.url,
                         "--store-dir", str(self.root / "store"), "--wait-delay", "0.1",
                         *rest])
        captured = capsys.readouterr()
        return code, captured.out, captured.err


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    module = Module(tmp_path_factory.mktemp("component-clients"))
    yield module
    module.stop()


def _invoke(module: Module, endpoint: str, component: str, input_name: str = "X",
            output_name: str = "Y") -> np.ndarray:
    response = shared_runtime_client(module.server.url).invoke_endpoint(
        EndpointName=endpoint, InferenceComponentName=component, ContentType="application/json",
        Body=scale_request([1.0, 2.0, 3.0, 4.0], input_name=input_name))
    return output_of(response["Body"].read(), output_name)


def _names(module: Module, endpoint: str) -> dict[str, list[str]]:
    """What exists of an endpoint's deployment: its components, endpoint, configs, models."""
    sm = module.sm()
    return {
        "components": [c["InferenceComponentName"] for c in sm.list_inference_components(
            EndpointNameEquals=endpoint)["InferenceComponents"]],
        "endpoints": [e["EndpointName"] for e in sm.list_endpoints(
            NameContains=endpoint)["Endpoints"]],
        "configs": [c["EndpointConfigName"] for c in sm.list_endpoint_configs(
            NameContains=endpoint)["EndpointConfigs"]],
        "models": [m["ModelName"] for m in sm.list_models()["Models"]],
    }


def test_mme_deploy_puts_repositories_on_one_endpoint_as_components_then_tears_down(
        module: Module, capsys: pytest.CaptureFixture[str]) -> None:
    sm = module.sm()
    code, out, err = module.mme(
        capsys, "deploy", "--endpoint-name", "cli-shared", "--inference-component", "cli-double",
        "--copies", "2", "--cpus", "1", "--memory-mb", "512", "--routing", "random",
        "--instance-type", "ml.g5.12xlarge", str(module.repos / "double"))
    assert code == 0, err + out
    assert "inference component cli-double: InService, copies 2/2" in out  # the progress
    assert "smoke inference component cli-double: ok" in out

    # AWS's shape: a config whose variant names no model, the model in the component.
    endpoint = sm.describe_endpoint(EndpointName="cli-shared")
    config = sm.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
    [variant] = config["ProductionVariants"]
    assert "ModelName" not in variant and config["ExecutionRoleArn"]
    assert variant["RoutingConfig"] == {"RoutingStrategy": "RANDOM"}
    described = sm.describe_inference_component(InferenceComponentName="cli-double")
    assert described["RuntimeConfig"]["DesiredCopyCount"] == 2
    assert described["RuntimeConfig"]["CurrentCopyCount"] == 2
    assert described["Specification"]["ComputeResourceRequirements"] == {
        "NumberOfCpuCoresRequired": 1.0, "MinMemoryRequiredInMb": 512}
    model = sm.describe_model(ModelName=described["Specification"]["ModelName"])
    store = module.root / "store" / "cli-shared"
    # Under the component's name, in a folder named by the tarball's digest.
    [version] = list((store / "cli-double").iterdir())
    assert re.fullmatch("[0-9a-f]{12}", version.name)
    assert model["PrimaryContainer"]["ModelDataUrl"] == (version / "double.tar.gz").as_uri()
    np.testing.assert_allclose(_invoke(module, "cli-shared", "cli-double"), [2, 4, 6, 8])

    # The same deployment again changes nothing.
    code, out, err = module.mme(
        capsys, "deploy", "--endpoint-name", "cli-shared", "--inference-component", "cli-double",
        "--copies", "2", "--cpus", "1", "--memory-mb", "512", str(module.repos / "double"))
    assert code == 0 and "call " not in out, err + out
    assert "unchanged inference component cli-double" in out

    # A second component on the same endpoint: the endpoint is reused; an ensemble's tarball
    # gets SAGEMAKER_TRITON_DEFAULT_MODEL_NAME (SageMaker's Triton needs it for several models).
    code, out, err = module.mme(
        capsys, "deploy", "--endpoint-name", "cli-shared", "--inference-component", "cli-chain",
        str(module.repos / "chain"))
    assert code == 0, err + out
    assert "reusing endpoint cli-shared" in out and "CreateEndpoint " not in out
    np.testing.assert_allclose(_invoke(module, "cli-shared", "cli-chain", "INPUT", "OUTPUT"),
                               [10, 20, 30, 40])

    # One component goes; the endpoint stays for the other.
    code, out, err = module.mme(capsys, "teardown", "--endpoint-name", "cli-shared",
                                "--inference-component", "cli-chain")
    assert code == 0, err + out
    assert _names(module, "cli-shared")["components"] == ["cli-double"]
    assert not (store / "cli-chain").exists() and (store / "cli-double").is_dir()
    np.testing.assert_allclose(_invoke(module, "cli-shared", "cli-double"), [2, 4, 6, 8])

    # The rest: component, endpoint, config, model, in that order, and the copied tarballs.
    code, out, err = module.mme(capsys, "teardown", "--endpoint-name", "cli-shared")
    assert code == 0, err + out
    order = [out.index(f"call sagemaker.{operation} ") for operation in (
        "DeleteInferenceComponent", "DeleteEndpoint", "DeleteEndpointConfig", "DeleteModel")]
    assert order == sorted(order), out
    left = _names(module, "cli-shared")
    assert left["components"] == left["endpoints"] == left["configs"] == []
    assert not [m for m in left["models"] if m.startswith("cli-")]
    assert not store.exists()


def test_an_update_of_a_component_puts_its_tarball_beside_the_old_one_then_deletes_that(
        module: Module, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    deploy = ["deploy", "--endpoint-name", "cli-versions", "--inference-component",
              "cli-versions-ic", "--instance-type", "ml.g5.12xlarge"]
    code, out, err = module.mme(capsys, *deploy, str(module.repos / "double"))
    assert code == 0, err + out
    folder = module.root / "store" / "cli-versions" / "cli-versions-ic"
    [v1] = list(folder.iterdir())
    triple = tmp_path / "v2" / "double"
    write_scale_model(triple, "double", scale=3.0)
    code, out, err = module.mme(capsys, *deploy, str(triple))
    assert code == 0, err + out
    assert f"copy double.tar.gz to {folder}/" in out and str(v1) not in out.split("smoke")[0]
    [v2] = list(folder.iterdir())  # the old version went once the new one served
    assert v2 != v1 and f"delete {v1 / 'double.tar.gz'}" in out
    np.testing.assert_allclose(_invoke(module, "cli-versions", "cli-versions-ic"),
                               [3, 6, 9, 12])
    code, out, err = module.mme(capsys, "teardown", "--endpoint-name", "cli-versions")
    assert code == 0, err + out
    assert not (module.root / "store" / "cli-versions").exists()


def test_teardown_of_a_component_deletes_its_scaling_target_policies_and_alarm(
        module: Module, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = module.mme(
        capsys, "deploy", "--endpoint-name", "cli-scaled", "--inference-component",
        "cli-scaled-ic", "--instance-type", "ml.g5.12xlarge", str(module.repos / "double"))
    assert code == 0, err + out
    # The user's scale to zero and back: a target, a target tracking and a step policy, and
    # the step policy's alarm.
    asg, cw = module.client("application-autoscaling"), module.client("cloudwatch")
    key = {"ServiceNamespace": "sagemaker", "ResourceId": "inference-component/cli-scaled-ic",
           "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount"}
    asg.register_scalable_target(**key, MinCapacity=0, MaxCapacity=2)
    put_target_tracking(asg, key, "per-copy", 5.0,
                        "SageMakerInferenceComponentInvocationsPerCopy")
    step = asg.put_scaling_policy(
        **key, PolicyName="from-zero", PolicyType="StepScaling",
        StepScalingPolicyConfiguration={
            "AdjustmentType": "ChangeInCapacity", "StepAdjustments": [
                {"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]})["PolicyARN"]
    cw.put_metric_alarm(
        AlarmName="cli-scaled-ic-no-capacity", Namespace="AWS/SageMaker",
        MetricName="NoCapacityInvocationFailures", Statistic="Maximum", Period=60,
        EvaluationPeriods=1, Threshold=1, ComparisonOperator="GreaterThanOrEqualToThreshold",
        Dimensions=[{"Name": "InferenceComponentName", "Value": "cli-scaled-ic"}],
        AlarmActions=[step])

    code, out, err = module.mme(capsys, "teardown", "--endpoint-name", "cli-scaled",
                                "--inference-component", "cli-scaled-ic")
    assert code == 0, err + out
    assert asg.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[
        key["ResourceId"]])["ScalableTargets"] == []
    assert asg.describe_scaling_policies(ServiceNamespace="sagemaker", ResourceId=key[
        "ResourceId"])["ScalingPolicies"] == []
    alarms = [a["AlarmName"] for a in cw.describe_alarms()["MetricAlarms"]]
    assert not [a for a in alarms if "cli-scaled-ic" in a], alarms
    assert _names(module, "cli-scaled")["endpoints"] == []


def _assert_nothing_left(module: Module, endpoint: str, component: str) -> None:
    """No component, endpoint, endpoint config, model or stored artifact of the run of
    ``component`` on ``endpoint`` is left."""
    left = _names(module, endpoint)
    assert left["components"] == left["endpoints"] == left["configs"] == []
    assert not [m for m in left["models"] if m.startswith(component)]
    assert not (module.root / "store" / endpoint).exists()


def test_a_refused_component_leaves_nothing_of_the_run_behind(
        module: Module, capsys: pytest.CaptureFixture[str]) -> None:
    # 64 cores cannot fit one ml.g5.xlarge (4 vCPUs): CreateInferenceComponent is refused
    # after the model, the config and the endpoint were made.
    code, out, err = module.mme(
        capsys, "deploy", "--endpoint-name", "cli-refused", "--inference-component",
        "cli-too-big", "--cpus", "64", "--instance-type", "ml.g5.xlarge",
        str(module.repos / "double"))
    assert code == 1
    assert "CreateInferenceComponent failed" in err and "Traceback" not in err
    assert "rolling back: delete endpoint cli-refused" in out
    _assert_nothing_left(module, "cli-refused", "cli-too-big")


def test_a_failed_smoke_call_rolls_the_new_component_back(
        module: Module, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = module.root / "wrong-input.json"
    wrong.write_bytes(scale_request([1.0], input_name="NOT_AN_INPUT"))
    code, out, err = module.mme(
        capsys, "deploy", "--endpoint-name", "cli-smoke", "--inference-component", "cli-bad-call",
        "--payload", f"cli-bad-call={wrong}", str(module.repos / "double"))
    assert code == 1 and "smoke invocation of inference component cli-bad-call failed" in err
    undone = [out.index(f"rolling back: delete {what}") for what in (
        "inference component cli-bad-call", "endpoint cli-smoke", "endpoint config",
        "model cli-bad-call-ic-", "copied")]
    assert undone == sorted(undone), out
    _assert_nothing_left(module, "cli-smoke", "cli-bad-call")


def test_a_dry_run_prints_the_component_calls_and_makes_none(
        module: Module, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = module.mme(
        capsys, "deploy", "--dry-run", "--endpoint-name", "cli-dry", "--inference-component",
        "cli-dry-ic", "--copies", "3", str(module.repos / "double"))
    assert code == 0, err + out
    for call in ("CreateModel", "CreateEndpointConfig", "CreateEndpoint",
                 "CreateInferenceComponent"):
        assert f"would call sagemaker.{call} " in out
    assert '"RuntimeConfig": {"CopyCount": 3}' in out and "call sagemaker" not in out.replace(
        "would call sagemaker", "")
    left = _names(module, "cli-dry")
    assert left["components"] == left["endpoints"] == left["configs"] == []
    assert not (module.root / "store" / "cli-dry").exists()


@pytest.mark.parametrize(("flags", "message"), [
    (["--inference-component", "ic", "--copies", "-1"], "--copies is 0 or more"),
    (["--inference-component", "ic", "--cpus", "0.1"], "--cpus is at least 0.25"),
    (["--inference-component", "ic", "--memory-mb", "64"], "--memory-mb is at least 128"),
    (["--inference-component", "bad_name"], "invalid inference component name"),
    (["--inference-component", "ic", "--min-instances", "0"], "both --min-instances and"),
    (["--inference-component", "ic", "--traffic", "canary", "--canary-size", "1"],
     "leave those flags out with --inference-component"),
    (["--copies", "2"], "add --inference-component NAME"),
    (["--inference-component", "ic", "EXTRA"], "2 were given"),
])
def test_bad_component_flags_exit_2_before_any_call(
        flags: list[str], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "double"
    write_scale_model(repo, "double", scale=2.0)
    flags = [str(repo) if f == "EXTRA" else f for f in flags]
    # Nothing listens on port 9: the flags are refused before the emulator is even asked.
    code = cli_main(["deploy", "--target", "local", "--emulator-url", "http://127.0.0.1:9",
                     "--endpoint-name", "ep", *flags, str(repo)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err and "no emulator answers" not in err


def test_sdk_v2_deploys_a_component_and_predicts_unmodified(
        module: Module, monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK's own switch for its "v2 is on the path of deprecation" warning (the suite turns
    # warnings into errors).
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    sagemaker = pytest.importorskip("sagemaker")
    from sagemaker.compute_resource_requirements.resource_requirements import (
        ResourceRequirements,
    )
    from sagemaker.deserializers import JSONDeserializer
    from sagemaker.enums import EndpointType
    from sagemaker.model import Model
    from sagemaker.predictor import Predictor
    from sagemaker.serializers import JSONSerializer

    boto_session = boto3.Session(**DUMMY_CREDENTIALS)
    session = sagemaker.Session(
        boto_session=boto_session,
        sagemaker_client=boto_session.client("sagemaker", endpoint_url=module.server.url),
        sagemaker_runtime_client=boto_session.client("sagemaker-runtime",
                                                     endpoint_url=module.server.url))
    tarball = package(module.repos / "double", module.root / "sdk" / "double.tar.gz",
                      layout="flat")

    model = Model(image_uri=triton_image_uri("us-east-1"), model_data=tarball.as_uri(),
                  role=ROLE, name="sdk-double", sagemaker_session=session,
                  predictor_cls=Predictor)
    # wait=False, then the SDK's own public wait with a short poll: deploy(wait=True) is the
    # same calls but polls every 30 s (endpoint) and 20 s (component), fixed in the SDK.
    predictor = model.deploy(
        initial_instance_count=1, instance_type="ml.g5.xlarge", endpoint_name="sdk-endpoint",
        endpoint_type=EndpointType.INFERENCE_COMPONENT_BASED,
        resources=ResourceRequirements(requests={"num_cpus": 1, "memory": 1024, "copies": 1}),
        inference_component_name="sdk-component", wait=False,
        serializer=JSONSerializer(), deserializer=JSONDeserializer())
    described = session.wait_for_inference_component("sdk-component", poll=0.2)
    assert described["InferenceComponentStatus"] == "InService"
    assert described["Specification"]["ModelName"] == "sdk-double"

    request = json.loads(scale_request([1.0, 2.0, 3.0, 4.0]))
    answer = predictor.predict(request)
    assert answer["outputs"][0]["data"] == [2.0, 4.0, 6.0, 8.0]
    by_name = Predictor("sdk-endpoint", sagemaker_session=session,
                        component_name="sdk-component", serializer=JSONSerializer(),
                        deserializer=JSONDeserializer())
    assert by_name.predict(request)["outputs"][0]["data"] == [2.0, 4.0, 6.0, 8.0]

    predictor.delete_predictor()  # the component
    session.wait_for_inference_component_deletion("sdk-component", poll=0.2)
    predictor.delete_endpoint()  # the endpoint and its config
    model.delete_model()
    wait_until(lambda: not module.sm().list_endpoints(NameContains="sdk-endpoint")[
        "Endpoints"], 60, "the SDK's endpoint deleted")
    with pytest.raises(ClientError):
        module.sm().describe_model(ModelName="sdk-double")


def test_the_same_component_deployment_on_sagemaker(tmp_path: Path) -> None:
    """The deployer's component path against real SageMaker: the same boto3 calls. Runs with
    ``MME_AWS_TESTS=1``, credentials, ``MME_AWS_BUCKET`` and ``MME_AWS_ROLE_ARN`` (as
    tests/integration/test_deployer.py); ``MME_AWS_INSTANCE_TYPE`` defaults to ml.m5.xlarge."""
    if os.environ.get("MME_AWS_TESTS") != "1":
        pytest.skip("real AWS tests are off: set MME_AWS_TESTS=1 (and credentials) to run")
    missing = [k for k in ("MME_AWS_BUCKET", "MME_AWS_ROLE_ARN") if not os.environ.get(k)]
    if missing:
        pytest.skip(f"MME_AWS_TESTS=1 needs {', '.join(missing)}")
    session = boto3.Session()
    if session.get_credentials() is None:
        pytest.skip("MME_AWS_TESTS=1 but no AWS credentials are configured")
    repo = tmp_path / "double"
    write_scale_model(repo, "double", scale=2.0)
    suffix = uuid.uuid4().hex[:8]
    endpoint, component = f"mme-ic-test-{suffix}", f"mme-ic-double-{suffix}"
    prefix = f"mme-deployer-tests/{suffix}/"
    deployer = Deployer(make_clients(session, "aws"), out=io.StringIO(), progress=False)
    try:
        result = deployer.deploy(DeployConfig(
            endpoint, [repo], bucket=os.environ["MME_AWS_BUCKET"], prefix=prefix,
            role_arn=os.environ["MME_AWS_ROLE_ARN"],
            instance_type=os.environ.get("MME_AWS_INSTANCE_TYPE", "ml.m5.xlarge"),
            wait_delay_s=30.0, component=ComponentSpec(component, cpus=1, memory_mb=1024)))
        assert result.action == "created" and [s.ok for s in result.smoke] == [True]
    finally:
        deployer.teardown(endpoint, bucket=os.environ["MME_AWS_BUCKET"], prefix=prefix,
                          wait_delay_s=30.0)
