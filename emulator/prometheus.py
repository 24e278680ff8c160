"""``GET /metrics``: the fleet's metrics in Prometheus' exposition format, by prometheus_client.

Prometheus names and base units; each HELP names the CloudWatch metric it comes from, so a
dashboard can be matched against CloudWatch's:

- histograms (seconds) for every duration CloudWatch reports in microseconds: ``ModelLatency``,
  ``OverheadLatency``, ``ModelLoadingWaitTime``, ``ModelDownloadingTime``, ``ModelLoadingTime``,
  ``ModelUnloadingTime``, so ``histogram_quantile(0.99, ...)`` gives p99;
- counters for invocations, errors, cache hits and lookups (the hit ratio is their rate's
  ratio), downloads, loads and unloads, per endpoint and variant;
- gauges per instance: loaded models, their bytes against the budgets, requests in flight,
  utilization as a ratio (CloudWatch's percent / 100).

Labels are ``endpoint_name``, ``variant_name`` and, per instance, ``instance_id`` (not
``instance``, which Prometheus sets to the scraped target).

Inference components (``sagemaker_component_*``, labels ``endpoint_name``, ``variant_name``,
``inference_component_name``): their invocations, errors and no-capacity failures (counters),
model and overhead latency (histograms), copies desired / placed / ready (gauges), and per copy
(labels ``copy_id``, ``instance_id``: the instance its placement put it on) the normalized
utilization of namespace /aws/sagemaker/InferenceComponents as a ratio.

CloudWatch alarms' states are ``cloudwatch_alarm_state{alarm_name, alarm_type, state}``
(``AlarmCollector``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from emulator.cloudwatch.alarm_model import STATES as ALARM_STATES
from emulator.cloudwatch.alarms import AlarmStore
from emulator.hosting import copy_utilization
from emulator.hosting.component_tally import ComponentTally
from emulator.hosting.components import ComponentEndpoint
from emulator.hosting.copy_utilization import ComponentGroup
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.metrics import DURATION_BUCKETS_S, METRICS, EndpointMetrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
VARIANT_LABELS = ["endpoint_name", "variant_name"]
INSTANCE_LABELS = [*VARIANT_LABELS, "instance_id"]
COMPONENT_LABELS = [*VARIANT_LABELS, "inference_component_name"]
COPY_LABELS = [*COMPONENT_LABELS, "copy_id", "instance_id"]


@dataclass(frozen=True)
class Mapping:
    name: str  # Prometheus name, without the _total / _bucket suffixes the library adds
    cloudwatch: str  # the CloudWatch metric it comes from
    statistic: str = "Sum"  # counters: which running statistic is the count
    note: str = ""


HISTOGRAMS = (
    Mapping("sagemaker_model_latency_seconds", "ModelLatency"),
    Mapping("sagemaker_overhead_latency_seconds", "OverheadLatency"),
    Mapping("sagemaker_model_loading_wait_seconds", "ModelLoadingWaitTime",
            note="requests that found their model not loaded"),
    Mapping("sagemaker_model_downloading_seconds", "ModelDownloadingTime"),
    Mapping("sagemaker_model_loading_seconds", "ModelLoadingTime"),
    Mapping("sagemaker_model_unloading_seconds", "ModelUnloadingTime"),
)

COUNTERS = (
    Mapping("sagemaker_invocations", "Invocations"),
    Mapping("sagemaker_invocations_per_instance", "InvocationsPerInstance",
            note="each invocation counts 1 / instances of its variant"),
    Mapping("sagemaker_invocation_4xx_errors", "Invocation4XXErrors"),
    Mapping("sagemaker_invocation_5xx_errors", "Invocation5XXErrors"),
    Mapping("sagemaker_invocation_model_errors", "InvocationModelErrors"),
    Mapping("sagemaker_model_cache_hits", "ModelCacheHit",
            note="requests whose model was loaded already"),
    Mapping("sagemaker_model_cache_lookups", "ModelCacheHit", statistic="SampleCount",
            note="requests that looked for a loaded model; hit ratio = hits / lookups"),
    Mapping("sagemaker_model_downloads", "ModelDownloadingTime", statistic="SampleCount",
            note="models downloaded and extracted"),
    Mapping("sagemaker_model_loads", "ModelLoadingTime", statistic="SampleCount",
            note="models loaded"),
    Mapping("sagemaker_model_unloads", "ModelUnloadingTime", statistic="SampleCount",
            note="models unloaded"),
)

UTILIZATION = (
    Mapping("sagemaker_cpu_utilization_ratio", "CPUUtilization"),
    Mapping("sagemaker_memory_utilization_ratio", "MemoryUtilization"),
    Mapping("sagemaker_disk_utilization_ratio", "DiskUtilization"),
    Mapping("sagemaker_gpu_utilization_ratio", "GPUUtilization"),
    Mapping("sagemaker_gpu_memory_utilization_ratio", "GPUMemoryUtilization"),
)


def _help(mapping: Mapping, unit_note: str = "") -> str:
    namespace, unit = METRICS[mapping.cloudwatch]
    text = f"CloudWatch {namespace} {mapping.cloudwatch} ({unit}"
    if mapping.statistic != "Sum":
        text += f", {mapping.statistic}"
    text += ")"
    if unit_note:
        text += f"; {unit_note}"
    if mapping.note:
        text += f"; {mapping.note}"
    return text


def _cumulative(counts: list[int]) -> list[tuple[str, float]]:
    """prometheus_client's buckets: cumulative counts per upper bound, +Inf last."""
    buckets, running = [], 0
    for bound, count in zip((*DURATION_BUCKETS_S, float("inf")), counts, strict=True):
        running += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
    return buckets


class FleetCollector(Collector):
    """Reads every endpoint's variant metrics and instances at each scrape."""

    def __init__(self, registry: EndpointRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        variants: list[tuple[list[str], EndpointMetrics]] = [
            ([e.name, v.name], v.metrics) for e in self._registry.all() for v in e.variants]
        yield from self._histograms(variants)
        yield from self._counters(variants)
        yield from self._gauges()
        yield from self._components()

    def _components(self) -> Iterator[Metric]:
        """Every inference component's series (``sagemaker_component_*``)."""
        found: list[tuple[list[str], ComponentGroup, ComponentTally]] = [
            ([e.name, c.variant, c.name], c, e.tally)
            for e in self._registry.all() if isinstance(e, ComponentEndpoint)
            for c in e.component_groups()]
        yield from _component_series(found)

    @staticmethod
    def _histograms(variants: list[tuple[list[str], EndpointMetrics]]) -> Iterator[Metric]:
        families = {m.cloudwatch: HistogramMetricFamily(
            m.name.removesuffix("_seconds"), _help(m, "here in seconds"), labels=VARIANT_LABELS,
            unit="seconds") for m in HISTOGRAMS}
        for labels, metrics in variants:
            stats, buckets = metrics.statistics(), metrics.duration_buckets()
            for name, family in families.items():
                family.add_metric(labels, _cumulative(buckets[name]), stats[name].total / 1e6)
        yield from families.values()

    @staticmethod
    def _counters(variants: list[tuple[list[str], EndpointMetrics]]) -> Iterator[Metric]:
        for mapping in COUNTERS:
            family = CounterMetricFamily(mapping.name, _help(mapping), labels=VARIANT_LABELS)
            for labels, metrics in variants:
                stat = metrics.statistics()[mapping.cloudwatch]
                value = stat.total if mapping.statistic == "Sum" else stat.sample_count
                family.add_metric(labels, float(value))
            yield family

    def _gauges(self) -> Iterator[Metric]:
        def gauge(name: str, text: str, unit: str = "") -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=INSTANCE_LABELS, unit=unit)

        loaded = gauge("sagemaker_loaded_models", _help(Mapping("", "LoadedModelCount"),
                                                        "now, per instance"))
        loaded_bytes = gauge("mme_loaded_model_bytes",
                             "Memory of the loaded models as eviction counts it (measured, else "
                             "their files' bytes), per instance", "bytes")
        loaded_file_bytes = gauge("mme_loaded_model_file_bytes",
                                  "Bytes of the loaded models' extracted files, per instance",
                                  "bytes")
        memory_budget = gauge("mme_memory_budget_bytes",
                              "Memory budget of each instance: --memory-budget, else its "
                              "InstanceType's (absent when unlimited)", "bytes")
        gpu_loaded_bytes = gauge("mme_loaded_model_gpu_bytes",
                                 "GPU memory of the loaded models as GPU eviction counts it "
                                 "(measured), per instance", "bytes")
        gpu_budget = gauge("mme_gpu_memory_budget_bytes",
                           "GPU memory budget of each instance: --gpu-memory-budget, else its "
                           "InstanceType's GPU memory (absent on CPU types)", "bytes")
        max_models = gauge("mme_max_loaded_models",
                           "--max-loaded-models of each instance (absent when unlimited)")
        disk_bytes = gauge("mme_disk_model_bytes",
                           "Bytes of the model artifacts on each instance's disk", "bytes")
        disk_budget = gauge("mme_disk_budget_bytes",
                            "--disk-budget of each instance (absent when unlimited)", "bytes")
        in_flight = gauge("mme_in_flight_requests", "Requests each instance is serving now")
        utilization = {m.cloudwatch: gauge(m.name.removesuffix("_ratio"),
                                           _help(m, "last sample, percent / 100"), "ratio")
                       for m in UTILIZATION}
        # A deployment's new fleet too: its instances' names carry its generation (i-1-green1).
        fleets = [g for e in self._registry.all() for g in (e, e.green) if g is not None]
        for endpoint in fleets:
            for variant in endpoint.variants:
                for instance in list(variant.instances):
                    labels = [endpoint.name, variant.name, instance.id]
                    usage = instance.manager.usage()
                    loaded.add_metric(labels, instance.metrics.loaded_model_count)
                    loaded_bytes.add_metric(labels, usage.loaded_bytes)
                    loaded_file_bytes.add_metric(labels, usage.loaded_file_bytes)
                    disk_bytes.add_metric(labels, usage.disk_bytes)
                    in_flight.add_metric(labels, instance.in_flight)
                    if usage.memory_budget_bytes is not None:
                        memory_budget.add_metric(labels, usage.memory_budget_bytes)
                    if usage.gpu_memory_budget_bytes is not None:
                        gpu_budget.add_metric(labels, usage.gpu_memory_budget_bytes)
                        gpu_loaded_bytes.add_metric(labels, usage.gpu_loaded_bytes)
                    if usage.max_loaded_models is not None:
                        max_models.add_metric(labels, usage.max_loaded_models)
                    if usage.disk_budget_bytes is not None:
                        disk_budget.add_metric(labels, usage.disk_budget_bytes)
                    for name, value in instance.metrics.latest.items():
                        if name in utilization:
                            utilization[name].add_metric(labels, value / 100)
        yield from (loaded, loaded_bytes, loaded_file_bytes, memory_budget, gpu_loaded_bytes,
                    gpu_budget, max_models, disk_bytes, disk_budget, in_flight,
                    *utilization.values())


class AlarmCollector(Collector):
    """Every CloudWatch alarm's state as a state set: ``cloudwatch_alarm_state`` is 1 for the
    state the alarm is in and 0 for the other two, so ``cloudwatch_alarm_state{state="ALARM"}
    == 1`` selects the alarms firing now."""

    def __init__(self, alarms: AlarmStore) -> None:
        self._alarms = alarms

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "cloudwatch_alarm_state", "CloudWatch alarm state (DescribeAlarms' StateValue): 1 "
            "for the alarm's state, 0 for the others", labels=["alarm_name", "alarm_type",
                                                              "state"])
        for alarm in self._alarms.all():
            for state in ALARM_STATES:
                family.add_metric([alarm.name, alarm.alarm_type, state],
                                  1.0 if alarm.state == state else 0.0)
        yield family


def exposition(registry: EndpointRegistry, alarms: AlarmStore | None = None) -> bytes:
    """The text format of every metric of the fleet (and the alarms' states), as a scrape
    gets it."""
    collectors = CollectorRegistry(auto_describe=False)
    collectors.register(FleetCollector(registry))
    if alarms is not None:
        collectors.register(AlarmCollector(alarms))
    return generate_latest(collectors)


COMPONENT_COUNTERS = (
    Mapping("sagemaker_component_invocations", "Invocations"),
    Mapping("sagemaker_component_invocation_4xx_errors", "Invocation4XXErrors"),
    Mapping("sagemaker_component_invocation_5xx_errors", "Invocation5XXErrors"),
    Mapping("sagemaker_component_invocation_model_errors", "InvocationModelErrors"),
    Mapping("sagemaker_component_no_capacity_invocation_failures",
            "NoCapacityInvocationFailures", note="calls that found no copy to serve them"),
)
COMPONENT_HISTOGRAMS = (
    Mapping("sagemaker_component_model_latency_seconds", "ModelLatency"),
    Mapping("sagemaker_component_overhead_latency_seconds", "OverheadLatency"),
)
COPY_UTILIZATION = {
    copy_utilization.CPU: "sagemaker_component_cpu_utilization_normalized_ratio",
    copy_utilization.MEMORY: "sagemaker_component_memory_utilization_normalized_ratio",
    copy_utilization.GPU: "sagemaker_component_gpu_utilization_normalized_ratio",
    copy_utilization.GPU_MEMORY: "sagemaker_component_gpu_memory_utilization_normalized_ratio",
}


def _component_series(
        found: list[tuple[list[str], ComponentGroup, ComponentTally]]) -> Iterator[Metric]:
    def component_help(mapping: Mapping, unit: str) -> str:
        return (f"CloudWatch AWS/SageMaker {mapping.cloudwatch} ({unit}), dimension "
                f"InferenceComponentName" + (f"; {mapping.note}" if mapping.note else ""))

    for mapping in COMPONENT_COUNTERS:
        counter = CounterMetricFamily(mapping.name, component_help(mapping, "None"),
                                      labels=COMPONENT_LABELS)
        for labels, component, tally in found:
            stat = tally.statistics(component.name).get(mapping.cloudwatch)
            counter.add_metric(labels, stat.total if stat is not None else 0.0)
        yield counter
    for mapping in COMPONENT_HISTOGRAMS:
        histogram = HistogramMetricFamily(
            mapping.name.removesuffix("_seconds"),
            component_help(mapping, "Microseconds") + "; here in seconds",
            labels=COMPONENT_LABELS, unit="seconds")
        for labels, component, tally in found:
            stat = tally.statistics(component.name).get(mapping.cloudwatch)
            histogram.add_metric(
                labels, _cumulative(tally.duration_buckets(component.name, mapping.cloudwatch)),
                stat.total / 1e6 if stat is not None else 0.0)
        yield histogram
    copies = {
        "desired": GaugeMetricFamily(
            "sagemaker_component_desired_copies", "DescribeInferenceComponent's "
            "RuntimeConfig.DesiredCopyCount", labels=COMPONENT_LABELS),
        "current": GaugeMetricFamily(
            "sagemaker_component_current_copies", "DescribeInferenceComponent's "
            "RuntimeConfig.CurrentCopyCount (copies placed on an instance)",
            labels=COMPONENT_LABELS),
        "ready": GaugeMetricFamily(
            "mme_component_ready_copies", "Copies whose serving process is ready and takes "
            "calls", labels=COMPONENT_LABELS)}
    utilization = {metric: GaugeMetricFamily(
        name.removesuffix("_ratio"), f"CloudWatch {copy_utilization.NAMESPACE} {metric} "
        "(Percent), per copy; last sample, percent / 100", labels=COPY_LABELS, unit="ratio")
        for metric, name in COPY_UTILIZATION.items()}
    for labels, component, _tally in found:
        copies["desired"].add_metric(labels, component.desired_copies)
        copies["current"].add_metric(labels, component.current_copies)
        copies["ready"].add_metric(labels, sum(len(g.ready) for g in component.groups))
        for copy in copy_utilization.copy_rows(component):
            for metric, value in copy["Utilization"].items():
                utilization[metric].add_metric(
                    [*labels, copy["CopyId"], copy["Instance"] or ""], value / 100)
    yield from copies.values()
    yield from utilization.values()
