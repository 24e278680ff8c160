"""The shared deployer's guarded update as SageMaker answers it: the same code the emulator test
runs (``tests/integration/test_deployments.py``), here against responses shaped like the real
service's (botocore's Stubber checks every request and response against the service model)."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from harness.deployer import Clients, Deployer, deployment_config
from harness.deployment import DeployConfig, DeployError, RolledBack

NOW = datetime(2026, 11, 25, tzinfo=timezone.utc)
ARN = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/demo"


def described(status: str, config: str, pending: list[dict[str, Any]] | None = None,
              reason: str | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "EndpointName": "demo", "EndpointArn": ARN, "EndpointConfigName": config,
        "EndpointStatus": status, "CreationTime": NOW, "LastModifiedTime": NOW,
        "ProductionVariants": [{"VariantName": "AllTraffic", "CurrentWeight": 1.0,
                                "DesiredWeight": 1.0, "CurrentInstanceCount": 2,
                                "DesiredInstanceCount": 2}]}
    if pending is not None:
        answer["PendingDeploymentSummary"] = {
            "EndpointConfigName": "new", "StartTime": NOW, "ProductionVariants": [{
                "VariantName": "AllTraffic", "CurrentInstanceCount": 2,
                "DesiredInstanceCount": 2, "CurrentWeight": 0.1, "VariantStatus": pending}]}
    if reason:
        answer["FailureReason"] = reason
    return answer


def run(responses: list[dict[str, Any]]) -> tuple[str, BaseException | None]:
    sm = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x",
                      aws_secret_access_key="x")
    guarded = deployment_config("canary", 600, canary_size="10%", termination_wait_s=120,
                                rollback_alarms=["demo-5xx"])
    with Stubber(sm) as stub:
        stub.add_response("describe_endpoint", described("InService", "old"))
        stub.add_response("update_endpoint", {"EndpointArn": ARN}, {
            "EndpointName": "demo", "EndpointConfigName": "new", "DeploymentConfig": guarded})
        for response in responses:
            stub.add_response("describe_endpoint", response)
        out = io.StringIO()
        deployer = Deployer(Clients(sm, None, None, "us-east-1", "aws"), out=out, progress=False)
        config = DeployConfig("demo", [], wait_delay_s=0, deployment_config=guarded)
        error: BaseException | None = None
        try:
            deployer._ensure_endpoint(config, "new")
        except DeployError as exc:
            error = exc
        stub.assert_no_pending_responses()
    return out.getvalue(), error


def test_a_canary_on_sagemaker_is_followed_step_by_step_to_its_end() -> None:
    out, error = run([
        described("Updating", "old", [{"Status": "Creating", "StartTime": NOW}]),
        described("Updating", "old", [{"Status": "Baking", "StartTime": NOW,
                                       "StatusMessage": "Baking canary"}]),
        described("Updating", "old", [{"Status": "Baking", "StartTime": NOW,
                                       "StatusMessage": "Baking canary"}]),
        described("InService", "new"),
    ])
    assert error is None
    lines = [line for line in out.splitlines() if line.startswith("deployment of demo:")]
    assert lines == [
        "deployment of demo: Updating; AllTraffic Creating; new fleet 2/2 instances, weight 0.10",
        "deployment of demo: Updating; AllTraffic Baking: Baking canary; new fleet 2/2 "
        "instances, weight 0.10",
        "deployment of demo: InService on new",
    ]


def test_a_rollback_on_sagemaker_raises_rolled_back() -> None:
    out, error = run([
        described("Updating", "old", [{"Status": "Baking", "StartTime": NOW}]),
        described("RollingBack", "old", reason="Alarm demo-5xx fired"),
        described("InService", "old", reason="Alarm demo-5xx fired"),
    ])
    assert isinstance(error, RolledBack)
    assert "Alarm demo-5xx fired" in str(error)
    assert "deployment of demo: RollingBack: Alarm demo-5xx fired" in out
    assert "deployment of demo: InService on old (rolled back: Alarm demo-5xx fired)" in out


@pytest.mark.parametrize(("size", "expected"), [
    ("10%", {"Type": "CAPACITY_PERCENT", "Value": 10}),
    ("2", {"Type": "INSTANCE_COUNT", "Value": 2}),
])
def test_sizes(size: str, expected: dict[str, Any]) -> None:
    config = deployment_config("canary", 60, canary_size=size)
    assert config["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"]["CanarySize"] == \
        expected


@pytest.mark.parametrize("size", ["0", "ten", "5.5%", "-1"])
def test_a_size_that_is_no_size_is_one_line(size: str) -> None:
    with pytest.raises(DeployError, match="whole number of instances"):
        deployment_config("canary", 60, canary_size=size)
