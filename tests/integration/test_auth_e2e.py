"""--auth sigv4 end to end: a real emulator and Triton, unmodified boto3 clients with real keys."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import boto3
import botocore.auth
import numpy as np
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests.support import output_of, package, scale_request, write_scale_model

ACCOUNT, REGION = "123456789012", "us-east-1"
ENDPOINT_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/mme"
KEYS = {"team-a": ("AKIATEAMA00000000001", "secret-a"),
        "team-b": ("AKIATEAMB00000000002", "secret-b"),
        "hosts": ("AKIAHOSTS00000000003", "secret-hosts"),
        "office": ("AKIAOFFICE0000000004", "secret-office")}


def invoke_policy(condition: dict[str, Any], *extra: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["sagemaker:InvokeEndpoint"], "Resource": ENDPOINT_ARN,
         "Condition": condition}, *extra]}


POLICIES = {
    # The example: team A may invoke its own models on endpoint "mme" ...
    "team-a": invoke_policy(
        {"StringLike": {"sagemaker:TargetModel": ["team-a/*"]}},
        # ... and manage its own models, and read every endpoint.
        {"Effect": "Allow", "Action": ["sagemaker:CreateModel", "sagemaker:DeleteModel"],
         "Resource": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model/team-a-*"},
        {"Effect": "Allow", "Action": ["sagemaker:Describe*", "sagemaker:List*"],
         "Resource": "*"}),
    "team-b": invoke_policy({"StringLike": {"sagemaker:TargetModel": ["team-b/*"]}}),
    # The multi-container policy of AWS's documentation, on this endpoint.
    "hosts": invoke_policy({"StringLike": {"sagemaker:TargetContainerHostname":
                                           ["customIps*", "common*"]}}),
    # Invocations from the office network only.
    "office": invoke_policy({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    root = tmp_path_factory.mktemp("auth")
    store = root / "store"
    for team, scale in (("team-a", 2.0), ("team-b", 3.0)):
        folder = write_scale_model(root / "src" / team, "scale", scale=scale)
        package(folder, store / team / ("x.tar.gz" if team == "team-a" else "y.tar.gz"),
                "folder")
    creds = root / "creds.ini"
    creds.write_text("".join(f"[{name}]\naws_access_key_id = {key}\n"
                             f"aws_secret_access_key = {secret}\n\n"
                             for name, (key, secret) in KEYS.items()))
    policies = root / "policies"
    policies.mkdir()
    for name, document in POLICIES.items():
        (policies / f"{name}.json").write_text(json.dumps(document))
    settings = Settings.from_env(env={}, model_data=str(store), endpoint_name="mme", port=0,
                                 cache_dir=root / "cache", auth="sigv4", credentials=creds,
                                 policies=policies, region=REGION, account_id=ACCOUNT)
    with EmulatorServer(settings) as running:
        yield running


def client(server: EmulatorServer, service: str, who: str | None, **config: Any) -> Any:
    key, secret = KEYS[who] if who else ("AKIANOBODY0000000000", "nope")
    return boto3.client(service, endpoint_url=server.url, region_name=REGION,
                        aws_access_key_id=key, aws_secret_access_key=secret,
                        config=Config(retries={"max_attempts": 1, "mode": "standard"},
                                      read_timeout=120, **config))


def invoke(server: EmulatorServer, who: str | None, target: str | None = None,
           **extra: Any) -> Any:
    runtime = client(server, "sagemaker-runtime", who, **extra.pop("config", {}))
    params = {"TargetModel": target} if target else {}
    return runtime.invoke_endpoint(EndpointName="mme", ContentType="application/octet-stream",
                                   Body=scale_request([1, 2, 3, 4]), **params, **extra)


def error_of(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        call(*args, **kwargs)
    return caught.value.response


def test_target_model_allow_and_deny_matrix(server: EmulatorServer) -> None:
    for who, target, scale in (("team-a", "team-a/x.tar.gz", 2.0),
                               ("team-b", "team-b/y.tar.gz", 3.0)):
        body = invoke(server, who, target)["Body"].read()
        np.testing.assert_allclose(output_of(body), np.array([1, 2, 3, 4]) * scale)
    for who, target in (("team-a", "team-b/y.tar.gz"), ("team-b", "team-a/x.tar.gz"),
                        ("hosts", "team-a/x.tar.gz")):
        response = error_of(invoke, server, who, target)
        assert response["Error"]["Code"] == "AccessDeniedException"
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert response["Error"]["Message"] == (
            f"User: arn:aws:iam::{ACCOUNT}:user/{who} is not authorized to perform: "
            f"sagemaker:InvokeEndpoint on resource: {ENDPOINT_ARN} because no identity-based "
            "policy allows the sagemaker:InvokeEndpoint action")


def test_target_container_hostname_allow_and_deny(server: EmulatorServer) -> None:
    denied = error_of(invoke, server, "hosts", "team-a/x.tar.gz",
                      TargetContainerHostname="secondContainer")
    assert denied["Error"]["Code"] == "AccessDeniedException"
    # Allowed by IAM: the request reaches the endpoint, which is an MME and so answers for
    # itself (whatever it says, it is not the auth layer's AccessDeniedException).
    try:
        invoke(server, "hosts", "team-a/x.tar.gz", TargetContainerHostname="customIps1")
    except ClientError as exc:
        assert exc.response["Error"]["Code"] != "AccessDeniedException"


def test_source_ip_is_the_peer_not_a_forwarded_header(server: EmulatorServer) -> None:
    """aws:SourceIp is the address the request came from: an X-Forwarded-For header set by a
    local caller must not let it pass a network condition."""
    runtime = client(server, "sagemaker-runtime", "office")
    runtime.meta.events.register(
        "before-send.sagemaker-runtime.InvokeEndpoint",
        lambda request, **_: request.headers.__setitem__("X-Forwarded-For", "10.1.2.3"))
    response = error_of(runtime.invoke_endpoint, EndpointName="mme",
                        TargetModel="team-a/x.tar.gz", ContentType="application/octet-stream",
                        Body=scale_request([1, 2, 3, 4]))
    assert response["Error"]["Code"] == "AccessDeniedException"


def test_unsigned_unknown_key_and_late_requests(server: EmulatorServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    unsigned = error_of(invoke, server, "team-a", "team-a/x.tar.gz",
                        config={"signature_version": UNSIGNED})
    assert (unsigned["Error"]["Code"], unsigned["Error"]["Message"],
            unsigned["ResponseMetadata"]["HTTPStatusCode"]) == (
        "MissingAuthenticationTokenException", "Missing Authentication Token", 403)
    unknown = error_of(invoke, server, None, "team-a/x.tar.gz")
    assert (unknown["Error"]["Code"], unknown["Error"]["Message"]) == (
        "UnrecognizedClientException", "The security token included in the request is invalid.")
    # Signed with a clock ten minutes behind: botocore stamps X-Amz-Date from this function.
    late = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(minutes=10)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: late)
    expired = error_of(invoke, server, "team-a", "team-a/x.tar.gz")
    assert expired["Error"]["Code"] == "InvalidSignatureException"
    assert expired["Error"]["Message"].startswith(
        f"Signature expired: {late.strftime('%Y%m%dT%H%M%SZ')} is now earlier than ")
    assert expired["Error"]["Message"].endswith(" - 5 min.)")


def test_tampered_body_is_refused(server: EmulatorServer) -> None:
    runtime = client(server, "sagemaker-runtime", "team-a")

    def tamper(request: Any, **_: Any) -> None:  # after signing, before sending: same length
        assert b"[1, 2, 3, 4]" in request.body
        request.body = request.body.replace(b"[1, 2, 3, 4]", b"[9, 9, 9, 9]")

    runtime.meta.events.register("before-send.sagemaker-runtime.InvokeEndpoint", tamper)
    response = error_of(runtime.invoke_endpoint, EndpointName="mme", TargetModel="team-a/x.tar.gz",
                        ContentType="application/octet-stream", Body=scale_request([1, 2, 3, 4]))
    assert response["Error"]["Code"] == "InvalidSignatureException"
    assert response["Error"]["Message"].startswith(
        "The request signature we calculated does not match the signature you provided.")


def test_control_plane_actions_on_their_resource_arns(server: EmulatorServer) -> None:
    team_a = client(server, "sagemaker", "team-a")
    assert team_a.describe_endpoint(EndpointName="mme")["EndpointName"] == "mme"
    assert "Endpoints" in team_a.list_endpoints()
    model = {"PrimaryContainer": {"Image": "triton", "Mode": "MultiModel",
                                  "ModelDataUrl": "s3://bucket/prefix/"},
             "ExecutionRoleArn": f"arn:aws:iam::{ACCOUNT}:role/sagemaker"}
    team_a.create_model(ModelName="team-a-model", **model)  # allowed on model/team-a-*
    denied = error_of(team_a.create_model, ModelName="Team-B-Model", **model)
    assert denied["Error"]["Code"] == "AccessDeniedException"
    assert denied["Error"]["Message"] == (
        f"User: arn:aws:iam::{ACCOUNT}:user/team-a is not authorized to perform: "
        f"sagemaker:CreateModel on resource: arn:aws:sagemaker:{REGION}:{ACCOUNT}:model/"
        "team-b-model because no identity-based policy allows the sagemaker:CreateModel action")
    team_a.delete_model(ModelName="team-a-model")
    listing = error_of(client(server, "sagemaker", "team-b").list_endpoints)
    assert listing["Error"]["Message"] == (
        f"User: arn:aws:iam::{ACCOUNT}:user/team-b is not authorized to perform: "
        "sagemaker:ListEndpoints because no identity-based policy allows the "
        "sagemaker:ListEndpoints action")
    unsigned = error_of(client(server, "sagemaker", "team-a",
                               signature_version=UNSIGNED).list_endpoints)
    assert unsigned["Error"]["Code"] == "MissingAuthenticationTokenException"


def test_autoscaling_and_cloudwatch_errors_parse_in_boto3(server: EmulatorServer) -> None:
    scaling = client(server, "application-autoscaling", "team-b")
    denied = error_of(scaling.describe_scalable_targets, ServiceNamespace="sagemaker")
    assert denied["Error"]["Code"] == "AccessDeniedException"
    assert "application-autoscaling:DescribeScalableTargets" in denied["Error"]["Message"]
    cloudwatch = client(server, "cloudwatch", "team-b")  # smithy RPC v2 CBOR
    denied = error_of(cloudwatch.list_metrics, Namespace="AWS/SageMaker")
    assert denied["Error"]["Code"] == "AccessDeniedException"
    assert "cloudwatch:ListMetrics" in denied["Error"]["Message"]
    unknown = error_of(client(server, "cloudwatch", None).list_metrics)
    assert unknown["Error"]["Code"] == "UnrecognizedClientException"


def test_emulator_read_only_routes_stay_open(server: EmulatorServer) -> None:
    for path in ("/ping", "/_emulator/models", "/metrics"):
        with urllib.request.urlopen(server.url + path, timeout=30) as response:
            assert response.status == 200, path
    request = urllib.request.Request(server.url + "/_emulator/endpoints/mme/models/x/unload",
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 403  # not an AWS API, but it changes state: signature required

