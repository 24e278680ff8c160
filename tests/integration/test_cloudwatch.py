"""CloudWatch's read API: statistics over the metric store (fake clock), then boto3 against a
real emulator with a real Triton, over all three protocols botocore knows for CloudWatch."""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from emulator.clock import Clock
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError
from emulator.cloudwatch.series import MAX_SAMPLES_PER_SERIES, MetricStore
from emulator.cloudwatch.service import CloudWatchService
from tests.client_support import DUMMY_CREDENTIALS, cloudwatch_call, runtime_client
from tests.clock_support import FakeTime
from tests.support import SUITE_ENV, package, scale_request, write_scale_model

DIMS = {"EndpointName": "e", "VariantName": "AllTraffic"}
DIM_LIST = [{"Name": k, "Value": v} for k, v in DIMS.items()]


def _service(scale: float = 1.0) -> tuple[CloudWatchService, MetricStore, FakeTime]:
    fake = FakeTime()
    clock = Clock(scale, time_fn=fake)
    store = MetricStore(clock)
    return CloudWatchService(store, clock), store, fake


def _stats(service: CloudWatchService, **params: Any) -> dict[str, Any]:
    base = {"Namespace": "AWS/SageMaker", "MetricName": "ModelLatency", "Dimensions": DIM_LIST,
            "Period": 60}
    return service.get_metric_statistics({**base, **params})


# ---------------------------------------------------------------------------------------------
# Behaviour (no wire)


def test_statistics_per_period_including_percentiles() -> None:
    service, store, fake = _service()
    start = fake.now - fake.now % 60
    fake.now = start + 5
    for value in range(1, 101):  # minute 0: 1..100
        store.record("AWS/SageMaker", "ModelLatency", DIMS, value, "Microseconds")
    fake.now = start + 65
    store.record("AWS/SageMaker", "ModelLatency", DIMS, 7, "Microseconds")  # minute 1
    fake.now = start + 120
    out = _stats(service, StartTime=start, EndTime=start + 120,
                 Statistics=["SampleCount", "Sum", "Average", "Minimum", "Maximum"])
    first, second = sorted(out["Datapoints"], key=lambda d: d["Timestamp"])
    assert first == {"Timestamp": start, "Unit": "Microseconds", "SampleCount": 100.0,
                     "Sum": 5050.0, "Average": 50.5, "Minimum": 1.0, "Maximum": 100.0}
    assert second["Timestamp"] == start + 60 and second["Sum"] == 7.0
    pct = _stats(service, StartTime=start, EndTime=start + 60,
                 ExtendedStatistics=["p50", "p99", "p99.9"])["Datapoints"][0]
    assert pct["ExtendedStatistics"] == {"p50": 50.0, "p99": 99.0, "p99.9": 100.0}


def test_clock_scale_compresses_the_past() -> None:
    service, store, fake = _service(scale=60)
    store.record("AWS/SageMaker", "ModelLatency", DIMS, 1, "Microseconds")
    fake.now += 10  # 10 real seconds later: the sample is 10 emulated minutes old
    recent = _stats(service, StartTime=fake.now - 300, EndTime=fake.now, Statistics=["Sum"])
    older = _stats(service, StartTime=fake.now - 900, EndTime=fake.now, Statistics=["Sum"])
    assert recent["Datapoints"] == []
    assert [d["Sum"] for d in older["Datapoints"]] == [1.0]


def test_high_resolution_periods_and_unit_filter() -> None:
    service, store, fake = _service()
    for i in range(10):
        store.record("AWS/SageMaker", "ModelLatency", DIMS, i, "Microseconds")
        fake.now += 1
    out = _stats(service, StartTime=fake.now - 10, EndTime=fake.now, Period=1,
                 Statistics=["Sum"])
    assert len(out["Datapoints"]) == 10
    assert _stats(service, StartTime=fake.now - 10, EndTime=fake.now, Period=1,
                  Statistics=["Sum"], Unit="Seconds")["Datapoints"] == []


@pytest.mark.parametrize(("params", "code", "words"), [
    ({"Period": 45, "Statistics": ["Sum"]}, "InvalidParameterValue", "multiple of 60"),
    ({"Statistics": ["Sum"], "StartTime": 2_000_000_000.0}, "InvalidParameterValue",
     "StartTime must be less than"),
    ({"Statistics": ["Sum"], "ExtendedStatistics": ["p99"]}, "InvalidParameterCombination",
     "but not both"),
    ({"Statistics": ["Sum"], "Period": 1, "StartTime": 1_799_990_000.0},
     "InvalidParameterCombination", "exceeds the limit of 1440"),
    ({"ExtendedStatistics": ["p101"]}, "InvalidParameterValue", "ExtendedStatistics"),
])
def test_bad_statistics_requests(params: dict[str, Any], code: str, words: str) -> None:
    service, _, fake = _service()
    request = {"StartTime": fake.now - 3600, "EndTime": fake.now, **params}
    with pytest.raises(CloudWatchError) as raised:
        _stats(service, **request)
    assert raised.value.code == code and words in raised.value.message


def test_get_metric_data_descending_and_list_metrics_filters() -> None:
    service, store, fake = _service()
    start = fake.now - fake.now % 60
    for minute in range(3):
        fake.now = start + 60 * minute + 1
        store.record("AWS/SageMaker", "Invocations", DIMS, 1, "None")
    store.record("/aws/sagemaker/Endpoints", "CPUUtilization", {**DIMS, "VariantName": "B"},
                 12.5, "Percent")
    fake.now = start + 180
    out = service.get_metric_data({"StartTime": start, "EndTime": fake.now, "MetricDataQueries": [
        {"Id": "m1", "MetricStat": {"Metric": {"Namespace": "AWS/SageMaker",
                                               "MetricName": "Invocations",
                                               "Dimensions": DIM_LIST},
                                    "Period": 60, "Stat": "Sum"}}]})
    result = out["MetricDataResults"][0]
    assert result["Timestamps"] == [start + 120, start + 60, start]
    assert result["Values"] == [1.0, 1.0, 1.0] and result["StatusCode"] == "Complete"
    names = {m["MetricName"] for m in service.list_metrics({})["Metrics"]}
    assert names == {"Invocations", "CPUUtilization"}
    only_b = service.list_metrics({"Dimensions": [{"Name": "VariantName", "Value": "B"}]})
    assert [m["MetricName"] for m in only_b["Metrics"]] == ["CPUUtilization"]
    assert service.list_metrics({"Namespace": "AWS/SageMaker", "MetricName": "Nope"}) == {
        "Metrics": []}


def test_retention_is_bounded() -> None:
    _, store, _ = _service()
    for i in range(MAX_SAMPLES_PER_SERIES + 10_000):
        store.record("AWS/SageMaker", "Invocations", DIMS, i, "None")
    key = next(store.keys())
    _, values = store.samples(key, 0, float("inf"))
    assert values.size <= MAX_SAMPLES_PER_SERIES
    assert values[-1] == MAX_SAMPLES_PER_SERIES + 10_000 - 1  # the oldest went first


# ---------------------------------------------------------------------------------------------
# boto3 against a real emulator


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from emulator.server import EmulatorServer
    from emulator.settings import Settings

    tmp = tmp_path_factory.mktemp("cw")
    store = tmp / "store"
    store.mkdir()
    package(write_scale_model(tmp / "work", "m", 2.0), store / "m.tar.gz", "folder")
    server = EmulatorServer(Settings.from_env(
        env=SUITE_ENV, model_data=str(store), cache_dir=tmp / "cache", port=0,
        endpoint_name="cw")).start()
    runtime = runtime_client(server.url)
    for _ in range(12):
        runtime.invoke_endpoint(EndpointName="cw", TargetModel="m.tar.gz",
                                ContentType="application/octet-stream",
                                Body=scale_request([1, 2, 3, 4]))
    with pytest.raises(ClientError):  # one 4XX: an object that is not in the store
        runtime.invoke_endpoint(EndpointName="cw", TargetModel="absent.tar.gz",
                                Body=scale_request([1, 2, 3, 4]))
    runtime.close()
    yield server
    server.stop()


def _counters(url: str) -> dict[str, dict[str, float]]:
    with urllib.request.urlopen(f"{url}/_emulator/metrics") as response:
        return json.load(response)["Endpoints"]["cw"]["Metrics"]


def _window() -> dict[str, dt.datetime]:
    now = dt.datetime.now(dt.timezone.utc)
    return {"StartTime": now - dt.timedelta(hours=1), "EndTime": now + dt.timedelta(minutes=1)}


@pytest.fixture(scope="module")
def cw(served: Any) -> Iterator[Any]:
    """One CloudWatch client for the module, closed at its end (no socket left to the GC)."""
    client = boto3.client("cloudwatch", endpoint_url=served.url, **DUMMY_CREDENTIALS)
    yield client
    client.close()


ENDPOINT_DIMS = [{"Name": "EndpointName", "Value": "cw"},
                 {"Name": "VariantName", "Value": "AllTraffic"}]


@pytest.mark.parametrize("metric", ["Invocations", "ModelLatency", "Invocation4XXErrors",
                                    "ModelCacheHit", "InvocationsPerInstance"])
def test_figures_equal_the_emulators_counters(served: Any, cw: Any, metric: str) -> None:
    counters = _counters(served.url)[metric]
    assert counters["SampleCount"] > 0
    stats = cw.get_metric_statistics(Namespace=counters["Namespace"], MetricName=metric,
                                     Dimensions=ENDPOINT_DIMS, Period=3600 * 2, **_window(),
                                     Statistics=["SampleCount", "Sum", "Minimum", "Maximum"])
    (point,) = stats["Datapoints"]
    for name in ("SampleCount", "Sum", "Minimum", "Maximum"):
        assert point[name] == pytest.approx(counters[name]), name
    assert point["Unit"] == counters["Unit"]
    data = cw.get_metric_data(**_window(), MetricDataQueries=[{
        "Id": "s", "MetricStat": {"Metric": {"Namespace": counters["Namespace"],
                                             "MetricName": metric, "Dimensions": ENDPOINT_DIMS},
                                  "Period": 60, "Stat": "Sum"}}])
    assert sum(data["MetricDataResults"][0]["Values"]) == pytest.approx(counters["Sum"])


def test_list_metrics_names_the_endpoints_metrics(served: Any, cw: Any) -> None:
    listed = cw.list_metrics(Namespace="AWS/SageMaker",
                             Dimensions=[{"Name": "EndpointName", "Value": "cw"}])["Metrics"]
    names = {m["MetricName"] for m in listed}
    assert {"Invocations", "InvocationsPerInstance", "ModelLatency", "ModelCacheHit"} <= names
    assert all(sorted(d["Name"] for d in m["Dimensions"]) == ["EndpointName", "VariantName"]
               for m in listed)
    paginator = cw.get_paginator("list_metrics")
    assert sum(len(p["Metrics"]) for p in paginator.paginate()) >= len(listed)


def test_boto3_errors(served: Any, cw: Any) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    with pytest.raises(cw.exceptions.InvalidParameterValueException) as raised:
        cw.get_metric_statistics(Namespace="AWS/SageMaker", MetricName="Invocations",
                                 StartTime=now, EndTime=now - dt.timedelta(minutes=5),
                                 Period=60, Statistics=["Sum"])
    assert raised.value.response["Error"]["Code"] == "InvalidParameterValue"
    with pytest.raises(cw.exceptions.InvalidParameterCombinationException):
        cw.get_metric_statistics(Namespace="AWS/SageMaker", MetricName="Invocations",
                                 StartTime=now - dt.timedelta(days=10), EndTime=now,
                                 Period=60, Statistics=["Sum"])


def _raw(url: str, protocol: str, operation: str, params: dict[str, Any]) -> dict[str, Any]:
    """One call serialized and parsed by botocore's own code for ``protocol``."""
    return cloudwatch_call(url, protocol, operation, params)[1]


@pytest.mark.parametrize("protocol", ["smithy-rpc-v2-cbor", "json", "query"])
def test_every_protocol_gives_the_same_figures(served: Any, protocol: str) -> None:
    counters = _counters(served.url)["Invocations"]
    out = _raw(served.url, protocol, "GetMetricStatistics", {
        "Namespace": "AWS/SageMaker", "MetricName": "Invocations", "Dimensions": ENDPOINT_DIMS,
        "Period": 7200, "Statistics": ["Sum"], **_window()})
    assert [d["Sum"] for d in out["Datapoints"]] == [counters["Sum"]]
    assert isinstance(out["Datapoints"][0]["Timestamp"], dt.datetime)
    listed = _raw(served.url, protocol, "ListMetrics", {"MetricName": "Invocations"})
    assert listed["Metrics"][0]["Dimensions"] == ENDPOINT_DIMS
    error = _raw(served.url, protocol, "GetMetricStatistics", {
        "Namespace": "AWS/SageMaker", "MetricName": "Invocations", "Period": 45,
        "Statistics": ["Sum"], **_window()})
    assert error["Error"]["Code"] == "InvalidParameterValue"


def test_samples_older_than_the_retention_expire() -> None:
    from emulator.cloudwatch.series import CHUNK, RETENTION_EMULATED_S

    _, store, fake = _service(scale=60)
    for _ in range(CHUNK):
        store.record("AWS/SageMaker", "Invocations", DIMS, 1, "None")
    fake.now += RETENTION_EMULATED_S / 60 + 1  # the first chunk is now a day (emulated) old
    for _ in range(CHUNK + 1):
        store.record("AWS/SageMaker", "Invocations", DIMS, 2, "None")
    _, values = store.samples(next(store.keys()), 0, float("inf"))
    assert set(values.tolist()) == {2.0}
