"""Hostile input end to end, and a sweep of the newer surfaces in the spirit of
``test_hardening.py``: the fleet's capacity API, multi-container requests, Application Auto
Scaling, CloudWatch (all three protocols), auth and the live page each get hostile input over
raw HTTP (what boto3 refuses to send) and through boto3; every answer is the service's own error
shape, never a 500, a traceback or a hang, and what the services hold is the same afterwards.

One emulator serves the module (a multi-model endpoint and a single-model one); the auth sweep
has its own, with no model (no Triton). ``mme serve`` runs as a process where the test is about
the process: its exit status, its stop.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import socket
import termios
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from xml.etree import ElementTree

import boto3
import cbor2
import pytest
from botocore.config import Config

from emulator.server import EmulatorServer
from emulator.settings import Settings
from harness.live_endpoint import EmulatorProcess, EmulatorStartError
from tests.client_support import DUMMY_CREDENTIALS, runtime_client
from tests.multi_container_support import TRITON_IMAGE, deploy
from tests.support import SUITE_ENV, package, scale_request, wait_until, write_scale_model

KEY = {"ServiceNamespace": "sagemaker", "ResourceId": "endpoint/local/variant/AllTraffic",
       "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}
TRACKING = {"TargetValue": 100.0, "DisableScaleIn": True, "PredefinedMetricSpecification": {
    "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}}
DEEP = b"[" * 100_000 + b"]" * 100_000
ANSWER_BOUND_S = 30  # every answer comes well within it; without a bound a hang would stall CI


def _client(service: str, url: str) -> Any:
    return boto3.client(service, endpoint_url=url, **DUMMY_CREDENTIALS,
                        config=Config(retries={"max_attempts": 1, "mode": "standard"}))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    root = tmp_path_factory.mktemp("hostile")
    store = root / "store"
    store.mkdir()
    package(write_scale_model(root / "m", "m", 2.0), store / "m.tar.gz", "folder")
    single = package(write_scale_model(root / "add_one", "add_one", 1.0),
                     root / "single" / "add_one.tar.gz", "folder")
    server = EmulatorServer(Settings.from_env(
        env=SUITE_ENV, model_data=str(store), endpoint_name="local", cache_dir=root / "cache",
        port=0)).start()
    try:
        deploy(_client("sagemaker", server.url), "single", [
            {"Image": TRITON_IMAGE, "Mode": "SingleModel", "ModelDataUrl": f"file://{single}"}])
        yield server
    finally:
        server.stop()


# --- raw HTTP ------------------------------------------------------------------------------------

class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"{self.status} {self.body[:300]!r}"


def send(url: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
         method: str | None = None) -> Answer:
    request = urllib.request.Request(url + path, data=body, headers=headers or {},
                                     method=method or ("POST" if body is not None else "GET"))
    try:
        with urllib.request.urlopen(request, timeout=ANSWER_BOUND_S) as response:
            return Answer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, dict(error.headers), error.read())


def sagemaker(url: str, operation: str, params: Any) -> Answer:
    body = params if isinstance(params, bytes) else json.dumps(params).encode()
    return send(url, "/", body, {"X-Amz-Target": f"SageMaker.{operation}",
                                 "Content-Type": "application/x-amz-json-1.1"})


def scaling(url: str, operation: str, params: Any) -> Answer:
    body = params if isinstance(params, bytes) else json.dumps(params).encode()
    return send(url, "/", body, {"X-Amz-Target": f"AnyScaleFrontendService.{operation}",
                                 "Content-Type": "application/x-amz-json-1.1"})


def cloudwatch_json(url: str, operation: str, params: Any) -> Answer:
    body = params if isinstance(params, bytes) else json.dumps(params).encode()
    return send(url, "/", body, {"X-Amz-Target": f"GraniteServiceVersion20100801.{operation}",
                                 "Content-Type": "application/x-amz-json-1.0"})


def cloudwatch_cbor(url: str, operation: str, params: Any) -> Answer:
    body = params if isinstance(params, bytes) else cbor2.dumps(params)
    return send(url, f"/service/GraniteServiceVersion20100801/operation/{operation}", body,
                {"smithy-protocol": "rpc-v2-cbor", "Content-Type": "application/cbor",
                 "Accept": "application/cbor"})


def cloudwatch_query(url: str, form: dict[str, str] | str) -> Answer:
    body = form if isinstance(form, str) else urlencode(form)
    return send(url, "/", body.encode(), {"Content-Type": "application/x-www-form-urlencoded"})


def json_code(answer: Answer) -> str:
    return str(answer.json()["__type"])


def query_code(answer: Answer) -> str:
    namespace = "{http://monitoring.amazonaws.com/doc/2010-08-01/}"
    code = ElementTree.fromstring(answer.body).find(f"{namespace}Error/{namespace}Code")
    assert code is not None and code.text, answer
    return code.text


def cbor_code(answer: Answer) -> str:
    return str(cbor2.loads(answer.body)["__type"])


# --- item 7: the single-model container's answer names its model ---------------------------------

def test_a_single_model_answer_names_the_model_not_its_installed_name(
        served: EmulatorServer) -> None:
    runtime = runtime_client(served.url)
    single = runtime.invoke_endpoint(EndpointName="single", ContentType="application/json",
                                     Body=scale_request([1, 2, 3, 4]))
    # SageMaker's Triton names the tarball's model; the emulator installs it as add_one--<key>.
    assert json.loads(single["Body"].read())["model_name"] == "add_one"
    multi = runtime.invoke_endpoint(EndpointName="local", TargetModel="m.tar.gz",
                                    ContentType="application/json",
                                    Body=scale_request([1, 2, 3, 4]))
    assert json.loads(multi["Body"].read())["model_name"] == "m.tar.gz"  # unchanged: TargetModel


# --- item 7: Application Auto Scaling's quotas and SageMaker's capacity rule ------------------

def test_autoscaling_quotas_and_a_variants_capacity_of_at_least_one(
        served: EmulatorServer) -> None:
    asg = _client("application-autoscaling", served.url)
    for minimum, maximum in ((0, 2), (1, 0), (-1, 2)):
        with pytest.raises(asg.exceptions.ValidationException) as refused:
            asg.register_scalable_target(**KEY, MinCapacity=minimum, MaxCapacity=maximum)
        assert "at least 1" in refused.value.response["Error"]["Message"]
    assert asg.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []
    asg.register_scalable_target(**KEY, MinCapacity=1, MaxCapacity=2)
    try:
        for i in range(50):
            asg.put_scaling_policy(**KEY, PolicyName=f"p{i:02}", PolicyType="TargetTrackingScaling",
                                   TargetTrackingScalingPolicyConfiguration=TRACKING)
        with pytest.raises(asg.exceptions.LimitExceededException):
            asg.put_scaling_policy(**KEY, PolicyName="p50", PolicyType="TargetTrackingScaling",
                                   TargetTrackingScalingPolicyConfiguration=TRACKING)
        # an existing policy may still be updated at the quota
        asg.put_scaling_policy(**KEY, PolicyName="p00", PolicyType="TargetTrackingScaling",
                               TargetTrackingScalingPolicyConfiguration={**TRACKING,
                                                                         "TargetValue": 50.0})
        first = asg.describe_scaling_policies(ServiceNamespace="sagemaker")
        assert len(first["ScalingPolicies"]) == 10 and first["NextToken"]  # its default page
        pages = asg.get_paginator("describe_scaling_policies").paginate(
            ServiceNamespace="sagemaker")
        names = [p["PolicyName"] for page in pages for p in page["ScalingPolicies"]]
        assert sorted(names) == [f"p{i:02}" for i in range(50)]
        with pytest.raises(asg.exceptions.ValidationException):
            asg.describe_scaling_policies(ServiceNamespace="sagemaker", MaxResults=11)
        with pytest.raises(asg.exceptions.ValidationException):
            asg.describe_scalable_targets(ServiceNamespace="sagemaker", MaxResults=51)
    finally:
        asg.deregister_scalable_target(**KEY)
    assert asg.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"] == []


# --- items 6-7: GetMetricData's queries over the query protocol ---------------------------------

def _get_metric_data_form(queries: int) -> dict[str, str]:
    form = {"Action": "GetMetricData", "Version": "2010-08-01",
            "StartTime": "2024-01-01T00:00:00Z", "EndTime": "2024-01-01T01:00:00Z"}
    for i in range(1, queries + 1):
        key = f"MetricDataQueries.member.{i}"
        form.update({f"{key}.Id": f"q{i}", f"{key}.MetricStat.Period": "60",
                     f"{key}.MetricStat.Stat": "Sum",
                     f"{key}.MetricStat.Metric.Namespace": "AWS/SageMaker",
                     f"{key}.MetricStat.Metric.MetricName": "Invocations"})
    return form


def test_get_metric_data_takes_at_most_500_queries(served: EmulatorServer) -> None:
    """1,500 queries parsed for 17-19 s while /ping and every invocation waited; CloudWatch
    takes at most 500 per call."""
    refused = cloudwatch_query(served.url, _get_metric_data_form(1500))
    assert refused.status == 400 and query_code(refused) == "InvalidParameterValue", refused
    assert b"must not have a size greater than 500" in refused.body
    answered = cloudwatch_query(served.url, _get_metric_data_form(500))
    assert answered.status == 200, answered
    assert answered.body.count(b"<Id>") == 500


# --- the sweep --------------------------------------------------------------------------------

def _state(url: str) -> dict[str, Any]:
    """What the services hold, as their APIs describe it."""
    sm, asg = _client("sagemaker", url), _client("application-autoscaling", url)
    endpoints = {}
    for name in ("local", "single"):
        described = sm.describe_endpoint(EndpointName=name)
        endpoints[name] = (described["EndpointStatus"], [
            (v["VariantName"], v["CurrentWeight"], v["CurrentInstanceCount"])
            for v in described["ProductionVariants"]])
    return {
        "models": sorted(m["ModelName"] for m in sm.list_models()["Models"]),
        "configs": sorted(c["EndpointConfigName"]
                          for c in sm.list_endpoint_configs()["EndpointConfigs"]),
        "endpoints": endpoints,
        "targets": asg.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"],
        "policies": asg.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"],
        "loaded": sorted(json.loads(send(url, "/_emulator/models").body)),
    }


Case = tuple[str, Callable[[str], Answer], Callable[[Answer], str], str]


def _sweep_cases() -> list[Case]:
    """(name, request, how to read its error code, the code AWS answers)."""
    variant = {"VariantName": "AllTraffic", "ModelName": "m", "InitialInstanceCount": 1,
               "InstanceType": "ml.m5.large"}
    statistics = {"Namespace": "AWS/SageMaker", "MetricName": "Invocations", "Period": 60,
                  "Statistics": ["Sum"], "StartTime": 0, "EndTime": 60}
    nan_statistics = json.dumps(statistics).replace('"EndTime": 60', '"EndTime": Infinity')
    cases: list[Case] = [
        # the fleet: capacities and weights
        ("weights: a weight over a 32-bit float", lambda u: sagemaker(
            u, "UpdateEndpointWeightsAndCapacities", {"EndpointName": "local",
                                                      "DesiredWeightsAndCapacities": [{
                                                          "VariantName": "AllTraffic",
                                                          "DesiredWeight": 1e39}]}),
         json_code, "ValidationException"),
        ("weights: NaN", lambda u: sagemaker(
            u, "UpdateEndpointWeightsAndCapacities",
            b'{"EndpointName": "local", "DesiredWeightsAndCapacities": [{"VariantName": '
            b'"AllTraffic", "DesiredWeight": NaN}]}'), json_code, "ValidationException"),
        ("weights: an unknown variant", lambda u: sagemaker(
            u, "UpdateEndpointWeightsAndCapacities", {
                "EndpointName": "local", "DesiredWeightsAndCapacities": [
                    {"VariantName": "Nope", "DesiredInstanceCount": 2}]}),
         json_code, "ValidationException"),
        ("weights: no instances", lambda u: sagemaker(
            u, "UpdateEndpointWeightsAndCapacities", {
                "EndpointName": "local", "DesiredWeightsAndCapacities": [
                    {"VariantName": "AllTraffic", "DesiredInstanceCount": 0}]}),
         json_code, "ValidationException"),
        ("config: weights over a 32-bit float", lambda u: sagemaker(
            u, "CreateEndpointConfig", {"EndpointConfigName": "heavy", "ProductionVariants": [
                {**variant, "VariantName": n, "InitialVariantWeight": 1.7e308} for n in "ab"]}),
         json_code, "ValidationException"),
        ("control plane: nested 100,000 deep", lambda u: sagemaker(u, "CreateModel", DEEP),
         json_code, "SerializationException"),
        ("control plane: CreationTimeAfter NaN", lambda u: sagemaker(
            u, "ListModels", b'{"CreationTimeAfter": NaN}'), json_code, "ValidationException"),
        # multi-container: hostnames that cannot be, on a model of several containers
        ("multi-container: duplicate hostnames", lambda u: sagemaker(
            u, "CreateModel", {"ModelName": "dup", "ExecutionRoleArn":
                               "arn:aws:iam::123456789012:role/r", "Containers": [
                                   {"Image": TRITON_IMAGE, "ContainerHostname": "a",
                                    "ModelDataUrl": "file:///nonexistent/a.tar.gz"},
                                   {"Image": TRITON_IMAGE, "ContainerHostname": "a",
                                    "ModelDataUrl": "file:///nonexistent/b.tar.gz"}],
                               "InferenceExecutionConfig": {"Mode": "Direct"}}),
         json_code, "ValidationException"),
        # Application Auto Scaling
        ("scaling: nested 100,000 deep", lambda u: scaling(u, "RegisterScalableTarget", DEEP),
         json_code, "SerializationException"),
        ("scaling: MinCapacity 0", lambda u: scaling(
            u, "RegisterScalableTarget", {**KEY, "MinCapacity": 0, "MaxCapacity": 2}),
         json_code, "ValidationException"),
        ("scaling: a NextToken of 1e999", lambda u: scaling(
            u, "DescribeScalableTargets", {"ServiceNamespace": "sagemaker",
                                           "NextToken": "eyJvZmZzZXQiOiAxZTk5OX0="}),
         json_code, "InvalidNextTokenException"),
        ("scaling: MaxResults 0", lambda u: scaling(
            u, "DescribeScalingActivities", {"ServiceNamespace": "sagemaker", "MaxResults": 0}),
         json_code, "ValidationException"),
        ("scaling: TargetValue NaN", lambda u: scaling(
            u, "PutScalingPolicy", json.dumps({
                **KEY, "PolicyName": "p", "PolicyType": "TargetTrackingScaling",
                "TargetTrackingScalingPolicyConfiguration": {**TRACKING,
                                                             "TargetValue": float("nan")}
            }).encode()), json_code, "ValidationException"),
        ("scaling: not an object", lambda u: scaling(u, "DescribeScalableTargets", b"[1]"),
         json_code, "SerializationException"),
        # CloudWatch, JSON 1.0
        ("cloudwatch json: EndTime Infinity", lambda u: cloudwatch_json(
            u, "GetMetricStatistics", nan_statistics.encode()),
         json_code, "InvalidParameterValueException"),
        ("cloudwatch json: nested 100,000 deep", lambda u: cloudwatch_json(
            u, "GetMetricData", DEEP), json_code, "SerializationException"),
        ("cloudwatch json: 501 queries", lambda u: cloudwatch_json(u, "GetMetricData", {
            "StartTime": 0, "EndTime": 60, "MetricDataQueries": [
                {"Id": f"q{i}", "MetricStat": {"Metric": {"Namespace": "n", "MetricName": "m"},
                                               "Period": 60, "Stat": "Sum"}}
                for i in range(501)]}), json_code, "InvalidParameterValueException"),
        # CloudWatch, CBOR
        ("cloudwatch cbor: StartTime NaN", lambda u: cloudwatch_cbor(
            u, "GetMetricStatistics", {**statistics, "StartTime": float("nan")}),
         cbor_code, "InvalidParameterValueException"),
        ("cloudwatch cbor: bytes for a string", lambda u: cloudwatch_cbor(
            u, "ListMetrics", {"Namespace": b"x"}), cbor_code, "InvalidParameterValueException"),
        ("cloudwatch cbor: not CBOR", lambda u: cloudwatch_cbor(u, "ListMetrics", b"\xff\xff"),
         cbor_code, "SerializationException"),
        # CloudWatch, query
        ("cloudwatch query: StartTime NaN", lambda u: cloudwatch_query(u, {
            "Action": "GetMetricStatistics", "Version": "2010-08-01", "Namespace": "n",
            "MetricName": "m", "Period": "60", "Statistics.member.1": "Sum",
            "StartTime": "NaN", "EndTime": "Infinity"}), query_code, "InvalidParameterValue"),
        ("cloudwatch query: a key 100,000 parts deep", lambda u: cloudwatch_query(
            u, "Action=ListMetrics&Version=2010-08-01&" + "a." * 100_000 + "b=1&Namespace=%3A"),
         query_code, "InvalidParameterValue"),
        ("cloudwatch query: an unknown version", lambda u: cloudwatch_query(
            u, {"Action": "ListMetrics", "Version": "2099-01-01"}),
         query_code, "InvalidParameterValue"),
    ]
    return cases


def test_hostile_input_to_the_newer_surfaces_gets_aws_errors_and_changes_nothing(
        served: EmulatorServer) -> None:
    before = _state(served.url)
    wrong = []
    for name, request, code_of, code in _sweep_cases():
        answer = request(served.url)
        try:
            got = code_of(answer)
        except Exception as exc:  # noqa: BLE001 - an answer not in the protocol's shape
            got = f"unreadable ({exc!r})"
        if not 400 <= answer.status < 500 or got != code or b"Traceback" in answer.body:
            wrong.append(f"{name}: expected {code}, got {answer!r}")
    assert not wrong, "\n".join(wrong)
    assert _state(served.url) == before


def test_the_page_and_the_emulators_routes_refuse_what_they_do_not_serve(
        served: EmulatorServer) -> None:
    """Not AWS APIs, so their errors are the emulator's own JSON; still never a 500."""
    for path, method in (("/_emulator/page/..%2F..%2F..%2Fetc%2Fpasswd", "GET"),
                         ("/_emulator/page/%00", "GET"), ("/_emulator/page/app.jss", "GET"),
                         ("/_emulator/page/state", "POST"), ("/_emulator/page/stream", "PUT"),
                         ("/_emulator/" + "x" * 10_000, "GET"),
                         ("/_emulator/models?" + "a=1&" * 5_000, "GET")):
        answer = send(served.url, path, b"" if method != "GET" else None, method=method)
        assert 200 <= answer.status < 500, f"{method} {path[:60]}: {answer!r}"
        assert b"Traceback" not in answer.body and b"root:" not in answer.body


# --- auth: malformed signatures are the service's auth errors -----------------------------------

@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    """--auth sigv4 and no model: the SigV4 layer alone, no Triton."""
    root = tmp_path_factory.mktemp("guarded")
    credentials = root / "credentials"
    credentials.write_text("[admin]\naws_access_key_id = AKIAADMIN0000000000\n"
                           "aws_secret_access_key = secret\n")
    policies = root / "policies"
    policies.mkdir()
    (policies / "admin.json").write_text(json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    with EmulatorServer(Settings.from_env(env=SUITE_ENV, cache_dir=root / "cache", port=0,
                                          auth="sigv4", credentials=credentials,
                                          policies=policies)) as server:
        yield server


MALFORMED_AUTHORIZATION = [
    "AWS4-HMAC-SHA256",
    "AWS4-HMAC-SHA256 Credential=",
    "AWS4-HMAC-SHA256 Credential=AKIAADMIN0000000000, SignedHeaders=, Signature=",
    "AWS4-HMAC-SHA256 Credential=AKIAADMIN0000000000/20240101/us-east-1/sagemaker/aws4_request,"
    " SignedHeaders=host;x-amz-date, Signature=zz",
    "AWS4-HMAC-SHA256 Credential=AKIAADMIN0000000000/" + "9" * 5000 + "/x/y/aws4_request, "
    "SignedHeaders=host, Signature=00",
    "AWS4-HMAC-SHA256 Credential=AKIAADMIN0000000000/20240101/us-east-1/sagemaker/aws4_request, "
    "SignedHeaders=" + ";".join(f"h{i}" for i in range(2000)) + ", Signature=00",
    "Bearer abc", "AWS4-HMAC-SHA256 Credential=\u00e9\u00e9/\u00e9, Signature=\u00e9",
]


@pytest.mark.parametrize("amz_date", ["20240101T000000Z", "garbage", "99999999T999999Z", ""])
def test_malformed_signatures_are_auth_errors_on_every_api(guarded: EmulatorServer,
                                                           amz_date: str) -> None:
    targets = [("/", {"X-Amz-Target": "SageMaker.ListModels",
                      "Content-Type": "application/x-amz-json-1.1"}, b"{}"),
               ("/", {"X-Amz-Target": "AnyScaleFrontendService.DescribeScalableTargets",
                      "Content-Type": "application/x-amz-json-1.1"},
                b'{"ServiceNamespace": "sagemaker"}'),
               ("/", {"Content-Type": "application/x-www-form-urlencoded"},
                b"Action=ListMetrics&Version=2010-08-01"),
               ("/endpoints/local/invocations", {"Content-Type": "application/json"}, b"{}")]
    wrong = []
    for authorization in MALFORMED_AUTHORIZATION:
        for path, headers, body in targets:
            answer = send(guarded.url, path, body, {
                **headers, "Authorization": authorization.encode("utf-8").decode("latin-1"),
                "X-Amz-Date": amz_date})
            if not 400 <= answer.status < 500 or b"Traceback" in answer.body:
                wrong.append(f"{path} {headers.get('X-Amz-Target', '')} {authorization[:60]}: "
                             f"{answer!r}")
    assert not wrong, "\n".join(wrong)


# --- mme serve: a stop no client holds up, a policy file nested too deep -------------------------

def _serve(tmp_path: Path, *flags: str) -> EmulatorProcess:
    """``mme serve`` with ``flags``, not started yet; its log is ``tmp_path / "serve.log"``."""
    return EmulatorProcess({"MME_CACHE_DIR": str(tmp_path / "cache")}, tmp_path / "serve.log",
                           flags=flags,
                           environment={k: v for k, v in os.environ.items()
                                        if not k.startswith("MME_")})


def _unread_bytes(sock: socket.socket) -> int:
    count = array.array("i", [0])
    fcntl.ioctl(sock, termios.FIONREAD, count)
    return count[0]


def test_clients_that_pipeline_and_never_read_do_not_hold_mme_serve_past_sigterm(
        tmp_path: Path, store: Path) -> None:
    """50 page streams pipelined on one connection (each streams for 2 s; uvicorn ran them all,
    one after the other, after SIGTERM), and 1,000 pipelined requests for the page's script on
    a connection whose client reads nothing (the answers fill the socket; the one being written
    then waited for room for ever)."""
    server = _serve(tmp_path, "--model-data", str(store))
    streams = socket.socket()
    stalled = socket.socket()
    try:
        port = server.start().port
        streams.connect(("127.0.0.1", port))
        streams.sendall(b"GET /_emulator/page/stream HTTP/1.1\r\nHost: x\r\n\r\n" * 50)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: small
        stalled.connect(("127.0.0.1", port))
        stalled.sendall(b"GET /_emulator/page/app.js HTTP/1.1\r\nHost: x\r\n\r\n" * 1000)
        wait_until(lambda: _unread_bytes(streams) > 0 and _unread_bytes(stalled) > 0,
                   what="both connections answering")
        # A bound on a wait that, without the fix, never ends (2 s of stream, 2 s of a client
        # taking nothing, then the Triton's stop).
        assert server.stop(60) == 0, server.log_path.read_text()
    finally:
        streams.close()
        stalled.close()
        server.stop()


def test_a_policy_file_nested_too_deep_is_exit_2_naming_the_file(tmp_path: Path,
                                                                  store: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("[alice]\naws_access_key_id = AKIAALICE000000000\n"
                           "aws_secret_access_key = secret\n")
    policies = tmp_path / "policies"
    policies.mkdir()
    policy = policies / "alice.json"
    policy.write_text('{"Version": "2012-10-17", "Statement": '
                      + "[" * 100_000 + "]" * 100_000 + "}")
    server = _serve(tmp_path, "--model-data", str(store), "--auth", "sigv4",
                    "--credentials", str(credentials), "--policies", str(policies))
    with pytest.raises(EmulatorStartError, match="exited with code 2 while starting"):
        server.start()
    text = server.log_path.read_text()
    assert f"mme serve: {policy}: JSON nested too deeply" in text, text
    assert "Traceback" not in text
