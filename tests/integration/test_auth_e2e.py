"""--auth sigv4 end to end: a real emulator and Triton, unmodified boto3 clients with real keys."""

from __future__ import annotations

import http.client
import json
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.auth
import numpy as np
import pytest
from botocore import UNSIGNED
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests.page_support import CHROMIUM, FLAGS
from tests.support import SUITE_ENV, output_of, package, scale_request, write_scale_model

ACCOUNT, REGION = "123456789012", "us-east-1"
ENDPOINT_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/mme"
KEYS = {"team-a": ("AKIATEAMA00000000001", "secret-a"),
        "team-b": ("AKIATEAMB00000000002", "secret-b"),
        "hosts": ("AKIAHOSTS00000000003", "secret-hosts"),
        "office": ("AKIAOFFICE0000000004", "secret-office"),
        "reader": ("AKIAREADER0000000005", "secret-reader"),
        "metrics": ("AKIAMETRIC0000000006", "secret-metrics"),
        "not-b": ("AKIANOTB000000000007", "secret-not-b"),
        "no-policy": ("AKIANOPOLICY00000008", "secret-none"),
        "admin": ("AKIAADMIN00000000009", "secret-admin")}


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
    # Read-only principals of the repeated-header cases.
    "reader": {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["sagemaker:Describe*", "sagemaker:List*"],
         "Resource": "*"}]},
    "metrics": {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "cloudwatch:ListMetrics", "Resource": "*"}]},
    # May invoke anything on the endpoint but team B's models.
    "not-b": invoke_policy({}, {"Effect": "Deny", "Action": "sagemaker:InvokeEndpoint",
                                "Resource": "*", "Condition": {
                                    "StringLike": {"sagemaker:TargetModel": "team-b/*"}}}),
    "admin": {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "*", "Resource": "*"}]},
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
    settings = Settings.from_env(env=SUITE_ENV, model_data=str(store), endpoint_name="mme", port=0,
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


# --- One reading of a request for IAM and for what runs (repeated headers and parameters) ------

def raw_signed(server: EmulatorServer, who: str, path: str, headers: list[tuple[str, str]],
               body: bytes, service: str = "sagemaker") -> tuple[int, dict[str, Any] | str]:
    """A request signed with ``who``'s keys and sent as given, repeated headers and all (boto3
    cannot send a header twice). botocore signs a repeated header as AWS does: its values joined
    with commas."""
    request = AWSRequest(method="POST", url=server.url + path, data=body)
    for name, value in headers:
        request.headers[name] = value  # an email.message.Message: a second set adds a copy
    key, secret = KEYS[who]
    botocore.auth.SigV4Auth(Credentials(key, secret), service, REGION).add_auth(request)
    connection = http.client.HTTPConnection(server.settings.host, server.settings.port,
                                            timeout=60)
    try:
        connection.putrequest("POST", path, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", urlsplit(server.url).netloc)  # as botocore signed it
        for name, value in request.headers.items():  # in order, copies kept
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data.decode()


def test_repeated_target_runs_nothing_iam_did_not_allow(server: EmulatorServer) -> None:
    """A reader allowed Describe*/List* sends DeleteModel then DescribeModel: the model stays."""
    admin = client(server, "sagemaker", "admin")
    admin.create_model(ModelName="kept-model", PrimaryContainer={
        "Image": "triton", "Mode": "MultiModel", "ModelDataUrl": "s3://bucket/prefix/"},
        ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/sagemaker")
    try:
        for targets in (["SageMaker.DeleteModel", "SageMaker.DescribeModel"],
                        ["SageMaker.DescribeModel", "SageMaker.DeleteModel"]):
            status, answer = raw_signed(
                server, "reader", "/",
                [("Content-Type", "application/x-amz-json-1.1"),
                 *(("X-Amz-Target", target) for target in targets)],
                json.dumps({"ModelName": "kept-model"}).encode())
            # IAM is asked about the joined target (no Describe* action), or allows it and the
            # control plane knows no such operation: either way nothing runs.
            assert status == 400 and answer["__type"] in (  # type: ignore[index]
                "AccessDeniedException", "UnknownOperationException"), answer
            assert admin.describe_model(ModelName="kept-model")["ModelName"] == "kept-model"
        # The same principal through boto3: what it may do, it does; the rest is refused.
        reader = client(server, "sagemaker", "reader")
        assert reader.describe_model(ModelName="kept-model")["ModelName"] == "kept-model"
        assert error_of(reader.delete_model, ModelName="kept-model")["Error"]["Code"] == \
            "AccessDeniedException"
    finally:
        admin.delete_model(ModelName="kept-model")


@pytest.mark.parametrize("who", ["team-a", "not-b"])
def test_repeated_target_model_never_reaches_another_tenant(server: EmulatorServer,
                                                            who: str) -> None:
    """Two TargetModel headers, the allowed one last or first: never team B's answer."""
    for targets in (["team-b/y.tar.gz", "team-a/x.tar.gz"],
                    ["team-a/x.tar.gz", "team-b/y.tar.gz"]):
        status, answer = raw_signed(
            server, who, "/endpoints/mme/invocations",
            [("Content-Type", "application/octet-stream"),
             *(("X-Amzn-SageMaker-Target-Model", target) for target in targets)],
            scale_request([1, 2, 3, 4]))
        # Denied, or allowed and then no such model: never another model's outputs.
        assert status == 400 and isinstance(answer, dict), (targets, answer)
        assert answer.get("__type") == "AccessDeniedException" or answer.get(
            "Message", "").startswith("Failed to download model data"), answer
    # One header each: the allowed model answers, the other is denied.
    np.testing.assert_allclose(output_of(invoke(server, who, "team-a/x.tar.gz")["Body"].read()),
                               np.array([1, 2, 3, 4]) * 2.0)
    assert error_of(invoke, server, who, "team-b/y.tar.gz")["Error"]["Code"] == \
        "AccessDeniedException"


def test_repeated_content_type_cannot_hide_a_cloudwatch_call(server: EmulatorServer) -> None:
    """Form first, JSON last, with a query body: IAM is asked about cloudwatch:ListMetrics."""
    status, answer = raw_signed(
        server, "no-policy", "/",
        [("Content-Type", "application/x-www-form-urlencoded"),
         ("Content-Type", "application/x-amz-json-1.0")],
        b"Action=ListMetrics&Version=2010-08-01", service="monitoring")
    assert status == 403, answer
    assert "<Code>AccessDenied</Code>" in str(answer) and "cloudwatch:ListMetrics" in str(answer)


def test_repeated_query_action_is_refused(server: EmulatorServer) -> None:
    """A principal allowed only ListMetrics repeats Action=: refused, nothing runs."""
    for body in (b"Action=ListMetrics&Version=2010-08-01&Action=GetMetricStatistics",
                 b"Action=GetMetricStatistics&Version=2010-08-01&Action=ListMetrics"):
        status, answer = raw_signed(
            server, "metrics", "/", [("Content-Type", "application/x-www-form-urlencoded")],
            body, service="monitoring")
        assert status == 400, answer
        assert "<Code>InvalidParameterCombination</Code>" in str(answer)
        assert "Parameter Action is given more than once" in str(answer)
    status, answer = raw_signed(
        server, "metrics", "/", [("Content-Type", "application/x-www-form-urlencoded")],
        b"Action=ListMetrics&Version=2010-08-01", service="monitoring")
    assert status == 200 and "<ListMetricsResponse" in str(answer)


# --- The emulator's own routes ---------------------------------------------------------------

def signed_get(server: EmulatorServer, who: str, path: str) -> urllib.request.Request:
    request = AWSRequest(method="GET", url=server.url + path)
    key, secret = KEYS[who]
    botocore.auth.SigV4Auth(Credentials(key, secret), "sagemaker", REGION).add_auth(request)
    return urllib.request.Request(server.url + path, headers=dict(request.headers.items()))


def status_of(request: urllib.request.Request | str) -> int:
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read(1)
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_emulator_routes_hide_tenants_from_unauthenticated_callers(
        server: EmulatorServer) -> None:
    invoke(server, "team-a", "team-a/x.tar.gz")  # a tenant's model is loaded
    for path in ("/ping", "/metrics", "/_emulator/", "/_emulator/page/app.js"):
        assert status_of(server.url + path) == 200, path  # nothing tenant-specific
    for path in ("/_emulator/models", "/_emulator/metrics", "/_emulator/page/state",
                 "/_emulator/page/stream"):
        assert status_of(server.url + path) == 403, path
        assert status_of(signed_get(server, "team-b", path)) == 400, path  # AccessDenied
        assert status_of(signed_get(server, "admin", path)) == 200, path
    with urllib.request.urlopen(signed_get(server, "admin", "/_emulator/models"),
                                timeout=30) as response:
        assert "team-a/x.tar.gz" in response.read().decode()


def test_the_live_page_reads_its_data_with_the_key_in_its_address(
        server: EmulatorServer) -> None:
    """A browser cannot sign: the page's address that mme serve says (``?key=``) sets a cookie
    with which the page reads its own data, and nothing else."""
    invoke(server, "team-a", "team-a/x.tar.gz")
    assert "?key=" in server.page_url
    wrong = f"{server.url}/_emulator/?key=not-the-key"
    with urllib.request.urlopen(wrong, timeout=30) as response:
        assert response.headers["Set-Cookie"] is None
        assert 'id="initial-state"' not in response.read().decode()
    with urllib.request.urlopen(server.page_url, timeout=30) as response:
        cookie = response.headers["Set-Cookie"]
        html = response.read().decode()
    assert 'id="initial-state"' in html and "team-a/x.tar.gz" in html  # the first paint
    assert {"HttpOnly", "SameSite=Strict", "Path=/_emulator/"} <= {
        part.strip() for part in cookie.split(";")}
    key_cookie = cookie.split(";")[0]

    def with_cookie(path: str, value: str = key_cookie) -> urllib.request.Request:
        return urllib.request.Request(server.url + path, headers={"Cookie": value})

    for path in ("/_emulator/page/state", "/_emulator/page/stream"):
        assert status_of(with_cookie(path)) == 200, path
        assert status_of(with_cookie(path, "mme-page-key=not-the-key")) == 403, path
    with urllib.request.urlopen(with_cookie("/_emulator/page/state"), timeout=30) as response:
        assert "team-a/x.tar.gz" in response.read().decode()
    # The key opens the page's data only: every other route still needs a signature.
    assert status_of(with_cookie("/_emulator/models")) == 403
    assert status_of(with_cookie("/_emulator/metrics")) == 403
    unload = urllib.request.Request(
        server.url + "/_emulator/endpoints/mme/models/team-a/x.tar.gz/unload", method="POST",
        headers={"Cookie": key_cookie})
    assert status_of(unload) == 403


def test_a_browser_opening_the_page_address_sees_the_fleet_live(
        server: EmulatorServer, tmp_path: Path) -> None:
    """With --auth sigv4, the address mme serve says opens the live page in a real browser:
    its first paint is the fleet and its stream connects (before: an empty shell)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (tests/install-chromium.sh)")
    from playwright.sync_api import sync_playwright

    invoke(server, "team-a", "team-a/x.tar.gz")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=FLAGS)
        try:
            page = browser.new_page()
            page.goto(server.page_url)
            page.wait_for_selector('tr.model[data-model="team-a/x.tar.gz"]', timeout=60_000)
            page.wait_for_selector('#connection[data-connected="true"]', timeout=60_000)
            # Reloaded without the key in the address: the cookie holds it.
            page.goto(f"{server.url}/_emulator/")
            page.wait_for_selector('#connection[data-connected="true"]', timeout=60_000)
        finally:
            browser.close()


def test_unloading_a_tenants_model_needs_its_own_permission(server: EmulatorServer) -> None:
    invoke(server, "team-a", "team-a/x.tar.gz")
    path = "/_emulator/endpoints/mme/models/team-a/x.tar.gz/unload"
    for who in ("team-b", "not-b"):  # known principals without emulator:UnloadModel
        status, answer = raw_signed(server, who, path, [], b"")
        assert status == 400 and answer["__type"] == "AccessDeniedException", answer
        assert "emulator:UnloadModel" in answer["message"]
    unsigned = urllib.request.Request(server.url + path, method="POST")
    assert status_of(unsigned) == 403
    assert raw_signed(server, "admin", path, [], b"")[0] == 200

