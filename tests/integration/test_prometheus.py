"""``GET /metrics`` parses with prometheus_client's parser and counts the traffic that was sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.prometheus_support import get_json, get_text, scrape, value
from tests.support import package, scale_request, wait_for, write_scale_model


def test_metrics_are_typed_families_that_match_the_traffic_sent(
        start_emulator, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for name in ("a", "b"):
        package(write_scale_model(tmp_path / name, name, 2.0), store / f"{name}.tar.gz", "folder")
    package(write_scale_model(tmp_path / "bad", "bad", fail_load="weights are corrupt"),
            store / "broken.tar.gz", "folder")
    server = start_emulator(model_data=str(store), max_loaded_models=1)
    rt = runtime_client(server.url)

    for _ in range(5):
        rt.invoke_endpoint(EndpointName="local", TargetModel="a.tar.gz",
                           Body=scale_request([1, 2, 3, 4]))
    codes = []
    for target in ("absent.tar.gz", "broken.tar.gz"):
        with pytest.raises(ClientError) as excinfo:
            rt.invoke_endpoint(EndpointName="local", TargetModel=target,
                               Body=scale_request([1, 2, 3, 4]))
        codes.append(excinfo.value.response["Error"]["Code"])
    assert codes == ["ValidationError", "ModelError"]
    rt.invoke_endpoint(EndpointName="local", TargetModel="b.tar.gz",  # evicts a
                       Body=scale_request([1, 2, 3, 4]))

    variant = {"endpoint_name": "local", "variant_name": "AllTraffic"}

    def with_the_unload_counted() -> tuple[dict[str, str], dict[Any, float]] | None:
        # b's load starts once Triton has accepted a's unload, which ends (and is counted) a
        # second or so later: b's answer can come first.
        types, samples = scrape(server.url)
        unloads = samples.get(("sagemaker_model_unloads_total", frozenset(variant.items())))
        return (types, samples) if unloads else None

    types, samples = wait_for(with_the_unload_counted, 30, "a's unload to be counted")
    # Every family is typed: nothing parses as "unknown" (the old _min/_max/_current samples did).
    assert set(types.values()) <= {"histogram", "counter", "gauge"}, types
    for family in ("sagemaker_model_latency_seconds", "sagemaker_overhead_latency_seconds",
                   "sagemaker_model_loading_wait_seconds", "sagemaker_model_loading_seconds",
                   "sagemaker_model_unloading_seconds", "sagemaker_model_downloading_seconds"):
        assert types[family] == "histogram", family
    for family in ("sagemaker_invocations", "sagemaker_invocation_4xx_errors",
                   "sagemaker_invocation_model_errors", "sagemaker_model_loads",
                   "sagemaker_model_unloads", "sagemaker_model_cache_hits"):
        assert types[family] == "counter", family
    assert types["sagemaker_loaded_models"] == "gauge"

    instance = {**variant, "instance_id": "i-1"}
    assert value(samples, "sagemaker_invocations_total", **variant) == 8
    assert value(samples, "sagemaker_invocation_4xx_errors_total", **variant) == 2  # 400, 400
    assert value(samples, "sagemaker_invocation_5xx_errors_total", **variant) == 0
    assert value(samples, "sagemaker_invocation_model_errors_total", **variant) == 1
    # a: one miss then four hits; b: one miss. The broken model never found a loaded model.
    assert value(samples, "sagemaker_model_cache_hits_total", **variant) == 4
    assert value(samples, "sagemaker_model_cache_lookups_total", **variant) == 6
    assert value(samples, "sagemaker_model_loads_total", **variant) == 2
    assert value(samples, "sagemaker_model_unloads_total", **variant) == 1  # a, for b

    # Histograms: six answered calls, buckets cumulative and ending at +Inf == count, in seconds.
    latency = "sagemaker_model_latency_seconds"
    assert value(samples, f"{latency}_count", **variant) == 6
    bounds = sorted(((float(dict(labels)["le"]), v) for (name, labels), v in samples.items()
                     if name == f"{latency}_bucket"), key=lambda b: b[0])
    counts = [v for _le, v in bounds]
    assert counts == sorted(counts) and bounds[-1] == (float("inf"), 6)
    total_s = value(samples, f"{latency}_sum", **variant)
    cloudwatch = get_json(f"{server.url}/_emulator/metrics")
    model_latency_us = cloudwatch["Endpoints"]["local"]["Metrics"]["ModelLatency"]["Sum"]
    assert total_s == pytest.approx(model_latency_us / 1e6)
    assert value(samples, "sagemaker_model_loading_seconds_count", **variant) == 2

    # Gauges per instance: b is the one loaded model, its bytes against the budget.
    models = get_json(f"{server.url}/_emulator/models")
    assert value(samples, "sagemaker_loaded_models", **instance) == 1
    assert value(samples, "mme_loaded_model_bytes", **instance) == \
        models["Endpoints"]["local"]["LoadedBytes"] > 0
    assert value(samples, "mme_max_loaded_models", **instance) == 1
    assert ("mme_memory_budget_bytes", frozenset(instance.items())) not in samples  # unlimited
    assert value(samples, "mme_in_flight_requests", **instance) == 0


def test_help_names_the_cloudwatch_metric(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                          tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    package(write_scale_model(tmp_path / "a", "a", 2.0), store / "a.tar.gz", "folder")
    server = start_emulator(model_data=str(store))
    text = get_text(f"{server.url}/metrics")
    docs = {f.name: f.documentation for f in text_string_to_metric_families(text)}
    assert docs["sagemaker_model_latency_seconds"].startswith(
        "CloudWatch AWS/SageMaker ModelLatency (Microseconds)")
    assert "ModelCacheHit (None, SampleCount)" in docs["sagemaker_model_cache_lookups"]
    assert "/aws/sagemaker/Endpoints LoadedModelCount" in docs["sagemaker_loaded_models"]
