"""Where no Triton is needed: hostile input to the wire layers of the newer
surfaces (CloudWatch, Application Auto Scaling, the control plane, IAM policy files), the
router's weighted draw, and a BYOC container that answers with bytes that are not HTTP.

Each test fails without its fix. The end-to-end sweep (boto3 and raw HTTP against a running
emulator) is ``tests/integration/test_hostile_surfaces.py``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import cbor2
import pytest

from emulator.auth.credentials import AuthConfigError, load_principals
from emulator.autoscaling import wire as scaling_wire
from emulator.clock import Clock
from emulator.cloudwatch import wire as cloudwatch_wire
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError
from emulator.cloudwatch.series import MetricStore
from emulator.cloudwatch.service import CloudWatchService
from emulator.containers.sagemaker import ContainerUnreachable, SageMakerContainer
from emulator.contract import botocore_validation, control_plane
from emulator.contract.runtime_errors import ModelError
from emulator.hosting.instance import ErrorContext
from emulator.hosting.multi_container import ServeMember
from emulator.hosting.routing import Router

DEEP_ARRAY = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
STATISTICS = {"Namespace": "AWS/SageMaker", "MetricName": "Invocations", "Period": 60,
              "Statistics": ["Sum"], "StartTime": 0, "EndTime": 60}


# --- CloudWatch: GetMetricData's queries over the query protocol, in linear time -----------------

def _query_form(queries: int) -> bytes:
    form = {"Action": "GetMetricData", "Version": "2010-08-01",
            "StartTime": "2024-01-01T00:00:00Z", "EndTime": "2024-01-01T01:00:00Z"}
    for i in range(1, queries + 1):
        key = f"MetricDataQueries.member.{i}"
        form.update({
            f"{key}.Id": f"q{i}", f"{key}.MetricStat.Period": "60", f"{key}.MetricStat.Stat": "Sum",
            f"{key}.MetricStat.Metric.Namespace": "AWS/SageMaker",
            f"{key}.MetricStat.Metric.MetricName": "Invocations",
            f"{key}.MetricStat.Metric.Dimensions.member.1.Name": "EndpointName",
            f"{key}.MetricStat.Metric.Dimensions.member.1.Value": "local",
        })
    return urlencode(form).encode()


def _fastest_parse(body: bytes) -> float:
    """The parse's least CPU time of this thread: other processes on a busy machine (a test
    suite's other workers) take none of it, where they stretch the time on the clock."""
    best = float("inf")
    for _ in range(5):
        started = time.thread_time()
        operation, params = cloudwatch_wire.parse_query(body)
        best = min(best, time.thread_time() - started)
    assert operation == "GetMetricData" and len(params["MetricDataQueries"]) > 100
    return best


def test_query_protocol_parse_time_grows_linearly_with_the_queries() -> None:
    """Each key was looked up by scanning every key: 1,500 queries held the event loop (and
    /ping, and every invocation) for 17-19 s. Ten times the queries must cost about ten times
    the time, not a hundred (a ratio of two runs on the same machine, not an absolute time)."""
    small, large = _fastest_parse(_query_form(150)), _fastest_parse(_query_form(1500))
    assert large / small < 30, f"150 queries {small:.4f} s, 1,500 queries {large:.4f} s"


def test_a_query_protocol_form_is_read_back_whole() -> None:
    """The faster parse reads the same structure: lists, nested structures, numbers."""
    operation, params = cloudwatch_wire.parse_query(_query_form(2))
    assert operation == "GetMetricData"
    assert params["MetricDataQueries"][1] == {
        "Id": "q2", "MetricStat": {"Period": 60, "Stat": "Sum", "Metric": {
            "Namespace": "AWS/SageMaker", "MetricName": "Invocations",
            "Dimensions": [{"Name": "EndpointName", "Value": "local"}]}}}


# --- CloudWatch: timestamps that are no instants --------------------------------------------------

@pytest.mark.parametrize("member", ["StartTime", "EndTime"])
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e300"])
def test_a_timestamp_that_is_no_instant_is_invalid_parameter_value(member: str,
                                                                   value: str) -> None:
    body = json.dumps(STATISTICS).replace(f'"{member}": {STATISTICS[member]}',
                                          f'"{member}": {value}').encode()
    with pytest.raises(CloudWatchError) as caught:
        cloudwatch_wire.parse_json("GraniteServiceVersion20100801.GetMetricStatistics", body)
    assert (caught.value.code, caught.value.status) == ("InvalidParameterValue", 400)
    assert member[0].lower() + member[1:] in caught.value.message
    # the same over CBOR (a plain float) and the query protocol (text)
    with pytest.raises(CloudWatchError) as caught:
        cloudwatch_wire.parse_cbor("GetMetricStatistics",
                                   cbor2.dumps({**STATISTICS, member: float(value)}))
    assert caught.value.code == "InvalidParameterValue"
    form = urlencode({"Action": "GetMetricStatistics", "Version": "2010-08-01",
                      "Namespace": "n", "MetricName": "m", "Period": "60",
                      "Statistics.member.1": "Sum", "StartTime": "0", "EndTime": "60",
                      member: value}).encode()
    with pytest.raises(CloudWatchError) as caught:
        cloudwatch_wire.parse_query(form)
    assert caught.value.code == "InvalidParameterValue"


def test_a_timestamp_is_still_read_as_epoch_seconds_or_iso_8601() -> None:
    assert botocore_validation.to_epoch(1700000000) == 1700000000.0
    assert botocore_validation.to_epoch("2024-01-01T00:00:00Z") == 1704067200.0
    for bad in (float("nan"), float("inf"), 1e300, 10**400, "NaN", "Infinity", True, None):
        assert botocore_validation.to_epoch(bad) is None, bad


# --- JSON nested 100,000 deep ---------------------------------------------------------------------

@pytest.mark.parametrize("body", [DEEP_ARRAY, DEEP_OBJECT], ids=["array", "object"])
def test_json_nested_too_deep_is_a_serialization_exception_on_every_json_api(
        body: bytes) -> None:
    with pytest.raises(scaling_wire.ScalingError) as scaling:
        scaling_wire.parse_request("AnyScaleFrontendService.RegisterScalableTarget", body)
    assert (scaling.value.code, scaling.value.status) == ("SerializationException", 400)
    assert "nested too deeply" in scaling.value.message
    with pytest.raises(CloudWatchError) as cloudwatch:
        cloudwatch_wire.parse_json("GraniteServiceVersion20100801.ListMetrics", body)
    assert (cloudwatch.value.code, cloudwatch.value.status) == ("SerializationException", 400)
    with pytest.raises(control_plane.ControlPlaneError) as sagemaker:  # already right: unchanged
        control_plane.parse_request("SageMaker.CreateModel", body)
    assert sagemaker.value.code == "SerializationException"


def test_a_value_cbor_carries_and_json_cannot_is_quoted_in_the_validation_error() -> None:
    with pytest.raises(CloudWatchError) as caught:  # bytes where strings belong: was a 500
        cloudwatch_wire.parse_cbor("ListMetrics", cbor2.dumps({"Namespace": b"x"}))
    assert caught.value.code == "InvalidParameterValue" and "b'x'" in caught.value.message


# --- Application Auto Scaling: MaxResults as botocore's model documents it ------------------------

@pytest.mark.parametrize(("operation", "largest"), [("DescribeScalableTargets", 50),
                                                    ("DescribeScalingActivities", 50),
                                                    ("DescribeScalingPolicies", 10)])
def test_max_results_outside_its_documented_range_is_a_validation_exception(
        operation: str, largest: int) -> None:
    def parse(max_results: int) -> dict[str, Any]:
        body = json.dumps({"ServiceNamespace": "sagemaker", "MaxResults": max_results})
        return scaling_wire.parse_request(f"AnyScaleFrontendService.{operation}",
                                          body.encode())[1]

    assert parse(1)["MaxResults"] == 1 and parse(largest)["MaxResults"] == largest
    for bad in (0, -1, largest + 1):
        with pytest.raises(scaling_wire.ScalingError) as caught:
            parse(bad)
        assert caught.value.code == "ValidationException"
        assert f"Value '{bad}' at 'maxResults'" in caught.value.message


# --- variant weights: a 32-bit float, and a draw that cannot overflow ----------------------------

def test_a_variant_weight_beyond_a_32_bit_float_is_a_validation_exception() -> None:
    variant = {"VariantName": "a", "ModelName": "m", "InitialInstanceCount": 1,
               "InstanceType": "ml.m5.large"}
    config = {"EndpointConfigName": "c", "ProductionVariants": [
        {**variant, "InitialVariantWeight": 1e39}]}
    with pytest.raises(control_plane.ControlPlaneError) as caught:
        control_plane.parse_request("SageMaker.CreateEndpointConfig", json.dumps(config).encode())
    assert caught.value.code == "ValidationException"
    assert "initialVariantWeight" in caught.value.message and "32-bit" in caught.value.message
    update = {"EndpointName": "e", "DesiredWeightsAndCapacities": [
        {"VariantName": "a", "DesiredWeight": 1.7e308}]}
    with pytest.raises(control_plane.ControlPlaneError):
        control_plane.parse_request("SageMaker.UpdateEndpointWeightsAndCapacities",
                                    json.dumps(update).encode())
    largest = {**config, "ProductionVariants": [
        {**variant, "VariantName": n, "InitialVariantWeight": botocore_validation.FLOAT32_MAX}
        for n in "ab"]}
    control_plane.parse_request("SageMaker.CreateEndpointConfig", json.dumps(largest).encode())


class _Weighted:
    def __init__(self, name: str, weight: float) -> None:
        self.name, self.weight = name, weight


@pytest.mark.parametrize("weight", [1.7e308, botocore_validation.FLOAT32_MAX])
def test_equal_weights_at_a_floats_limit_split_the_traffic(weight: float) -> None:
    """Their sum overflowed to infinity and every request went to the last variant."""
    router = Router(seed=5)
    variants = [_Weighted("A", weight), _Weighted("B", weight)]
    counted = Counter(router.variant(variants).name for _ in range(2000))  # type: ignore[union-attr]
    assert 0.4 < counted["A"] / 2000 < 0.6, counted


# --- an IAM policy file nested 100,000 deep -------------------------------------------------------

def test_a_policy_file_nested_too_deep_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("[alice]\naws_access_key_id = AKIAALICE\n"
                           "aws_secret_access_key = secret\n")
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "alice.json").write_text(
        '{"Version": "2012-10-17", "Statement": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(AuthConfigError) as caught:  # was a RecursionError's traceback
        load_principals(credentials, policies, "123456789012")
    assert caught.value.path == policies / "alice.json"
    assert "nested too deeply" in caught.value.reason


# --- a BYOC container that answers with bytes that are not HTTP -----------------------------------

async def _against(answer: bytes, call: Callable[[SageMakerContainer], Any]) -> Any:
    """Run ``call`` on a container whose port answers every request with ``answer``."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    container = SageMakerContainer(image="byoc:latest", label="container-1", environment={},
                                   model_dir=None)
    # What start() sets once ``docker run`` has published the port: a session and the port.
    container._session = aiohttp.ClientSession()
    container._host_port = server.sockets[0].getsockname()[1]
    try:
        return await call(container)
    finally:
        await container._session.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("answer", [b"SSH-2.0-OpenSSH_9.6\r\n", b"\x00\x01\x02\xff\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nContent-Length: zz\r\n\r\n"],
                         ids=["ssh-banner", "binary", "bad-header"])
def test_a_container_answering_bytes_that_are_not_http_is_a_model_error(answer: bytes) -> None:
    async def scenario() -> tuple[BaseException, BaseException]:
        async def raw(container: SageMakerContainer) -> BaseException:
            with pytest.raises(ContainerUnreachable) as caught:
                await container.invoke(b"{}", "application/json", None, None, 10)
            return caught.value

        async def as_member(container: SageMakerContainer) -> BaseException:
            member = ServeMember("container-1", container, Path("/nonexistent"),
                                 ErrorContext("byoc", "us-east-1", "123456789012", "container-1"))
            request = type("Request", (), {"body": b"{}", "content_type": "application/json",
                                           "accept": None, "custom_attributes": None,
                                           "session_id": None})()
            with pytest.raises(ModelError) as caught:
                await member.call(request, time.monotonic(), 10)
            return caught.value

        return await _against(answer, raw), await _against(answer, as_member)

    unreachable, model_error = asyncio.run(scenario())
    assert "did not answer with an HTTP response" in str(unreachable)
    assert "127.0.0.1" not in str(unreachable)  # its address on this machine is nobody's business
    assert isinstance(model_error, ModelError) and model_error.status == 424
    assert "container-1" in model_error.message and "127.0.0.1" not in model_error.message


# --- CloudWatch: a large GetMetricData is bounded work, paged as AWS pages it ---------------------

class _FakeTime:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _store_with(series: dict[str, int], spacing_s: float) -> tuple[CloudWatchService, float]:
    """A service whose store holds ``count`` samples of each metric, ``spacing_s`` apart,
    ending now; and the time the first was taken."""
    fake = _FakeTime()
    clock = Clock(1.0, time_fn=fake)
    store = MetricStore(clock)
    began = fake.now
    for metric, count in series.items():
        fake.now = began
        for i in range(count):
            store.record("AWS/SageMaker", metric, {"EndpointName": "e"}, float(i), "Count")
            fake.now += spacing_s
    return CloudWatchService(store, clock), began


def _data_query(query_id: str, metric: str, stat: str = "Sum") -> dict[str, Any]:
    return {"Id": query_id, "MetricStat": {"Period": 1, "Stat": stat, "Metric": {
        "Namespace": "AWS/SageMaker", "MetricName": metric,
        "Dimensions": [{"Name": "EndpointName", "Value": "e"}]}}}


def _one_second_periods(samples: int) -> float:
    service, began = _store_with({"Latency": samples}, 0.5)
    params = {"StartTime": began, "EndTime": began + samples, "MaxDatapoints": samples,
              "MetricDataQueries": [_data_query("q", "Latency", "p99")]}
    best = float("inf")
    for _ in range(2):  # this thread's CPU time: a runner that preempts it does not count
        started = time.thread_time()
        values = service.get_metric_data(params)["MetricDataResults"][0]["Values"]
        best = min(best, time.thread_time() - started)
    assert len(values) == samples // 2
    return best


def test_get_metric_data_time_grows_linearly_with_the_periods_it_answers() -> None:
    """Each period's samples were picked out with a mask over every sample: periods x samples
    (a full series in one-second periods: minutes of work per query, 500 queries per call).
    Sixteen times the samples and periods must cost about sixteen times, not 256 times."""
    small, large = _one_second_periods(10_000), _one_second_periods(160_000)
    assert large / small < 64, f"10,000 samples {small:.4f} s, 160,000 samples {large:.4f} s"


def test_get_metric_data_pages_at_max_datapoints_and_loses_nothing() -> None:
    service, began = _store_with({"A": 300, "B": 300}, 1.0)
    base = {"StartTime": began, "EndTime": began + 300,
            "MetricDataQueries": [_data_query("a", "A"), _data_query("b", "B")]}
    whole = service.get_metric_data(base)  # 600 points: one page by default (100,800)
    assert "NextToken" not in whole
    assert [len(r["Values"]) for r in whole["MetricDataResults"]] == [300, 300]
    paged: dict[str, list[float]] = {"a": [], "b": []}
    token, pages = None, 0
    while True:
        page = service.get_metric_data({**base, "MaxDatapoints": 250,
                                        **({"NextToken": token} if token else {})})
        pages += 1
        assert sum(len(r["Values"]) for r in page["MetricDataResults"]) <= 250
        for result in page["MetricDataResults"]:
            paged[result["Id"]] += result["Values"]
            partial = result["StatusCode"] == "PartialData"
            assert partial == ("NextToken" in page and result is page["MetricDataResults"][-1]
                               and len(paged[result["Id"]]) < 300)
        token = page.get("NextToken")
        if token is None:
            break
    assert pages == 3
    assert paged == {r["Id"]: r["Values"] for r in whole["MetricDataResults"]}
    with pytest.raises(CloudWatchError) as caught:
        service.get_metric_data({**base, "NextToken": "bm90IG91cnM="})
    assert caught.value.code == "InvalidNextToken"


def test_a_query_id_must_start_with_a_lowercase_letter() -> None:
    service, began = _store_with({}, 1.0)
    for bad in ("1q", "Q", "q-1"):
        with pytest.raises(CloudWatchError) as caught:
            service.get_metric_data({"StartTime": began - 60, "EndTime": began,
                                     "MetricDataQueries": [_data_query(bad, "A")]})
        assert caught.value.code == "ValidationError", bad


def test_a_container_that_refuses_the_connection_is_named_not_its_address() -> None:
    async def scenario() -> BaseException:
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        container = SageMakerContainer(image="byoc:latest", label="container-1", environment={},
                                       model_dir=None)
        container._session = aiohttp.ClientSession()
        container._host_port = port
        try:
            with pytest.raises(ContainerUnreachable) as caught:
                await container.invoke(b"{}", "application/json", None, None, 10)
        finally:
            await container._session.close()
        return caught.value

    refused = str(asyncio.run(scenario()))
    assert refused.startswith("container-1 is unreachable: it refused the connection on its port")
    assert "(Connection refused)" in refused
    assert "127.0.0.1" not in refused and "Connect call failed" not in refused
