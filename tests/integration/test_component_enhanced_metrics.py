"""An endpoint config's MetricsConfig on an endpoint for inference components, boto3 against
`mme serve` with real embedded Tritons.

One emulator for the module at ``--clock-scale 60``; its endpoint's config asks for
``EnableEnhancedMetrics`` and a 10 s ``MetricPublishFrequencyInSeconds``; its one component has
two copies (two Tritons). Each copy's calls and utilization get a series of their own under its
ContainerId and InstanceId, and the copies' utilization is sampled every 10 emulated seconds.
Every test waits on what it reads, by condition.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tests.client_support import runtime_client
from tests.component_support import ROLE, ComponentServer, create_component, serving
from tests.support import scale_request, wait_for, wait_until

ENDPOINT, COMPONENT = "enhanced-ic-ep", "enhanced-ic"
RESOURCES = {"NumberOfCpuCoresRequired": 1.5, "MinMemoryRequiredInMb": 1024}
COMPONENTS = "/aws/sagemaker/InferenceComponents"
COPY_DIMENSIONS = {"EndpointName", "VariantName", "InferenceComponentName", "InstanceId",
                   "ContainerId"}
CALLS = 12


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentServer]:
    with serving(tmp_path_factory.mktemp("enhanced"), scales={"double": 2.0},
                 clock_scale=60) as module:
        sm = module.client("sagemaker")
        sm.create_endpoint_config(
            EndpointConfigName=ENDPOINT, ExecutionRoleArn=ROLE, ProductionVariants=[{
                "VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge",
                "InitialInstanceCount": 1}],
            MetricsConfig={"EnableEnhancedMetrics": True, "MetricPublishFrequencyInSeconds": 10,
                           "EnableDetailedObservability": True})
        sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=ENDPOINT)
        wait_until(lambda: sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointStatus"]
                   == "InService", 30, "the endpoint InService")
        create_component(sm, COMPONENT, ENDPOINT, 2, ModelName="double",
                         ComputeResourceRequirements=RESOURCES)
        rt = runtime_client(module.server.url)
        for _ in range(CALLS):
            rt.invoke_endpoint(EndpointName=ENDPOINT, InferenceComponentName=COMPONENT,
                               ContentType="application/json",
                               Body=scale_request([1, 2, 3, 4]))["Body"].read()
        yield module


def _copy_series(module: ComponentServer, namespace: str, metric: str) -> list[dict[str, str]]:
    """The dimensions of the component's per-copy series of ``metric`` (those with a
    ContainerId), as ListMetrics gives them."""
    listed = module.client("cloudwatch").list_metrics(
        Namespace=namespace, MetricName=metric,
        Dimensions=[{"Name": "InferenceComponentName", "Value": COMPONENT}])["Metrics"]
    found = [{d["Name"]: d["Value"] for d in m["Dimensions"]} for m in listed]
    return [dims for dims in found if "ContainerId" in dims]


def _points(module: ComponentServer, namespace: str, metric: str,
            dimensions: list[dict[str, str]], period: int, stat: str,
            minutes: int = 60) -> list[list[tuple[datetime, float]]]:
    """Each series' datapoints, oldest first, over the last ``minutes``."""
    now = datetime.now(timezone.utc)
    queries: list[dict[str, Any]] = [{"Id": f"q{n}", "MetricStat": {"Metric": {
        "Namespace": namespace, "MetricName": metric,
        "Dimensions": [{"Name": k, "Value": v} for k, v in dims.items()]},
        "Period": period, "Stat": stat}} for n, dims in enumerate(dimensions)]
    results = module.client("cloudwatch").get_metric_data(
        MetricDataQueries=queries, StartTime=now - timedelta(minutes=minutes),
        EndTime=now + timedelta(minutes=1))["MetricDataResults"]
    by_id = {r["Id"]: sorted(zip(r["Timestamps"], r["Values"], strict=True)) for r in results}
    return [by_id[f"q{n}"] for n in range(len(dimensions))]


def _total(points: list[tuple[datetime, float]]) -> float:
    return sum(value for _, value in points)


def test_each_copy_has_its_invocations_under_its_container_id(module: ComponentServer) -> None:
    component = [{"InferenceComponentName": COMPONENT}]
    wait_until(lambda: _total(_points(module, "AWS/SageMaker", "Invocations", component, 60,
                                      "Sum")[0]) == CALLS, 30, "the component's Invocations")
    series = wait_for(lambda: (found := _copy_series(module, "AWS/SageMaker", "Invocations"))
                      and len(found) == 2 and found, 30, "two copies' Invocations series")
    assert all(set(dims) == COPY_DIMENSIONS for dims in series), series
    assert {dims["ContainerId"] for dims in series} == {"copy-1", "copy-2"}
    assert all(dims["EndpointName"] == ENDPOINT and dims["VariantName"] == "AllTraffic"
               and dims["InstanceId"].startswith("i-") for dims in series), series
    per_copy = [_total(points) for points in _points(module, "AWS/SageMaker", "Invocations",
                                                     series, 60, "Sum")]
    # The copies share the calls (fewest in flight, ties in turn), and add up to the component's.
    assert sum(per_copy) == CALLS and all(per_copy), per_copy
    latency = _points(module, "AWS/SageMaker", "ModelLatency", series, 60, "SampleCount")
    assert sum(_total(points) for points in latency) == CALLS


def test_each_copy_has_its_utilization_under_its_container_id(module: ComponentServer) -> None:
    series = wait_for(lambda: (found := _copy_series(module, COMPONENTS,
                                                     "MemoryUtilizationNormalized"))
                      and len(found) == 2 and found, 30, "two copies' memory series")
    assert {dims["ContainerId"] for dims in series} == {"copy-1", "copy-2"}
    assert all(set(dims) == COPY_DIMENSIONS for dims in series), series
    memory = _points(module, COMPONENTS, "MemoryUtilizationNormalized", series, 60, "Maximum")
    assert all(points and 0 < max(v for _, v in points) <= 100 for points in memory), memory


def test_the_copies_utilization_comes_every_10_emulated_seconds(module: ComponentServer) -> None:
    component = [{"InferenceComponentName": COMPONENT}]

    def every_10_s() -> bool:
        points = _points(module, COMPONENTS, "MemoryUtilizationNormalized", component, 10,
                         "SampleCount", minutes=1)[0]
        return len(points) >= 4
    # Sampled every 10 emulated seconds: a Period=10 query has a datapoint in most of the last
    # minute's six (at SageMaker's default of 60 s it would have one).
    wait_until(every_10_s, 30, "10 s datapoints of the component's utilization")
    points = _points(module, COMPONENTS, "MemoryUtilizationNormalized", component, 10,
                     "SampleCount", minutes=1)[0]
    gaps = {(b[0] - a[0]).total_seconds() for a, b in zip(points, points[1:], strict=False)}
    assert 10.0 in gaps and all(gap % 10 == 0 for gap in gaps), gaps


def test_the_instance_has_its_series_under_its_instance_id(module: ComponentServer) -> None:
    instance = [{"EndpointName": ENDPOINT, "VariantName": "AllTraffic", "InstanceId": "i-1"}]
    wait_until(lambda: _points(module, "/aws/sagemaker/Endpoints", "CPUReservation", instance,
                               60, "Maximum")[0], 30, "i-1's CPUReservation")
    reservation = _points(module, "/aws/sagemaker/Endpoints", "CPUReservation", instance, 60,
                          "Maximum")[0]
    # Both copies on the one instance: 2 x 1.5 of its 4 vCPUs.
    assert max(v for _, v in reservation) == pytest.approx(75.0)
    wait_until(lambda: _points(module, "/aws/sagemaker/Endpoints", "MemoryUtilization",
                               instance, 60, "SampleCount")[0], 30, "i-1's MemoryUtilization")
