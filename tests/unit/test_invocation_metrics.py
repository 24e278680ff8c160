"""How a call is counted: failed calls by the status the model answered, and the extra series
an endpoint config's MetricsConfig asks for (InstanceId, EndpointConfigName)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from emulator.contract import runtime_errors, sagemaker_rules
from emulator.hosting.invocation_outcome import failed_call_samples
from emulator.metrics import EndpointMetrics, ExtraSeries, SinkSample


def _model_error(status: int, latency_s: float | None) -> runtime_errors.ModelError:
    error = runtime_errors.model_error(status, '{"error":"x"}', "ep", "us-east-1", "1", "arn")
    error.model_latency_s = latency_s
    return error


def test_a_model_answering_500_is_a_5xx_with_its_latency() -> None:
    samples = dict(failed_call_samples(_model_error(500, 0.02), 0.025))
    assert (samples["Invocation5XXErrors"], samples["Invocation4XXErrors"]) == (1, 0)
    assert samples["InvocationModelErrors"] == 1
    assert samples["ModelLatency"] == 20_000
    assert 4_000 < samples["OverheadLatency"] < 6_000


def test_a_model_answering_400_is_a_4xx_and_a_timeout_a_5xx_without_latency() -> None:
    assert dict(failed_call_samples(_model_error(400, 0.001), 0.002))["Invocation4XXErrors"] == 1
    timed_out = dict(failed_call_samples(_model_error(0, None), 60.0))
    assert timed_out["Invocation5XXErrors"] == 1 and "ModelLatency" not in timed_out


def test_sagemakers_own_refusal_is_counted_by_its_status() -> None:
    samples = dict(failed_call_samples(runtime_errors.ValidationError("bad"), 0.001))
    assert samples == {"Invocation4XXErrors": 1, "Invocation5XXErrors": 0,
                       "InvocationModelErrors": 0}


class _Sink:
    def __init__(self) -> None:
        self.series: dict[tuple[tuple[str, str], ...], list[tuple[str, float]]] = {}

    def record_many(self, dimensions: Mapping[str, str], samples: Sequence[SinkSample]) -> None:
        key = tuple(sorted(dimensions.items()))
        self.series.setdefault(key, []).extend((name, value) for _, _, name, value in samples)


def test_enhanced_metrics_publish_each_instance_and_each_config() -> None:
    sink = _Sink()
    metrics = EndpointMetrics("ep", "AllTraffic", sink,
                              ExtraSeries(config_name="cfg-2", enhanced=True))
    one, two = metrics.for_instance("i-1"), metrics.for_instance("i-2")
    call = [("Invocations", 1.0), ("InvocationsPerInstance", 0.5), ("ModelLatency", 10.0)]
    metrics.record_series(call, "i-1")
    metrics.record_series(call, "i-2")
    metrics.record_series(call, "i-2")
    one.sample("CPUUtilization", 40.0)
    two.sample("CPUUtilization", 60.0)
    base = (("EndpointName", "ep"), ("VariantName", "AllTraffic"))

    def of(name: str, value: str) -> list[tuple[str, float]]:
        return sink.series[tuple(sorted((*base, (name, value))))]

    assert of("EndpointConfigName", "cfg-2") == [("Invocations", 1.0)] * 3
    assert [n for n, _ in of("InstanceId", "i-2")].count("Invocations") == 2
    assert ("CPUUtilization", 60.0) in of("InstanceId", "i-2")
    assert ("CPUUtilization", 40.0) in of("InstanceId", "i-1")
    assert all(n != "InvocationsPerInstance" for n, _ in of("InstanceId", "i-1"))


def test_without_metrics_config_only_the_variant_series_exist() -> None:
    sink = _Sink()
    metrics = EndpointMetrics("ep", "AllTraffic", sink)
    metrics.record_series([("Invocations", 1.0)], "i-1")
    metrics.for_instance("i-1").sample("CPUUtilization", 5.0)
    assert list(sink.series) == [(("EndpointName", "ep"), ("VariantName", "AllTraffic"))]


def test_a_publish_frequency_outside_the_listed_values_is_refused() -> None:
    def config(period: int) -> dict[str, object]:
        return {"EndpointConfigName": "c", "ProductionVariants": [
            {"VariantName": "v", "ModelName": "m", "InstanceType": "ml.m5.xlarge"}],
            "MetricsConfig": {"MetricPublishFrequencyInSeconds": period}}

    assert sagemaker_rules.violations("CreateEndpointConfig", config(10)) == []
    [problem] = sagemaker_rules.violations("CreateEndpointConfig", config(15))
    assert "metricPublishFrequencyInSeconds" in problem and "10, 30, 60" in problem
