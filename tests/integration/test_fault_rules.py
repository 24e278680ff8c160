"""Fault rules (``/_emulator/faults``, ``harness.faults``, the plugin's ``mme_faults``) on a real
emulator with real Tritons, with unmodified boto3 clients: each injected fault reaches the client
as SageMaker's own answer would (code, status, botocore's standard retries), moves the metrics
that answer moves, and removing the rule brings normal answers back."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, WaiterError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from harness.faults import FaultRuleRefused, FaultRules
from tests.client_support import DUMMY_CREDENTIALS, cloudwatch_call, runtime_client
from tests.integration.test_deployments import ROLE
from tests.prometheus_support import get_json
from tests.support import SUITE_ENV, output_of, package, scale_request, wait_for, write_scale_model

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

ENDPOINT = "local"
X = [1.0, 2.0, 3.0, 4.0]
# The module's server: a short invocation timeout, so a stalled download's call gives up soon,
# yet long enough for a cold load (with a fault's delay) on a busy two-core runner.
INVOCATION_TIMEOUT_S = 12.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    root = tmp_path_factory.mktemp("fault-rules")
    store = root / "store"
    store.mkdir()
    # a and b are loaded by the fixture; the others are loaded first by a test of a load fault.
    for name, scale in (("a", 2.0), ("b", 3.0), ("c", 4.0), ("d", 5.0), ("e", 6.0), ("f", 7.0),
                        ("g", 8.0)):
        package(write_scale_model(root / "work" / name, "scale", scale), store / f"{name}.tar.gz",
                "folder")
    with EmulatorServer(Settings.from_env(env=SUITE_ENV, cache_dir=root / "cache", port=0,
                                          model_data=str(store),
                                          invocation_timeout_s=INVOCATION_TIMEOUT_S)) as served:
        for target in ("a.tar.gz", "b.tar.gz"):  # both loaded: every test's calls are hits
            _invoke(runtime_client(served.url), target)
        yield served


@pytest.fixture
def faults(server: EmulatorServer) -> Iterator[FaultRules]:
    rules = FaultRules(server.url)
    yield rules
    rules.clear()


def _retrying_client(url: str) -> Any:
    """A runtime client as users make one: botocore's standard retries, three attempts in all."""
    return boto3.client("sagemaker-runtime", endpoint_url=url, **DUMMY_CREDENTIALS,
                        config=Config(retries={"mode": "standard", "total_max_attempts": 3}))


def _invoke(client: Any, target: str) -> dict[str, Any]:
    answer: dict[str, Any] = client.invoke_endpoint(
        EndpointName=ENDPOINT, TargetModel=target, ContentType="application/json",
        Body=scale_request(X))
    answer["Values"] = output_of(answer["Body"].read()).ravel().tolist()
    return answer


def _counts(server: EmulatorServer) -> dict[str, float]:
    metrics = get_json(f"{server.url}/_emulator/metrics")["Endpoints"][ENDPOINT]["Metrics"]
    return {name: metrics[name]["Sum"] for name in (
        "Invocations", "Invocation4XXErrors", "Invocation5XXErrors", "InvocationModelErrors")}


def _moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


def test_a_throttled_call_is_retried_by_botocore_and_answered_once_the_rule_is_spent(
        server: EmulatorServer, faults: FaultRules) -> None:
    client = _retrying_client(server.url)
    rule = faults.add({"error": "ThrottlingException"}, match={"target_model": "a.*"}, count=2)
    before = _counts(server)

    answer = _invoke(client, "a.tar.gz")

    assert answer["Values"] == [2.0, 4.0, 6.0, 8.0]
    assert answer["ResponseMetadata"]["RetryAttempts"] == 2  # botocore retried both throttles
    (listed,) = faults.rules()
    assert (listed["id"], listed["state"], listed["fired"], listed["remaining"]) == (
        rule, "spent", 2, 0)
    # Three calls arrived: two answered 400 (counted as 4XX, as the client saw them), one 200.
    assert _moved(before, _counts(server)) == {"Invocations": 3, "Invocation4XXErrors": 2,
                                               "Invocation5XXErrors": 0,
                                               "InvocationModelErrors": 0}


def test_throttling_past_botocores_retries_reaches_the_client_and_stops_when_removed(
        server: EmulatorServer, faults: FaultRules) -> None:
    client = _retrying_client(server.url)
    rule = faults.add({"error": {"code": "ThrottlingException", "message": "Rate exceeded"}},
                      match={"endpoint": ENDPOINT})
    with pytest.raises(ClientError) as raised:
        _invoke(client, "b.tar.gz")
    error = raised.value.response
    assert error["Error"] == {"Code": "ThrottlingException", "Message": "Rate exceeded"}
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["ResponseMetadata"]["MaxAttemptsReached"] is True
    assert faults.fired(rule) == 3  # botocore's three attempts, each throttled

    faults.remove(rule)
    assert _invoke(client, "b.tar.gz")["Values"] == [3.0, 6.0, 9.0, 12.0]
    assert faults.rules() == []


def test_a_model_error_is_answered_as_the_container_would_for_the_matching_models_only(
        server: EmulatorServer, faults: FaultRules) -> None:
    client = runtime_client(server.url)
    faults.add({"model_error": {"status": 500, "message": "CUDA out of memory"}},
               match={"target_model": "a*", "variant": "AllTraffic"})
    before = _counts(server)

    with pytest.raises(ClientError) as raised:
        _invoke(client, "a.tar.gz")
    error = raised.value.response
    assert error["Error"]["Code"] == "ModelError"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert (error["OriginalStatusCode"], error["OriginalMessage"]) == (500,
                                                                       "CUDA out of memory")
    assert 'Received server error (500) from primary with message "CUDA out of memory"' in \
        error["Error"]["Message"]
    assert _invoke(client, "b.tar.gz")["Values"] == [3.0, 6.0, 9.0, 12.0]  # not matched
    # The container's 500 counts as AWS counts it: a 5XX and a model error.
    assert _moved(before, _counts(server)) == {"Invocations": 2, "Invocation4XXErrors": 0,
                                               "Invocation5XXErrors": 1,
                                               "InvocationModelErrors": 1}
    faults.clear()
    assert _invoke(client, "a.tar.gz")["Values"] == [2.0, 4.0, 6.0, 8.0]


def test_latency_on_the_model_moves_its_model_latency_and_on_the_call_only_the_wait(
        server: EmulatorServer, faults: FaultRules) -> None:
    client = runtime_client(server.url)
    faults.add({"model_latency_ms": 400}, match={"target_model": "a.tar.gz"}, count=1)
    slow_model = _invoke(client, "a.tar.gz")
    model_us = int(slow_model["ResponseMetadata"]["HTTPHeaders"]["x-mme-model-latency-us"])
    assert model_us >= 400_000  # the model's part took the injected 400 ms more

    faults.add({"latency_ms": 400}, match={"target_model": "a.tar.gz"}, count=1)
    started = time.monotonic()
    slow_call = _invoke(client, "a.tar.gz")
    waited = time.monotonic() - started
    model_us = int(slow_call["ResponseMetadata"]["HTTPHeaders"]["x-mme-model-latency-us"])
    assert waited >= 0.4 and model_us < 400_000  # the call waited; the model did not


def test_a_seeded_probability_breaks_the_same_calls_in_every_run(
        server: EmulatorServer, faults: FaultRules) -> None:
    client = runtime_client(server.url)

    def outcomes() -> list[str]:
        rule = faults.add({"error": "ServiceUnavailable"}, match={"target_model": "b.tar.gz"},
                          probability=0.5, seed=11)
        seen = []
        for _ in range(16):
            try:
                _invoke(client, "b.tar.gz")
                seen.append("ok")
            except ClientError as exc:
                assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 503
                seen.append(exc.response["Error"]["Code"])
        faults.remove(rule)
        return seen

    first = outcomes()
    assert set(first) == {"ok", "ServiceUnavailable"}
    assert outcomes() == first


@pytest.mark.parametrize("protocol", ["smithy-rpc-v2-cbor", "json", "query"])
def test_cloudwatch_answers_an_injected_error_in_the_protocols_own_shape(
        server: EmulatorServer, faults: FaultRules, protocol: str) -> None:
    faults.add({"error": "ServiceUnavailable"},
               match={"service": "cloudwatch", "operation": "ListMetrics"})
    status, parsed = cloudwatch_call(server.url, protocol, "ListMetrics", {})
    assert status == 503 and parsed["Error"]["Code"] == "ServiceUnavailable", parsed
    status, _ = cloudwatch_call(server.url, protocol, "DescribeAlarms", {})
    assert status == 200  # another operation: not matched


def test_the_control_plane_and_autoscaling_answer_injected_errors_as_aws_shapes_them(
        server: EmulatorServer, faults: FaultRules) -> None:
    config = Config(retries={"max_attempts": 1, "mode": "standard"})
    sagemaker = boto3.client("sagemaker", endpoint_url=server.url, config=config,
                             **DUMMY_CREDENTIALS)
    scaling = boto3.client("application-autoscaling", endpoint_url=server.url, config=config,
                           **DUMMY_CREDENTIALS)
    faults.add({"error": "ThrottlingException"}, match={"operation": "ListEndpoints"})
    faults.add({"error": {"code": "ConcurrentUpdateException", "message": "busy"}},
               match={"service": "application-autoscaling"})
    with pytest.raises(ClientError) as raised:
        sagemaker.list_endpoints()
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert sagemaker.list_models()["Models"] == []  # another operation answers as usual
    with pytest.raises(ClientError) as raised:
        scaling.describe_scalable_targets(ServiceNamespace="sagemaker")
    assert raised.value.response["Error"] == {"Code": "ConcurrentUpdateException",
                                              "Message": "busy"}


@pytest.mark.parametrize(("body", "said"), [
    (b"not json", "The body is not JSON"),
    ({"fault": {"error": "NoSuchError"}}, "'NoSuchError' is not an error a call can answer"),
    ({"match": {"operation": "DescribeNothing"}, "fault": {"latency_ms": 5}},
     "has an operation 'DescribeNothing'"),
    ({"match": {"service": "cloudwatch", "variant": "AllTraffic"}, "fault": {"latency_ms": 5}},
     "match.variant names an endpoint's call"),
    ({"match": {"operation": "DescribeEndpoint"}, "fault": {"model_error": {"status": 500}}},
     "applies to InvokeEndpoint only"),
    ({"match": {"target_model": "a[.tar.gz"}, "fault": {"latency_ms": 5}}, "is not a glob"),
    ({"match": {"target_model": "a.tar.gz"}, "fault": {"capacity": "insufficient"}},
     "match of a capacity fault (it meets instances being added, whatever adds them) has no "
     "field 'target_model'"),
    ({"fault": {"load": {"delay_s": -1}}}, "delay_s must be above 0"),
    ({"fault": {"download": {"break_after_bytes": "x"}}}, "is a number of bytes"),
    ({"fault": {"instance": "reboot"}}, 'fault.instance is "kill"'),
    ({"fault": {"latency_ms": 5}, "probability": 0}, "probability must be above 0"),
    ({"fault": {"latency_ms": {"p50": 50, "p99": 10}}}, "p99 at least p50"),
    ({"fault": {"error": "ThrottlingException"}, "when": "now"}, "the rule has no field 'when'"),
])
def test_a_rule_that_could_never_match_is_refused_with_what_to_fix(
        server: EmulatorServer, faults: FaultRules, body: Any, said: str) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"{server.url}/_emulator/faults", data=data, method="POST")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request)
    assert raised.value.code == 400
    assert said in json.loads(raised.value.read())["error"]
    assert faults.rules() == []  # nothing stored
    with pytest.raises(FaultRuleRefused, match="404 There is no fault rule fault-999"):
        faults.remove("fault-999")


def test_the_live_page_tells_a_rules_first_injected_fault(server: EmulatorServer,
                                                          faults: FaultRules) -> None:
    rule = faults.add({"error": "InternalFailure"}, match={"target_model": "b.tar.gz"})
    for _ in range(3):
        with pytest.raises(ClientError):
            _invoke(runtime_client(server.url), "b.tar.gz")
    told = [a for a in get_json(f"{server.url}/_emulator/page/state")["Activity"]
            if a["kind"] == "fault" and a["details"]["Rule"] == rule]
    assert len(told) == 1  # once per rule, however often it fires
    assert told[0]["endpoint"] == ENDPOINT
    assert told[0]["text"] == (f"fault rule {rule} injected InternalFailure (500) into "
                               "sagemaker-runtime InvokeEndpoint of b.tar.gz")


def test_the_plugins_fixture_removes_its_rules_after_a_failing_test(
        server: EmulatorServer, faults: FaultRules, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner="""
        def test_breaks_and_fails(mme_faults):
            mme_faults.add({"error": "ThrottlingException"}, match={"target_model": "a.tar.gz"})
            assert len(mme_faults.rules()) == 1
            raise AssertionError("the test fails with its rule in force")

        def test_the_next_test_finds_none(mme_faults):
            assert mme_faults.rules() == []
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--mme-url={server.url}",
                                f"--mme-endpoint-name={ENDPOINT}")
    result.assert_outcomes(passed=1, failed=1)
    assert faults.rules() == []
    assert _invoke(runtime_client(server.url), "a.tar.gz")["Values"] == [2.0, 4.0, 6.0, 8.0]


def test_a_rule_stops_at_its_expiry(server: EmulatorServer, faults: FaultRules) -> None:
    # Long enough for one warm call on a busy machine; the test then waits it out.
    faults.add({"error": "ThrottlingException"}, match={"target_model": "a.tar.gz"},
               expires_in_s=5)
    client = runtime_client(server.url)
    with pytest.raises(ClientError):
        _invoke(client, "a.tar.gz")
    wait_for(lambda: faults.rules()[0]["state"] == "expired", 30, "the rule to expire")
    assert _invoke(client, "a.tar.gz")["Values"] == [2.0, 4.0, 6.0, 8.0]


def _assert_model_error(server: EmulatorServer, client: Any, target: str, status: int,
                        said: str, counts: dict[str, float]) -> None:
    """A call of ``target`` answers a ModelError: the container's ``status`` and ``said`` in
    its message; the invocation counts named in ``counts`` moved by as much."""
    before = _counts(server)
    with pytest.raises(ClientError) as raised:
        _invoke(client, target)
    error: dict[str, Any] = raised.value.response
    assert error["Error"]["Code"] == "ModelError", error
    assert error["OriginalStatusCode"] == status and said in error["OriginalMessage"], error
    moved = _moved(before, _counts(server))
    assert {name: moved[name] for name in counts} == counts


def test_a_load_that_fails_answers_as_tritons_refusal_and_loads_once_removed(
        server: EmulatorServer, faults: FaultRules) -> None:
    client = runtime_client(server.url)
    rule = faults.add({"load": {"fail": "CUDA driver version is insufficient"}},
                      match={"target_model": "c.tar.gz"})
    # The container's 400 at the load: a 4XX and a model error, as AWS counts a ModelError.
    _assert_model_error(server, client, "c.tar.gz", 400, "CUDA driver version is insufficient",
                        {"Invocations": 1, "Invocation4XXErrors": 1, "Invocation5XXErrors": 0,
                         "InvocationModelErrors": 1})
    assert faults.fired(rule) == 1
    events = get_json(f"{server.url}/_emulator/page/state")["Events"]
    assert any(e["model"] == "c.tar.gz" and e["step"] == "failed" for e in events)
    faults.remove(rule)
    assert _invoke(client, "c.tar.gz")["Values"] == [4.0, 8.0, 12.0, 16.0]


@pytest.mark.parametrize(("fault", "target", "said"), [
    ("out_of_memory", "d.tar.gz", "out of memory"),
    ("disk_full", "e.tar.gz", "no space left on the disk"),
])
def test_a_load_out_of_memory_or_on_a_full_disk_is_the_containers_507(
        server: EmulatorServer, faults: FaultRules, fault: str, target: str, said: str) -> None:
    client = runtime_client(server.url)
    faults.add({"load": fault}, match={"target_model": target}, count=1)
    _assert_model_error(server, client, target, 507, said, {"Invocation5XXErrors": 1})
    assert _invoke(client, target)["ResponseMetadata"]["HTTPStatusCode"] == 200  # spent


def test_a_download_broken_midway_is_the_stores_503_and_the_next_call_downloads_it(
        server: EmulatorServer, faults: FaultRules) -> None:
    client = runtime_client(server.url)
    faults.add({"download": {"break_after_bytes": 64}}, match={"target_model": "f.tar.gz"},
               count=1)
    _assert_model_error(server, client, "f.tar.gz", 503, "connection reset by peer after 64 bytes",
                        {"Invocations": 1, "Invocation4XXErrors": 0, "Invocation5XXErrors": 1,
                         "InvocationModelErrors": 1})
    assert _invoke(client, "f.tar.gz")["Values"] == [7.0, 14.0, 21.0, 28.0]


def test_a_stalled_download_is_not_ready_until_the_rule_goes(
        server: EmulatorServer, faults: FaultRules) -> None:
    client = runtime_client(server.url)
    rule = faults.add({"download": {"stall_after_bytes": 64}}, match={"target_model": "g.tar.gz"})
    with pytest.raises(ClientError) as raised:  # waits out the invocation timeout
        _invoke(client, "g.tar.gz")
    assert raised.value.response["Error"]["Code"] == "ModelNotReadyException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    state = get_json(f"{server.url}/_emulator/models")["Endpoints"][ENDPOINT]["Models"]
    assert {m["TargetModel"]: m["State"] for m in state}.get("g.tar.gz") == "downloading"
    faults.remove(rule)  # the download goes on from where it stalled
    assert wait_for(lambda: _ready(client, "g.tar.gz"), 60, "g.tar.gz to load") == [
        8.0, 16.0, 24.0, 32.0]


def _ready(client: Any, target: str) -> list[float] | None:
    try:
        values: list[float] = _invoke(client, target)["Values"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ModelNotReadyException":
            raise
        return None
    return values


def test_a_slower_load_answers_later(server: EmulatorServer, faults: FaultRules) -> None:
    client = runtime_client(server.url)
    faults.add({"load": {"delay_s": 1.5}}, match={"target_model": "b.tar.gz"})
    faults.add({"error": "InternalFailure"}, match={"operation": "DeleteEndpoint"})  # unused
    get_json(f"{server.url}/_emulator/models")
    urllib.request.urlopen(urllib.request.Request(
        f"{server.url}/_emulator/endpoints/{ENDPOINT}/models/b.tar.gz/unload", method="POST"))
    started = time.monotonic()
    answer = _invoke(client, "b.tar.gz")  # a cold load again, 1.5 s longer
    assert time.monotonic() - started >= 1.5
    assert answer["ResponseMetadata"]["HTTPHeaders"]["x-mme-model-cache-hit"] == "0"


def _serving_one_model(start_emulator: Any, store: Any,
                       tmp_path: Any) -> tuple[EmulatorServer, Any, int]:
    """A server of its own with a.tar.gz loaded: the server, a client, its Triton's pid."""
    package(write_scale_model(tmp_path / "work", "scale", 2.0), store / "a.tar.gz", "folder")
    own = start_emulator(model_data=str(store))
    client = runtime_client(own.url)
    _invoke(client, "a.tar.gz")
    return own, client, _triton_pid(own)


def test_an_instance_killed_under_a_call_fails_it_and_its_triton_comes_back(
        start_emulator: Any, store: Any, tmp_path: Any) -> None:
    own, client, triton = _serving_one_model(start_emulator, store, tmp_path)
    faults = FaultRules(own.url)
    faults.add({"instance": "kill"}, match={"instance": "i-1"}, count=1)
    with pytest.raises(ClientError) as raised:
        _invoke(client, "a.tar.gz")
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] >= 400
    # The watchdog starts a new Triton; the model loads again on the next call.
    assert wait_for(lambda: _ready_or_failed(client, "a.tar.gz"), 120,
                    "a.tar.gz served again") == [2.0, 4.0, 6.0, 8.0]
    assert _triton_pid(own) != triton


def test_an_instance_hung_holds_its_calls_until_it_resumes(
        start_emulator: Any, store: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    own, client, triton = _serving_one_model(start_emulator, store, tmp_path)
    faults = FaultRules(own.url)
    faults.add({"instance": {"hang_s": 2}}, count=1)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="emulator"):
        assert _invoke(client, "a.tar.gz")["Values"] == [2.0, 4.0, 6.0, 8.0]
    held_s = time.monotonic() - started
    fired = [r.getMessage() for r in caplog.records if "fault" in r.getMessage()]
    # Held while its Triton was stopped; if not, the rule's state and the log say who took it.
    assert held_s >= 2, (held_s, triton, faults.rules(), fired)
    assert _triton_pid(own) == triton  # resumed, not replaced


def _triton_pid(server: EmulatorServer) -> int:
    from emulator.hosting.instance_faults import triton_pid

    (instance,) = server.app.state.registry.get(ENDPOINT).instances
    pid = triton_pid(instance)
    assert pid is not None
    return pid


def _ready_or_failed(client: Any, target: str) -> list[float] | None:
    try:
        values: list[float] = _invoke(client, target)["Values"]
    except ClientError:
        return None
    return values


def _endpoint_of_store(server: EmulatorServer, name: str, store: Any) -> Any:
    sagemaker = boto3.client("sagemaker", endpoint_url=server.url,
                             config=Config(retries={"max_attempts": 1}), **DUMMY_CREDENTIALS)
    sagemaker.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": "triton", "Mode": "MultiModel", "ModelDataUrl": store.as_uri() + "/"})
    sagemaker.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.m5.large",
        "InitialInstanceCount": 1}])
    return sagemaker


def test_no_capacity_fails_a_create_and_keeps_a_scale_out_from_happening(
        server: EmulatorServer, faults: FaultRules, tmp_path: Any) -> None:
    store = tmp_path / "store"
    store.mkdir()
    package(write_scale_model(tmp_path / "work", "scale", 2.0), store / "a.tar.gz", "folder")
    sagemaker = _endpoint_of_store(server, "capacity", store)
    faults.add({"capacity": "insufficient"}, match={"endpoint": "capacity"}, count=1)
    sagemaker.create_endpoint(EndpointName="capacity", EndpointConfigName="capacity")
    with pytest.raises(WaiterError):
        sagemaker.get_waiter("endpoint_in_service").wait(
            EndpointName="capacity", WaiterConfig={"Delay": 0.2, "MaxAttempts": 300})
    described = sagemaker.describe_endpoint(EndpointName="capacity")
    assert described["EndpointStatus"] == "Failed"
    assert described["FailureReason"] == ("Unable to provision requested ML compute capacity. "
                                          "Please retry using a different ML instance type.")
    sagemaker.delete_endpoint(EndpointName="capacity")
    wait_for(lambda: not sagemaker.list_endpoints(NameContains="capacity")["Endpoints"], 60,
             "the failed endpoint deleted")

    # Created once the rule is spent; then a scale-out meets no capacity and changes nothing.
    sagemaker.create_endpoint(EndpointName="capacity", EndpointConfigName="capacity")
    sagemaker.get_waiter("endpoint_in_service").wait(
        EndpointName="capacity", WaiterConfig={"Delay": 0.2, "MaxAttempts": 600})
    faults.add({"capacity": "insufficient"}, match={"endpoint": "capacity",
                                                    "variant": "AllTraffic"})
    sagemaker.update_endpoint_weights_and_capacities(
        EndpointName="capacity", DesiredWeightsAndCapacities=[
            {"VariantName": "AllTraffic", "DesiredInstanceCount": 2}])
    described = wait_for(lambda: (lambda d: d if d["EndpointStatus"] == "InService" else None)(
        sagemaker.describe_endpoint(EndpointName="capacity")), 120, "the scale-out's end")
    assert described["FailureReason"].startswith("Unable to provision requested ML compute")
    (variant,) = described["ProductionVariants"]
    assert variant["CurrentInstanceCount"] == 1
    sagemaker.delete_endpoint(EndpointName="capacity")


def test_no_capacity_fails_a_components_copies(server: EmulatorServer, faults: FaultRules,
                                               tmp_path: Any) -> None:
    from tests.component_support import create_component_endpoint

    package(write_scale_model(tmp_path / "work", "scale", 2.0), tmp_path / "m.tar.gz", "folder")
    sagemaker = boto3.client("sagemaker", endpoint_url=server.url,
                             config=Config(retries={"max_attempts": 1}), **DUMMY_CREDENTIALS)
    sagemaker.create_model(ModelName="ic-model", ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": "triton", "ModelDataUrl": (tmp_path / "m.tar.gz").as_uri()})
    create_component_endpoint(sagemaker, "ic-capacity")
    rule = faults.add({"capacity": "insufficient"}, match={"inference_component": "ic-none"})
    sagemaker.create_inference_component(
        InferenceComponentName="ic-none", EndpointName="ic-capacity", VariantName="AllTraffic",
        Specification={"ModelName": "ic-model", "ComputeResourceRequirements": {
            "NumberOfCpuCoresRequired": 1, "MinMemoryRequiredInMb": 512}},
        RuntimeConfig={"CopyCount": 1})
    described = wait_for(lambda: (lambda d: d if d["InferenceComponentStatus"] == "Failed"
                                  else None)(sagemaker.describe_inference_component(
                                      InferenceComponentName="ic-none")), 60, "ic-none Failed")
    assert "Unable to provision requested ML compute capacity" in described["FailureReason"]
    assert faults.fired(rule) == 1
    sagemaker.delete_inference_component(InferenceComponentName="ic-none")
    wait_for(lambda: not sagemaker.list_inference_components(
        EndpointNameEquals="ic-capacity")["InferenceComponents"], 60, "ic-none deleted")
    sagemaker.delete_endpoint(EndpointName="ic-capacity")
