"""SigV4 verification, the request -> IAM mapping, error rendering, and loading at start."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.parsers import create_parser
from fastapi import FastAPI
from urllib3._collections import HTTPHeaderDict

from emulator.auth import AuthConfigError, auth_errors, install_auth, is_loopback
from emulator.auth.auth_errors import AuthError, Failure, Protocol
from emulator.auth.credentials import load_credentials, load_principals
from emulator.auth.requests import classify
from emulator.auth.sigv4 import verify
from emulator.contract.apis import RepeatedParameter, canonical_headers, read_request
from emulator.settings import Settings

KEY, SECRET = "AKIATEAMA0000000000A", "team-a-secret"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def principals(tmp_path: Path) -> dict[str, Any]:
    creds = tmp_path / "creds.ini"
    creds.write_text(f"[team-a]\naws_access_key_id = {KEY}\naws_secret_access_key = {SECRET}\n")
    return load_credentials(creds, "123456789012")


def signed(url: str, body: bytes, *, at: datetime = NOW, service: str = "sagemaker",
           region: str = "us-east-1", secret: str = SECRET,
           headers: dict[str, str] | None = None) -> tuple[str, bytes, list[tuple[str, str]]]:
    """Sign like boto3 does, with a frozen clock; returns (raw path, query, header pairs)."""
    request = AWSRequest(method="POST", url=url, data=body, headers=headers or {})
    signer = SigV4Auth(Credentials(KEY, secret), service, region)
    request.context["timestamp"] = at.strftime("%Y%m%dT%H%M%SZ")
    request.headers["X-Amz-Date"] = request.context["timestamp"]
    request.headers["host"] = urlsplit(url).netloc
    canonical = signer.canonical_request(request)
    signature = signer.signature(signer.string_to_sign(request, canonical), request)
    signed_names = signer.signed_headers(signer.headers_to_sign(request))
    request.headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={signer.scope(request)}, SignedHeaders={signed_names}, "
        f"Signature={signature}")
    pairs = [(k.lower(), v) for k, v in request.headers.items()]
    return urlsplit(url).path, urlsplit(url).query.encode(), pairs


def check(principals: dict[str, Any], path: str, query: bytes, headers: list[tuple[str, str]],
          body: bytes, now: datetime = NOW, service: str = "sagemaker") -> Any:
    return verify(method="POST", raw_path=path.encode(), query=query, headers=headers,
                  body=body, principals=principals, service=service, region="us-east-1",
                  now=now)


URL = "http://127.0.0.1:8080/endpoints/mme/invocations"


def test_a_good_signature_names_its_principal(principals: dict[str, Any]) -> None:
    path, query, headers = signed(URL, b'{"inputs": []}')
    principal = check(principals, path, query, headers, b'{"inputs": []}')
    assert principal.arn == "arn:aws:iam::123456789012:user/team-a"


def test_percent_encoded_path_and_query_verify(principals: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:8080/endpoints/{quote('My Endpoint', safe='')}/invocations?x=a%20b"
    path, query, headers = signed(url, b"{}")
    assert check(principals, path, query, headers, b"{}").name == "team-a"


def failure(principals: dict[str, Any], *args: Any, **kwargs: Any) -> AuthError:
    with pytest.raises(AuthError) as caught:
        check(principals, *args, **kwargs)
    return caught.value


def test_tampered_body_is_a_bad_signature(principals: dict[str, Any]) -> None:
    path, query, headers = signed(URL, b'{"x": 1}')
    error = failure(principals, path, query, headers, b'{"x": 2}')
    assert error.failure is Failure.BAD_SIGNATURE
    assert error.message.startswith("The request signature we calculated does not match")


def test_tampered_signed_header_or_path_is_a_bad_signature(principals: dict[str, Any]) -> None:
    path, query, headers = signed(URL, b"{}", headers={
        "X-Amzn-SageMaker-Target-Model": "team-a/x.tar.gz"})
    swapped = [(k, "team-b/y.tar.gz" if k == "x-amzn-sagemaker-target-model" else v)
               for k, v in headers]
    assert failure(principals, path, query, swapped, b"{}").failure is Failure.BAD_SIGNATURE
    other = path.replace("mme", "prod")
    assert failure(principals, other, query, headers, b"{}").failure is Failure.BAD_SIGNATURE
    assert failure(principals, path, query, [h for h in headers
                                             if h[0] != "x-amzn-sagemaker-target-model"],
                   b"{}").failure is Failure.BAD_SIGNATURE


def test_wrong_secret_is_a_bad_signature(principals: dict[str, Any]) -> None:
    path, query, headers = signed(URL, b"{}", secret="guess")
    assert failure(principals, path, query, headers, b"{}").failure is Failure.BAD_SIGNATURE


def test_signed_ten_minutes_ago_is_expired(principals: dict[str, Any]) -> None:
    path, query, headers = signed(URL, b"{}", at=NOW - timedelta(minutes=10))
    error = failure(principals, path, query, headers, b"{}")
    assert error.failure is Failure.BAD_SIGNATURE
    assert error.message == ("Signature expired: 20260301T115000Z is now earlier than "
                             "20260301T115500Z (20260301T120000Z - 5 min.)")
    # within the five minutes either way it is fine
    for skew in (timedelta(minutes=4, seconds=59), -timedelta(minutes=4, seconds=59)):
        path, query, headers = signed(URL, b"{}", at=NOW - skew)
        assert check(principals, path, query, headers, b"{}").name == "team-a"


def test_signed_in_the_future_is_not_yet_current(principals: dict[str, Any]) -> None:
    path, query, headers = signed(URL, b"{}", at=NOW + timedelta(minutes=6))
    assert failure(principals, path, query, headers, b"{}").message.startswith(
        "Signature not yet current: 20260301T120600Z is still later than 20260301T120500Z")


def test_unsigned_unknown_key_and_incomplete(principals: dict[str, Any]) -> None:
    path, query, headers = signed(URL, b"{}")
    unsigned = [h for h in headers if h[0] != "authorization"]
    assert failure(principals, path, query, unsigned, b"{}").failure is Failure.UNSIGNED
    unknown = [(k, v.replace(KEY, "AKIAUNKNOWN000000000") if k == "authorization" else v)
               for k, v in headers]
    error = failure(principals, path, query, unknown, b"{}")
    assert (error.failure, error.message) == (
        Failure.UNKNOWN_KEY, "The security token included in the request is invalid.")
    partial = [(k, "AWS4-HMAC-SHA256 Credential=x/y" if k == "authorization" else v)
               for k, v in headers]
    error = failure(principals, path, query, partial, b"{}")
    assert error.failure is Failure.INCOMPLETE
    assert "requires 'Signature' parameter" in error.message


def test_credential_scope_must_match_region_and_service(principals: dict[str, Any]) -> None:
    path, query, headers = signed(URL, b"{}", region="eu-west-1")
    assert "valid region" in failure(principals, path, query, headers, b"{}").message
    path, query, headers = signed(URL, b"{}", service="monitoring")
    assert "correct service: 'sagemaker'" in failure(principals, path, query, headers,
                                                     b"{}").message


# --- Request -> action, resource, condition keys ---------------------------------------------

def call(method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b"") -> Any:
    return classify(method, path, {k.lower(): v for k, v in (headers or {}).items()}, body,
                    "us-east-1", "123456789012")


def test_runtime_mapping() -> None:
    invoke = call("POST", "/endpoints/My-MME/invocations", {
        "X-Amzn-SageMaker-Target-Model": "team-a/x.tar.gz",
        "X-Amzn-SageMaker-Target-Container-Hostname": "customIps1"})
    assert (invoke.service, invoke.action, invoke.resource, invoke.protocol) == (
        "sagemaker", "sagemaker:InvokeEndpoint",
        "arn:aws:sagemaker:us-east-1:123456789012:endpoint/my-mme", Protocol.REST_JSON)
    assert invoke.keys["sagemaker:TargetModel"] == "team-a/x.tar.gz"
    assert invoke.keys["sagemaker:TargetContainerHostname"] == "customIps1"
    assert call("POST", "/endpoints/e/invocations").keys["sagemaker:TargetModel"] is None
    # Its API reference: "your IAM permissions must allow the sagemaker:InvokeEndpoint action"
    assert call("POST", "/endpoints/e/invocations-response-stream").action == \
        "sagemaker:InvokeEndpoint"
    assert call("POST", "/endpoints/e/async-invocations").action == "sagemaker:InvokeEndpointAsync"


def control(operation: str, params: dict[str, Any]) -> Any:
    return call("POST", "/", {"X-Amz-Target": f"SageMaker.{operation}"},
                json.dumps(params).encode())


def test_control_plane_mapping() -> None:
    arn = "arn:aws:sagemaker:us-east-1:123456789012:"
    assert control("CreateModel", {"ModelName": "M1"}).resource == arn + "model/m1"
    assert control("CreateEndpointConfig", {"EndpointConfigName": "C", "ProductionVariants": [
        {"ModelName": "M1", "InstanceType": "ml.m5.large"}]}).resource == arn + "endpoint-config/c"
    create = control("CreateEndpoint", {"EndpointName": "E", "EndpointConfigName": "C",
                                        "Tags": [{"Key": "team", "Value": "a"}]})
    assert (create.action, create.resource) == ("sagemaker:CreateEndpoint", arn + "endpoint/e")
    assert create.keys["aws:TagKeys"] == ["team"] and create.keys["aws:RequestTag/team"] == "a"
    assert control("DescribeEndpoint", {"EndpointName": "E"}).resource == arn + "endpoint/e"
    assert control("ListEndpoints", {}).resource == "*"
    types = control("CreateEndpointConfig", {"EndpointConfigName": "C", "ProductionVariants": [
        {"InstanceType": "ml.m5.large"}, {"InstanceType": "ml.g5.xlarge"}]})
    assert types.keys["sagemaker:InstanceTypes"] == ["ml.m5.large", "ml.g5.xlarge"]


def test_autoscaling_and_cloudwatch_mapping() -> None:
    scaling = call("POST", "/", {"X-Amz-Target": "AnyScaleFrontendService.RegisterScalableTarget"},
                   b"{}")
    assert (scaling.service, scaling.action, scaling.resource, scaling.protocol) == (
        "application-autoscaling", "application-autoscaling:RegisterScalableTarget", "*",
        Protocol.JSON)
    cbor = call("POST", "/service/GraniteServiceVersion20100801/operation/GetMetricData")
    assert (cbor.service, cbor.action, cbor.protocol) == (
        "monitoring", "cloudwatch:GetMetricData", Protocol.CBOR)
    as_json = call("POST", "/", {"X-Amz-Target": "GraniteServiceVersion20100801.ListMetrics"})
    assert (as_json.action, as_json.protocol) == ("cloudwatch:ListMetrics", Protocol.JSON)
    query = call("POST", "/", {"Content-Type": "application/x-www-form-urlencoded"},
                 b"Action=PutMetricAlarm&Version=2010-08-01")
    assert (query.action, query.protocol) == ("cloudwatch:PutMetricAlarm", Protocol.QUERY)
    assert call("GET", "/ping") is None
    assert call("GET", "/_emulator/") is None  # the page's HTML: nothing tenant-specific


def test_emulator_data_routes_are_actions_of_their_own() -> None:
    unload = call("POST", "/_emulator/endpoints/MME/models/team-a/x.tar.gz/unload")
    assert (unload.action, unload.resource, unload.keys["sagemaker:TargetModel"]) == (
        "emulator:UnloadModel", "arn:aws:sagemaker:us-east-1:123456789012:endpoint/mme",
        "team-a/x.tar.gz")
    for path in ("/_emulator/models", "/_emulator/page/state", "/_emulator/page/stream"):
        assert call("GET", path).action == "emulator:DescribeModels", path
    assert call("GET", "/_emulator/metrics").action == "emulator:GetMetrics"
    for method, path, action in (
            ("POST", "/_emulator/clock/advance", "AdvanceClock"),
            ("PUT", "/_emulator/transitions", "PutTransition"),
            ("GET", "/_emulator/transitions", "ListTransitions"),
            ("DELETE", "/_emulator/transitions", "DeleteTransitions")):
        found = call(method, path)
        assert (found.action, found.resource) == (f"emulator:{action}", "*"), path


def test_a_repeated_form_parameter_is_refused_not_read_one_way() -> None:
    with pytest.raises(RepeatedParameter, match="Action is given more than once"):
        call("POST", "/", {"Content-Type": "application/x-www-form-urlencoded"},
             b"Action=ListMetrics&Version=2010-08-01&Action=GetMetricStatistics")


def test_repeated_headers_are_joined_once_for_every_reader() -> None:
    raw = [(b"host", b"h"), (b"x-amz-target", b"SageMaker.DeleteModel"),  # ASGI: lower-case
           (b"x-amz-target", b"SageMaker.DescribeModel"), (b"content-length", b"2")]
    joined = dict(canonical_headers(raw) or [])
    assert joined[b"x-amz-target"] == b"SageMaker.DeleteModel,SageMaker.DescribeModel"
    assert canonical_headers([(b"host", b"h"), (b"x-amz-target", b"SageMaker.X")]) is None
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/", "headers": raw}
    api = read_request(scope)
    assert api is not None and api.operation == "DeleteModel,SageMaker.DescribeModel"
    # What IAM is asked about is what the handler is given: neither DescribeModel alone.
    assert [v for k, v in scope["headers"] if k == b"x-amz-target"] == [
        b"SageMaker.DeleteModel,SageMaker.DescribeModel"]
    assert read_request(scope) is api  # read once, kept


# --- Errors parse in botocore as the code AWS uses -------------------------------------------

@pytest.mark.parametrize(("protocol", "parser"), [
    (Protocol.REST_JSON, "rest-json"), (Protocol.JSON, "json"),
    (Protocol.CBOR, "smithy-rpc-v2-cbor"), (Protocol.QUERY, "query")])
@pytest.mark.parametrize("error", [
    auth_errors.unsigned(), auth_errors.unknown_key(), auth_errors.bad_signature(),
    auth_errors.expired(NOW - timedelta(minutes=10), NOW),
    auth_errors.access_denied("arn:aws:iam::1:user/a", "sagemaker:InvokeEndpoint",
                              "arn:aws:sagemaker:us-east-1:1:endpoint/e", explicit=False)])
def test_errors_parse_in_botocore(protocol: Protocol, parser: str, error: AuthError) -> None:
    status, headers, body = error.render(protocol)
    response = {"status_code": status, "body": body,
                "headers": HTTPHeaderDict({k.decode(): v.decode() for k, v in headers})}
    parsed = create_parser(parser).parse(response, None)
    assert parsed["Error"]["Code"] == error.code(protocol)
    assert parsed["Error"]["Message"] == error.message
    assert parsed["ResponseMetadata"]["HTTPStatusCode"] == status


def test_access_denied_messages() -> None:
    user, arn = "arn:aws:iam::123456789012:user/team-a", \
        "arn:aws:sagemaker:us-east-1:123456789012:endpoint/mme"
    assert auth_errors.access_denied(user, "sagemaker:InvokeEndpoint", arn, False).message == (
        f"User: {user} is not authorized to perform: sagemaker:InvokeEndpoint on resource: {arn}"
        " because no identity-based policy allows the sagemaker:InvokeEndpoint action")
    assert auth_errors.access_denied(user, "sagemaker:InvokeEndpoint", arn, True).message == (
        f"User: {user} is not authorized to perform: sagemaker:InvokeEndpoint on resource: {arn}"
        " with an explicit deny in an identity-based policy")


# --- Loading at start ------------------------------------------------------------------------

def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "reason"), [
    ("[team-a]\naws_access_key_id = A\n", "has no aws_secret_access_key"),
    ("aws_access_key_id = A\n", "not a shared-credentials file"),
    ("", "no [profile] section"),
    ("[a]\naws_access_key_id=K\naws_secret_access_key=S\n[b]\naws_access_key_id=K\n"
     "aws_secret_access_key=T\n", "share the access key id K"),
    ("[profile a]\naws_access_key_id=K\naws_secret_access_key=S\n", "~/.aws/config syntax"),
])
def test_bad_credentials_files_are_refused(tmp_path: Path, text: str, reason: str) -> None:
    creds = write(tmp_path / "creds.ini", text)
    with pytest.raises(AuthConfigError) as caught:
        load_credentials(creds, "123456789012")
    assert caught.value.path == creds and reason in str(caught.value)
    assert str(caught.value).startswith(str(creds))


def test_bad_policy_files_are_refused_with_the_file(tmp_path: Path) -> None:
    creds = write(tmp_path / "creds.ini", "[team-a]\naws_access_key_id=K\n"
                                          "aws_secret_access_key=S\n")
    policies = tmp_path / "policies"
    bad = write(policies / "team-a.json", '{"Version": "2012-10-17", "Statement": [')
    with pytest.raises(AuthConfigError, match="not valid JSON") as caught:
        load_principals(creds, policies, "1")
    assert caught.value.path == bad
    write(bad, json.dumps({"Statement": [{"Effect": "Allow", "Action": "sagemaker:X",
                                          "Resource": "*",
                                          "Condition": {"StringLik": {"k": "v"}}}]}))
    with pytest.raises(AuthConfigError, match="unsupported condition operator 'StringLik'"):
        load_principals(creds, policies, "1")
    bad.unlink()
    stray = write(policies / "team-b.json", "{}")
    with pytest.raises(AuthConfigError, match=r"no profile \[team-b\]") as caught:
        load_principals(creds, policies, "1")
    assert caught.value.path == stray


def test_install_auth_refuses_at_start_and_mme_serve_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mme.cli import main

    creds = write(tmp_path / "creds.ini", "[team-a]\naws_access_key_id=K\n")
    policies = tmp_path / "policies"
    policies.mkdir()
    settings = Settings.from_env(env={}, auth="sigv4", credentials=creds, policies=policies,
                                 cache_dir=tmp_path / "cache")
    with pytest.raises(AuthConfigError, match="has no aws_secret_access_key"):
        install_auth(FastAPI(), settings)
    with pytest.raises(AuthConfigError, match="needs --policies"):
        install_auth(FastAPI(), Settings.from_env(env={}, auth="sigv4", credentials=creds))
    code = main(["serve", "--auth", "sigv4", "--credentials", str(creds), "--policies",
                 str(policies), "--cache-dir", str(tmp_path / "cache"), "--port", "0"])
    assert code == 2
    assert f"mme serve: {creds}: profile [team-a] has no aws_secret_access_key" in \
        capsys.readouterr().err


def test_auth_off_is_the_default_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    app = FastAPI()
    with caplog.at_level(logging.INFO, logger="emulator.auth"):
        install_auth(app, Settings.from_env(env={}))
    assert Settings.from_env(env={}).auth == "off"
    assert "auth is off" in caplog.text and "without authentication" not in caplog.text
    assert app.user_middleware == []  # nothing on the request path
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="emulator.auth"):
        install_auth(FastAPI(), Settings.from_env(env={}, host="0.0.0.0"))
    warning = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning and "listening on 0.0.0.0 without authentication: anyone who can reach" in \
        warning[0].getMessage()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("my-host")


def test_settings_from_environment(tmp_path: Path) -> None:
    settings = Settings.from_env(env={"MME_AUTH": "sigv4", "MME_CREDENTIALS": "~/c.ini",
                                      "MME_POLICIES": str(tmp_path)})
    assert settings.auth == "sigv4" and settings.policies == tmp_path
    assert settings.credentials == Path("~/c.ini").expanduser()
