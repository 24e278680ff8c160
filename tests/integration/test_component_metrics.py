"""Inference components' copy utilization and their series, boto3 and a real
headless Chromium against `mme serve`.

One emulator for the module at ``--clock-scale 60``, so the periodic utilization tick (one
emulated minute) comes every real second. Its one component reserves 1.5 vCPU and 1024 MiB per
copy and asks for 3 copies on one ml.m5.xlarge (4 vCPU, 16 GiB): 2 are placed (each a real
embedded Triton), the third stays pending. Each test reads the figures as they come, by
condition; none depends on another's calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from emulator.hosting.utilization import gpu_utilization
from emulator.processes import process_tree
from emulator.triton.memory import process_bytes
from tests.client_support import runtime_client
from tests.component_support import ComponentServer, deploy_component, serving
from tests.integration.test_page import WAIT_MS, browser_page  # noqa: F401 - the fixture
from tests.prometheus_support import get_json, scrape, value
from tests.support import scale_request, wait_until

ENDPOINT, COMPONENT = "metered", "metered-ic"
RESOURCES = {"NumberOfCpuCoresRequired": 1.5, "MinMemoryRequiredInMb": 1024}
NAMESPACE = "/aws/sagemaker/InferenceComponents"
LABELS = {"endpoint_name": ENDPOINT, "variant_name": "AllTraffic",
          "inference_component_name": COMPONENT}


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentServer]:
    with serving(tmp_path_factory.mktemp("metered"), scales={"double": 2.0},
                 clock_scale=60) as module:
        deploy_component(module.client("sagemaker"), ENDPOINT, COMPONENT, "double",
                         copies=3, resources=RESOURCES)
        yield module


def _invoke(module: ComponentServer, times: int) -> None:
    rt = runtime_client(module.server.url)
    for _ in range(times):
        rt.invoke_endpoint(EndpointName=ENDPOINT, InferenceComponentName=COMPONENT,
                           ContentType="application/json",
                           Body=scale_request([1, 2, 3, 4]))["Body"].read()


def _copy_view(module: ComponentServer, copy: str) -> dict[str, Any]:
    """One copy as ``/_emulator/models`` shows it (its instance, state, last utilization)."""
    view = get_json(f"{module.server.url}/_emulator/models")["Endpoints"][ENDPOINT][
        "InferenceComponents"][COMPONENT]
    return next(c for c in view["Copies"] if c["CopyId"] == copy)


def _statistics(module: ComponentServer, metric: str, namespace: str = NAMESPACE,
                dimensions: dict[str, str] | None = None) -> dict[str, Any]:
    """All of the metric's samples so far, as one datapoint (SampleCount 0: none yet)."""
    now = datetime.now(timezone.utc)
    dimensions = dimensions or {"InferenceComponentName": COMPONENT}
    points = module.client("cloudwatch").get_metric_statistics(
        Namespace=namespace, MetricName=metric,
        Dimensions=[{"Name": k, "Value": v} for k, v in dimensions.items()],
        StartTime=now - timedelta(hours=1), EndTime=now + timedelta(hours=1), Period=3600 * 2,
        Statistics=["SampleCount", "Minimum", "Maximum"])["Datapoints"]
    return points[0] if points else {"SampleCount": 0}


def test_each_copy_reports_its_utilization_normalized_against_its_reservation(
        module: ComponentServer) -> None:
    _invoke(module, 5)
    # Two placed copies, one sample each per tick (the first tick of a copy sets its CPU base).
    wait_until(lambda: _statistics(module, "CPUUtilizationNormalized")["SampleCount"] >= 4, 60,
               "CPUUtilizationNormalized from both copies")
    cpu = _statistics(module, "CPUUtilizationNormalized")
    memory = _statistics(module, "MemoryUtilizationNormalized")
    assert cpu["Unit"] == memory["Unit"] == "Percent"
    assert 0 <= cpu["Minimum"] <= cpu["Maximum"] <= 100
    assert 0 < memory["Minimum"] <= memory["Maximum"] <= 100
    # Against the copy's 1024 MiB, not the instance's 16 GiB (16 times less): copy-1's last
    # figure is its processes' memory (proportional set size, as its memory probe counts it)
    # over 1024 MiB, give or take what changed between the sample and now.
    copy_1 = next(p for p in module.tritons(ENDPOINT) if f"/{COMPONENT}/copy-1/" in " ".join(
        p.cmdline()))
    shown = _copy_view(module, "copy-1")["Utilization"]["MemoryUtilizationNormalized"]
    expected = 100 * sum(process_bytes(pid) for pid in process_tree(copy_1.pid)) / 1024**3
    assert expected / 2 < shown < expected * 2
    published = {m["MetricName"] for m in module.client("cloudwatch").list_metrics(
        Namespace=NAMESPACE)["Metrics"]}
    if not gpu_utilization():  # no GPU on this machine: no GPU figure, as on a CPU instance
        assert published == {"CPUUtilizationNormalized", "MemoryUtilizationNormalized"}


def test_the_instance_reports_what_its_copies_reserve_and_use(module: ComponentServer) -> None:
    """/aws/sagemaker/Endpoints for an endpoint with components: its one instance holds the
    two placed copies, 2 x 1.5 of its 4 vCPUs and 2 x 1024 MiB of its 16 GiB."""
    def instance(metric: str) -> dict[str, Any]:
        return _statistics(module, metric, "/aws/sagemaker/Endpoints",
                           {"EndpointName": ENDPOINT, "VariantName": "AllTraffic"})

    wait_until(lambda: instance("CPUUtilizationNormalized")["SampleCount"] >= 1, 60,
               "the instance's CPUUtilizationNormalized")
    assert instance("CPUReservation")["Maximum"] == pytest.approx(75.0)
    assert instance("MemoryReservation")["Maximum"] == pytest.approx(12.5)
    cpu = instance("CPUUtilizationNormalized")
    assert 0 <= cpu["Minimum"] <= cpu["Maximum"] <= 100
    assert 0 < instance("MemoryUtilization")["Maximum"] < 100


def test_metrics_has_the_components_series(module: ComponentServer) -> None:
    _types, before = scrape(module.server.url)
    _invoke(module, 3)
    types, after = scrape(module.server.url)
    for name in ("sagemaker_component_invocations_total",
                 "sagemaker_component_model_latency_seconds_count"):
        assert value(after, name, **LABELS) - value(before, name, **LABELS) == 3
    assert types["sagemaker_component_model_latency_seconds"] == "histogram"
    assert value(after, "sagemaker_component_invocation_5xx_errors_total", **LABELS) == 0
    assert value(after, "sagemaker_component_desired_copies", **LABELS) == 3
    assert value(after, "sagemaker_component_current_copies", **LABELS) == 2
    assert value(after, "mme_component_ready_copies", **LABELS) == 2

    def copies_sampled() -> bool:
        samples = scrape(module.server.url)[1]
        return all(("sagemaker_component_memory_utilization_normalized_ratio", frozenset(
            {**LABELS, "copy_id": copy, "instance_id": "i-1"}.items())) in samples
                   for copy in ("copy-1", "copy-2"))

    wait_until(copies_sampled, 60, "each copy's memory utilization on /metrics")
    ratio = value(scrape(module.server.url)[1],
                  "sagemaker_component_memory_utilization_normalized_ratio",
                  **LABELS, copy_id="copy-1", instance_id="i-1")
    assert 0 < ratio <= 1


def test_the_page_shows_the_component_its_copies_and_their_instances(
        module: ComponentServer, browser_page: Any) -> None:  # noqa: F811 - the fixture
    view = get_json(f"{module.server.url}/_emulator/models")["Endpoints"][ENDPOINT][
        "InferenceComponents"][COMPONENT]
    assert [(c["Instance"], c["State"]) for c in view["Copies"]] == [
        ("i-1", "ready"), ("i-1", "ready"), (None, "pending")]
    page = browser_page
    page.goto(f"{module.server.url}/_emulator/")
    page.wait_for_selector('#connection[data-connected="true"]', timeout=WAIT_MS)
    block = f'.endpoint[data-endpoint="{ENDPOINT}"] .component[data-component="{COMPONENT}"]'
    page.wait_for_selector(f'{block}[data-status="InService"]', timeout=WAIT_MS)
    assert page.inner_text(f'{block} [data-figure="copies"]') == "2 ready, 2 placed, 3 desired"
    for copy in ("copy-1", "copy-2"):
        page.wait_for_selector(f'{block} tr.copy[data-copy="{copy}"][data-state="ready"]'
                               f'[data-instance="i-1"]', timeout=WAIT_MS)
    assert "no instance has room" in page.inner_text(f'{block} tr.copy[data-state="pending"]')
    # Each ready copy's normalized memory, as sampled (a percentage once the first tick came).
    page.wait_for_function(f"""() => [...document.querySelectorAll(
        '{block} tr.copy[data-state="ready"] td[data-metric="MemoryUtilizationNormalized"]')]
        .every(cell => / %$/.test(cell.textContent))""", timeout=WAIT_MS)
