"""The shared deployer end to end: package, upload, create, wait, smoke-invoke, update, tear down.

``local`` runs against the emulator (real embedded Triton) and moto's S3 server over HTTP.
``aws`` runs the same tests against real SageMaker when ``MME_AWS_TESTS=1`` and credentials are
present; it also needs ``MME_AWS_BUCKET`` and ``MME_AWS_ROLE_ARN`` (optional:
``MME_AWS_INSTANCE_TYPE``, default ml.m5.xlarge, and ``AWS_DEFAULT_REGION``).
"""

from __future__ import annotations

import io
import json
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError

from harness.deploy_cli import main as cli_main
from harness.deployer import Deployer, make_clients, triton_image_uri
from harness.deployment import DeployConfig, DeployError, auto_payload
from tests.support import output_of, scale_request, write_scale_ensemble, write_scale_model


@dataclass
class Target:
    name: str  # local | aws
    session: Any
    bucket: str
    prefix: str
    emulator_url: str | None = None
    s3_endpoint_url: str | None = None
    role_arn: str | None = None
    instance_type: str = "ml.m5.xlarge"
    wait_delay_s: float = 1.0

    def deployer(self) -> tuple[Deployer, io.StringIO]:
        out = io.StringIO()
        clients = make_clients(self.session, self.name, self.emulator_url, self.s3_endpoint_url)
        return Deployer(clients, out=out, progress=False), out

    def config(self, endpoint: str, artifacts: list[Path], **overrides: Any) -> DeployConfig:
        values: dict[str, Any] = {
            "endpoint_name": endpoint,
            "artifacts": artifacts,
            "bucket": self.bucket,
            "prefix": self.prefix,
            "role_arn": self.role_arn,
            "instance_type": self.instance_type,
            "wait_delay_s": self.wait_delay_s,
            "create_bucket": self.name == "local",
        }
        values.update(overrides)
        return DeployConfig(**values)

    def cli_args(self) -> list[str]:
        args = ["--target", self.name, "--wait-delay", str(self.wait_delay_s)]
        if self.emulator_url:
            args += ["--emulator-url", self.emulator_url]
        if self.s3_endpoint_url:
            args += ["--s3-endpoint-url", self.s3_endpoint_url]
        if self.session.region_name:
            args += ["--region", self.session.region_name]
        return args


def _with_control_plane(server: Any) -> str:
    """Until the composition root mounts the control plane, mount it here (same wiring)."""
    app = server.app
    mounted = any(
        getattr(r, "path", None) == "/" and "POST" in (getattr(r, "methods", None) or ())
        for r in app.routes
    )
    if not mounted:
        from emulator.control import ControlPlaneService, ControlStore
        from emulator.routes.control import build_control_router

        settings = server.settings
        service = ControlPlaneService(
            store=ControlStore(settings.cache_dir / "control-plane.sqlite3"),
            registry=server.registry,
            region=settings.region,
            account=settings.account_id,
        )
        app.include_router(build_control_router(service))
    return server.url


@pytest.fixture(params=["local", "aws"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "aws":
        if os.environ.get("MME_AWS_TESTS") != "1":
            pytest.skip("real AWS tests are off: set MME_AWS_TESTS=1 (and credentials) to run")
        session = boto3.Session()
        if session.get_credentials() is None:
            pytest.skip("MME_AWS_TESTS=1 but no AWS credentials are configured")
        missing = [k for k in ("MME_AWS_BUCKET", "MME_AWS_ROLE_ARN") if not os.environ.get(k)]
        if missing:
            pytest.skip(f"MME_AWS_TESTS=1 needs {', '.join(missing)}")
        yield Target(
            "aws",
            session,
            os.environ["MME_AWS_BUCKET"],
            f"mme-deployer-tests/{uuid.uuid4().hex[:8]}/",
            role_arn=os.environ["MME_AWS_ROLE_ARN"],
            instance_type=os.environ.get("MME_AWS_INSTANCE_TYPE", "ml.m5.xlarge"),
            wait_delay_s=30.0,
        )
        return
    s3 = request.getfixturevalue("s3_server")
    start_emulator = request.getfixturevalue("start_emulator")
    server = start_emulator(s3_endpoint_url=s3.endpoint_url)
    session = boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    yield Target(
        "local",
        session,
        f"deploy-{uuid.uuid4().hex[:8]}",
        "models/",
        emulator_url=_with_control_plane(server),
        s3_endpoint_url=s3.endpoint_url,
    )


@pytest.fixture()
def repositories(tmp_path: Path) -> list[Path]:
    double = tmp_path / "repos" / "double"
    write_scale_model(double, "double", scale=2.0)
    chain = tmp_path / "repos" / "chain"
    write_scale_ensemble(chain, scale_a=2.0, scale_b=5.0)
    return [double, chain]


def _endpoint_name() -> str:
    return f"deployer-{uuid.uuid4().hex[:8]}"


def _invoke(deployer: Deployer, endpoint: str, target_model: str, input_name: str) -> np.ndarray:
    response = deployer.clients.runtime.invoke_endpoint(
        EndpointName=endpoint,
        TargetModel=target_model,
        ContentType="application/json",
        Body=scale_request([1.0, 2.0, 3.0, 4.0], input_name=input_name),
    )
    return output_of(response["Body"].read(), "Y" if input_name == "X" else "OUTPUT")


@pytest.mark.slow
def test_deploy_rerun_update_and_teardown(target: Target, repositories: list[Path]) -> None:
    endpoint = _endpoint_name()
    deployer, out = target.deployer()
    sm = deployer.clients.sagemaker
    try:
        first = deployer.deploy(target.config(endpoint, repositories))
        assert first.action == "created"
        assert [a.target_model for a in first.artifacts] == ["double.tar.gz", "chain.tar.gz"]
        assert [(s.target_model, s.ok) for s in first.smoke] == [
            ("double.tar.gz", True),
            ("chain.tar.gz", True),
        ]
        assert re.fullmatch(rf"s3://{target.bucket}/{target.prefix}{endpoint}-[0-9a-f]{{12}}/",
                            first.model_data_url)
        np.testing.assert_allclose(_invoke(deployer, endpoint, "double.tar.gz", "X"), [2, 4, 6, 8])
        np.testing.assert_allclose(
            _invoke(deployer, endpoint, "chain.tar.gz", "INPUT"), [10, 20, 30, 40]
        )
        model = sm.describe_model(ModelName=first.model_name)["PrimaryContainer"]
        assert model["Mode"] == "MultiModel"
        assert model["ModelDataUrl"] == first.model_data_url
        assert model["Image"] == triton_image_uri(deployer.clients.region)
        log = out.getvalue()
        assert "call s3.PutObject" in log and "call sagemaker.CreateEndpoint" in log

        # The same deployment again, through the CLI: nothing is uploaded or created.
        captured = io.StringIO()
        with redirect_stdout(captured):
            code = cli_main(
                ["deploy", *map(str, repositories), "--endpoint-name", endpoint]
                + ["--bucket", target.bucket, "--prefix", target.prefix, "--no-progress"]
                + ["--instance-type", target.instance_type]
                + (["--role-arn", target.role_arn] if target.role_arn else [])
                + target.cli_args()
            )
        assert code == 0, captured.getvalue()
        rerun = captured.getvalue()
        assert "call " not in rerun, rerun
        assert f"endpoint {endpoint}: unchanged" in rerun

        # A changed definition: new model + config, UpdateEndpoint, old ones cleaned up.
        changed = deployer.deploy(
            target.config(
                endpoint, repositories, environment={"SAGEMAKER_TRITON_LOG_INFO": "false"}
            )
        )
        assert changed.action == "updated"
        assert changed.config_name != first.config_name
        described = sm.describe_endpoint(EndpointName=endpoint)
        assert (described["EndpointStatus"], described["EndpointConfigName"]) == (
            "InService",
            changed.config_name,
        )
        configs = sm.list_endpoint_configs(NameContains=endpoint)["EndpointConfigs"]
        assert [c["EndpointConfigName"] for c in configs] == [changed.config_name]
        # The same tarballs: the same version, kept (the new config references it).
        assert changed.model_data_url == first.model_data_url
        listed = deployer.clients.s3.list_objects_v2(Bucket=target.bucket, Prefix=target.prefix)
        version = first.model_data_url.split("/", 3)[3]
        assert sorted(o["Key"] for o in listed["Contents"]) == [
            f"{version}chain.tar.gz", f"{version}double.tar.gz"]
        np.testing.assert_allclose(_invoke(deployer, endpoint, "double.tar.gz", "X"), [2, 4, 6, 8])
    finally:
        deployer.teardown(
            endpoint, bucket=target.bucket, prefix=target.prefix, wait_delay_s=target.wait_delay_s
        )
    with pytest.raises(ClientError) as excinfo:
        sm.describe_endpoint(EndpointName=endpoint)
    assert "Could not find endpoint" in excinfo.value.response["Error"]["Message"]
    assert sm.list_models(NameContains=endpoint)["Models"] == []
    assert sm.list_endpoint_configs(NameContains=endpoint)["EndpointConfigs"] == []
    listed = deployer.clients.s3.list_objects_v2(Bucket=target.bucket, Prefix=target.prefix)
    assert listed.get("KeyCount", 0) == 0


def test_dry_run_prints_calls_and_changes_nothing(target: Target, repositories: list[Path]) -> None:
    endpoint = _endpoint_name()
    deployer, out = target.deployer()
    result = deployer.deploy(target.config(endpoint, repositories, dry_run=True))
    assert result.action == "dry-run"
    log = out.getvalue()
    for call in ("s3.PutObject", "sagemaker.CreateModel", "sagemaker.CreateEndpointConfig"):
        assert f"would call {call}" in log
    create = next(line for line in log.splitlines() if "sagemaker.CreateEndpoint " in line)
    assert json.loads(create.split(" ", 3)[3]) == {
        "EndpointConfigName": result.config_name,
        "EndpointName": endpoint,
    }
    sm = deployer.clients.sagemaker
    assert sm.list_endpoints(NameContains=endpoint)["Endpoints"] == []
    assert sm.list_models(NameContains=endpoint)["Models"] == []


@pytest.mark.slow
def test_a_model_that_cannot_load_fails_the_smoke_test_clearly(
    target: Target, tmp_path: Path
) -> None:
    broken = tmp_path / "repos" / "broken"
    write_scale_model(broken, "broken", fail_load="weights are corrupt")
    endpoint = _endpoint_name()
    deployer, _ = target.deployer()
    try:
        with pytest.raises(DeployError) as excinfo:
            deployer.deploy(target.config(endpoint, [broken]))
        assert "smoke invocation failed for 1 model(s): broken.tar.gz" in str(excinfo.value)
        assert "ModelError" in str(excinfo.value)
    finally:
        deployer.teardown(
            endpoint, bucket=target.bucket, prefix=target.prefix, wait_delay_s=target.wait_delay_s
        )


def test_auto_payload_targets_the_top_ensemble(repositories: list[Path], tmp_path: Path) -> None:
    from harness.model_store import package_repository

    tarball = package_repository(repositories[1], tmp_path / "chain.tar.gz")
    body, content_type = auto_payload(tarball)
    request = json.loads(body)
    assert content_type == "application/json"
    assert [(i["name"], i["shape"], i["datatype"]) for i in request["inputs"]] == [
        ("INPUT", [1, 4], "FP32")
    ]


def test_clear_errors_before_any_call(tmp_path: Path) -> None:
    session = boto3.Session(
        aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1"
    )
    with pytest.raises(DeployError, match="--emulator-url"):
        make_clients(session, "local")
    deployer = Deployer(make_clients(session, "aws"), out=io.StringIO())
    with pytest.raises(DeployError, match="--role-arn is required"):
        deployer.deploy(DeployConfig("ep", [tmp_path], bucket="b"))
    with pytest.raises(DeployError, match="invalid endpoint name"):
        deployer.deploy(DeployConfig("bad_name", [tmp_path], bucket="b", role_arn="r"))
    with pytest.raises(DeployError, match="unknown SageMaker Triton version"):
        triton_image_uri("us-east-1", "19.01")
    assert triton_image_uri("cn-north-1") == (
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/sagemaker-tritonserver:24.09-py3"
    )
    local = Deployer(
        make_clients(session, "local", emulator_url="http://127.0.0.1:9"), out=io.StringIO()
    )
    with pytest.raises(DeployError, match="neither a .tar.gz nor a Triton model repository"):
        local.package([tmp_path], tmp_path / "out")


def test_a_lone_model_folder_is_packaged_with_its_folder_at_the_root(tmp_path: Path) -> None:
    import tarfile

    model = write_scale_model(tmp_path / "repo", "double")
    session = boto3.Session(
        aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1"
    )
    deployer = Deployer(
        make_clients(session, "local", emulator_url="http://127.0.0.1:9"), out=io.StringIO()
    )
    (artifact,) = deployer.package([model], tmp_path / "out")
    assert artifact.target_model == "double.tar.gz"
    with tarfile.open(artifact.path) as tar:
        names = {Path(n).as_posix() for n in tar.getnames()}
    assert {"double/config.pbtxt", "double/1/model.py"} <= names
    again = deployer.package([model], tmp_path / "again")[0]
    assert again.digest == artifact.digest  # deterministic: re-runs upload nothing


@pytest.mark.slow
def test_a_new_version_goes_to_its_own_prefix_and_the_old_one_goes_once_it_serves(
        target: Target, tmp_path: Path) -> None:
    endpoint = _endpoint_name()
    deployer, out = target.deployer()
    s3 = deployer.clients.s3
    try:
        first = deployer.deploy(target.config(endpoint, [
            write_scale_model(tmp_path / "v1", "double", scale=2.0)]))
        second = deployer.deploy(target.config(endpoint, [
            write_scale_model(tmp_path / "v2", "double", scale=3.0)]))
        assert second.action == "updated" and second.model_data_url != first.model_data_url
        np.testing.assert_allclose(_invoke(deployer, endpoint, "double.tar.gz", "X"),
                                   [3, 6, 9, 12])
        listed = s3.list_objects_v2(Bucket=target.bucket, Prefix=target.prefix)
        version = second.model_data_url.split("/", 3)[3]
        assert [o["Key"] for o in listed["Contents"]] == [f"{version}double.tar.gz"]
    finally:
        deployer.teardown(endpoint, bucket=target.bucket, prefix=target.prefix,
                          wait_delay_s=target.wait_delay_s)
    assert s3.list_objects_v2(Bucket=target.bucket, Prefix=target.prefix).get("KeyCount") == 0
