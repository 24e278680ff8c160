"""The CloudWatch metrics of an endpoint, with AWS's names, units and statistics.

Each production variant keeps running statistics (SampleCount, Sum, Min, Max; Average derived)
per metric, dimensioned by EndpointName and VariantName as CloudWatch does. Instance metrics
(LoadedModelCount, CPU/Memory/Disk utilization) are samples taken per instance under the same
dimensions, so their Sum adds instances up and their Average is the per-instance mean, as in
CloudWatch. Every sample also goes to an optional ``sink`` (the CloudWatch API's store).
Durations (unit Microseconds) are also counted into fixed buckets, so that ``GET /metrics``
(``emulator/prometheus.py``) can serve them as Prometheus histograms; the JSON at
``GET /_emulator/metrics`` is CloudWatch's statistics.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

MICROSECONDS = "Microseconds"
NONE = "None"
PERCENT = "Percent"
INSTANCE_NAMESPACE = "/aws/sagemaker/Endpoints"

# name -> (CloudWatch namespace, unit)
METRICS: dict[str, tuple[str, str]] = {
    "ModelLoadingWaitTime": ("AWS/SageMaker", MICROSECONDS),
    "ModelDownloadingTime": ("AWS/SageMaker", MICROSECONDS),
    "ModelLoadingTime": ("AWS/SageMaker", MICROSECONDS),
    "ModelUnloadingTime": ("AWS/SageMaker", MICROSECONDS),
    "ModelCacheHit": ("AWS/SageMaker", NONE),
    "LoadedModelCount": (INSTANCE_NAMESPACE, NONE),
    "Invocations": ("AWS/SageMaker", NONE),
    "InvocationsPerInstance": ("AWS/SageMaker", NONE),
    "Invocation4XXErrors": ("AWS/SageMaker", NONE),
    "Invocation5XXErrors": ("AWS/SageMaker", NONE),
    "InvocationModelErrors": ("AWS/SageMaker", NONE),
    "ModelLatency": ("AWS/SageMaker", MICROSECONDS),
    "OverheadLatency": ("AWS/SageMaker", MICROSECONDS),
    # Multi-container endpoints: one series per container (dimension ContainerName).
    "ContainerLatency": ("AWS/SageMaker", MICROSECONDS),
    "CPUUtilization": (INSTANCE_NAMESPACE, PERCENT),
    "MemoryUtilization": (INSTANCE_NAMESPACE, PERCENT),
    "DiskUtilization": (INSTANCE_NAMESPACE, PERCENT),
    "GPUUtilization": (INSTANCE_NAMESPACE, PERCENT),
    "GPUMemoryUtilization": (INSTANCE_NAMESPACE, PERCENT),
}

# Upper bounds (seconds) of the duration buckets: from a fast model's overhead (sub-millisecond)
# to a cold load of a large model (minutes).
DURATION_BUCKETS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

# One sample for a sink: (namespace, unit, metric name, value).
SinkSample = tuple[str, str, str, float]


# With EnableEnhancedMetrics, the metrics that are also published per instance (InstanceId):
# each call's invocation metrics, by the instance that answered it, and the instance metrics.
PER_INSTANCE_INVOCATION_METRICS = frozenset({
    "Invocations", "Invocation4XXErrors", "Invocation5XXErrors", "InvocationModelErrors",
    "ModelLatency", "OverheadLatency"})
PER_INSTANCE_UTILIZATION_METRICS = frozenset({
    "CPUUtilization", "MemoryUtilization", "DiskUtilization", "GPUUtilization",
    "GPUMemoryUtilization"})
# EnableDetailedObservability's per-instance host metrics (AWS names CPU, memory and disk).
HOST_METRICS = frozenset({"CPUUtilization", "MemoryUtilization", "DiskUtilization"})


@dataclass(frozen=True)
class ExtraSeries:
    """The series an endpoint config adds to the variant's {EndpointName, VariantName}.

    ``config_name``: Invocations also per {EndpointName, VariantName, EndpointConfigName}, so
    that a deployment's two fleets can be told apart. ``enhanced`` (EnableEnhancedMetrics):
    invocation and utilization metrics also per {EndpointName, VariantName, InstanceId}.
    ``host_metrics`` (EnableDetailedObservability): CPU, memory and disk utilization per
    InstanceId.
    """

    config_name: str = ""
    enhanced: bool = False
    host_metrics: bool = False

    @property
    def per_call(self) -> bool:
        return bool(self.config_name) or self.enhanced

    @property
    def per_instance_utilization(self) -> frozenset[str]:
        """The utilization metrics also published per InstanceId."""
        if self.enhanced:
            return PER_INSTANCE_UTILIZATION_METRICS
        return HOST_METRICS if self.host_metrics else frozenset()


# The moment the samples recorded in this context are stamped with, on the emulator's timeline
# (None: the moment they are recorded). The utilization sampler sets it to its tick: a tick
# that runs late (a busy machine, a queue for threads) still gives the period it belongs to its
# one datapoint, as SageMaker's publishing does, instead of two in the next period and none in
# its own (an alarm would read missing data). Set per task or thread, so calls recorded
# meanwhile are stamped when they end.
SAMPLED_AT: ContextVar[float | None] = ContextVar("SAMPLED_AT", default=None)


class MetricSink(Protocol):
    """Where every sample also goes (the CloudWatch API's store, ``emulator/cloudwatch``)."""

    def record_many(self, dimensions: Mapping[str, str],
                    samples: Sequence[SinkSample]) -> None:
        """Samples under one set of dimensions, in order, stamped now (at ``SAMPLED_AT``
        where it is set)."""


@dataclass
class Statistic:
    sample_count: int = 0
    total: float = 0.0
    minimum: float = math.inf
    maximum: float = -math.inf

    def add(self, value: float) -> None:
        self.sample_count += 1
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)

    def as_dict(self) -> dict[str, float]:
        if not self.sample_count:
            return {"SampleCount": 0, "Sum": 0.0, "Average": 0.0, "Minimum": 0.0, "Maximum": 0.0}
        return {
            "SampleCount": self.sample_count,
            "Sum": self.total,
            "Average": self.total / self.sample_count,
            "Minimum": self.minimum,
            "Maximum": self.maximum,
        }


    def merge(self, other: Statistic) -> None:
        self.sample_count += other.sample_count
        self.total += other.total
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)


class StatisticsTable:
    """Running statistics per metric name (CloudWatch's SampleCount, Sum, Minimum, Maximum) and,
    for durations, the samples per bucket of ``DURATION_BUCKETS_S`` (Prometheus histograms):
    what a production variant and an inference component keep of their metrics. Thread-safe:
    utilization samples come from the sampler's thread."""

    def __init__(self, names: Iterable[str] = (), durations: Iterable[str] = ()) -> None:
        """``names``: metrics that read as zero before their first sample (others appear with
        it); ``durations``: the metrics counted into buckets (more with ``count_duration``)."""
        self._lock = threading.Lock()
        self._stats = {name: Statistic() for name in names}
        # Per duration metric: samples per bucket of DURATION_BUCKETS_S, the last one past them.
        self._buckets = {name: [0] * (len(DURATION_BUCKETS_S) + 1) for name in durations}

    def count_duration(self, name: str) -> None:
        """Count ``name``'s samples into buckets from now on."""
        if name not in self._buckets:
            with self._lock:
                self._buckets.setdefault(name, [0] * (len(DURATION_BUCKETS_S) + 1))

    def add_many(self, samples: Iterable[tuple[str, float]]) -> None:
        stats, all_buckets = self._stats, self._buckets
        with self._lock:
            for name, value in samples:
                stat = stats.get(name)
                if stat is None:
                    stat = stats[name] = Statistic()
                stat.sample_count += 1
                stat.total += value
                if value < stat.minimum:
                    stat.minimum = value
                if value > stat.maximum:
                    stat.maximum = value
                buckets = all_buckets.get(name)
                if buckets is not None:
                    buckets[bisect.bisect_left(DURATION_BUCKETS_S, value / 1e6)] += 1

    def statistics(self) -> dict[str, Statistic]:
        """A copy of the statistics by metric name."""
        with self._lock:
            return {name: Statistic(s.sample_count, s.total, s.minimum, s.maximum)
                    for name, s in self._stats.items()}

    def duration_buckets(self) -> dict[str, list[int]]:
        """Per duration metric, samples per bucket (not cumulative; see DURATION_BUCKETS_S)."""
        with self._lock:
            return {name: list(counts) for name, counts in self._buckets.items()}


class EndpointMetrics:
    """The metrics of one production variant (CloudWatch dimensions EndpointName, VariantName)."""

    def __init__(self, endpoint_name: str, variant_name: str,
                 sink: MetricSink | None = None, series: ExtraSeries | None = None) -> None:
        self.dimensions = {"EndpointName": endpoint_name, "VariantName": variant_name}
        self.series = series or ExtraSeries()
        self._table = StatisticsTable(
            METRICS, (name for name, (_ns, unit) in METRICS.items() if unit == MICROSECONDS))
        self._sink = sink
        self._soon: list[tuple[str, float]] = []  # record_soon's samples, not yet recorded
        # record_soon's calls for the extra series: (instance, the call's samples)
        self._soon_series: list[tuple[str | None, tuple[tuple[str, float], ...]]] = []
        self.instances: dict[str, InstanceMetrics] = {}

    def record(self, name: str, value: float,
               dimensions: dict[str, str] | None = None) -> None:
        """``dimensions`` adds to the variant's (ContainerLatency's ContainerName)."""
        if name not in METRICS:
            raise KeyError(f"unknown metric {name}")
        self._table.add_many(((name, value),))
        if self._sink is not None:
            namespace, unit = METRICS[name]
            self._sink.record_many({**self.dimensions, **(dimensions or {})},
                                   ((namespace, unit, name, value),))

    def record_many(self, samples: Iterable[tuple[str, float]]) -> None:
        """Several samples under the variant's dimensions, as ``record`` one by one would (the
        same statistics, buckets and sink calls, in order), for the price of one: an invocation
        records six to nine of them."""
        samples = tuple(samples)
        for name, _value in samples:
            if name not in METRICS:
                raise KeyError(f"unknown metric {name}")
        self._table.add_many(samples)
        if self._sink is not None:  # one call for the batch: one clock reading, one lock
            self._sink.record_many(self.dimensions, [(*METRICS[name], name, value)
                                                     for name, value in samples])

    def record_soon(self, samples: Sequence[tuple[str, float]],
                    instance_id: str | None = None) -> None:
        """``record_many``, run by the event loop once the current step is done.

        The request path records this way so that the bookkeeping is not between Triton's answer
        and the client's: the response is written when the app sends its last body part
        (``emulator/http_protocol.py``), within the step, so the samples follow it. Anything
        the loop handles afterwards (the client's next request, a read of the metrics) sees
        them: callbacks run in the order they were scheduled. Samples recorded soon before the
        callback runs join its batch: under load one callback records several calls.
        """
        if not self._soon and not self._soon_series:
            asyncio.get_running_loop().call_soon(self._record_pending)
        self._soon.extend(samples)
        if self._sink is not None and self.series.per_call:
            self._soon_series.append((instance_id, tuple(samples)))

    def _record_pending(self) -> None:
        samples, self._soon = self._soon, []
        calls, self._soon_series = self._soon_series, []
        if samples:
            self.record_many(samples)
        for instance_id, call in calls:
            self.record_series(call, instance_id)

    def record_now(self, samples: Sequence[tuple[str, float]],
                   instance_id: str | None = None) -> None:
        """One call's samples in the variant's statistics and the extra series, at once: a call
        cut short (no answer will be written to wait for)."""
        self.record_many(samples)
        self.record_series(samples, instance_id)

    def record_container_latencies(self, latencies: Sequence[tuple[str, float]]) -> None:
        """ContainerLatency of each container a call went through, one series per container."""
        for container, seconds in latencies:
            self.record("ContainerLatency", seconds * 1e6, {"ContainerName": container})

    def record_series(self, samples: Sequence[tuple[str, float]],
                      instance_id: str | None) -> None:
        """One call's samples in the extra series its endpoint config asks for (``ExtraSeries``):
        Invocations per EndpointConfigName; with enhanced metrics the invocation metrics per
        InstanceId (the instance that answered; none when the call failed before one was
        chosen)."""
        sink, series = self._sink, self.series
        if sink is None:
            return
        if series.config_name:
            invocations = [(*METRICS[name], name, value) for name, value in samples
                           if name == "Invocations"]
            if invocations:
                sink.record_many({**self.dimensions, "EndpointConfigName": series.config_name},
                                 invocations)
        if series.enhanced and instance_id is not None:
            per_instance = [(*METRICS[name], name, value) for name, value in samples
                            if name in PER_INSTANCE_INVOCATION_METRICS]
            if per_instance:
                sink.record_many({**self.dimensions, "InstanceId": instance_id}, per_instance)

    def publish(self, dimensions: dict[str, str], name: str, value: float) -> None:
        """One sample in a series of its own only (the variant's dimensions and
        ``dimensions``), outside the variant's statistics."""
        if self._sink is not None:
            self._sink.record_many({**self.dimensions, **dimensions},
                                   ((*METRICS[name], name, value),))

    def for_instance(self, instance_id: str) -> InstanceMetrics:
        view = self.instances[instance_id] = InstanceMetrics(self, instance_id)
        return view

    def forget_instance(self, instance_id: str) -> None:
        self.instances.pop(instance_id, None)

    @property
    def loaded_model_count(self) -> int:
        return sum(i.loaded_model_count for i in list(self.instances.values()))

    def statistics(self) -> dict[str, Statistic]:
        return self._table.statistics()

    def duration_buckets(self) -> dict[str, list[int]]:
        """Per duration metric, samples per bucket (not cumulative; see DURATION_BUCKETS_S)."""
        return self._table.duration_buckets()

    def snapshot(self) -> dict[str, Any]:
        return snapshot_of(self.dimensions, self.statistics(), self.loaded_model_count)


@dataclass
class InstanceMetrics:
    """What one instance's model manager records: samples go to its variant's statistics."""

    variant: EndpointMetrics
    instance_id: str
    loaded_model_count: int = 0
    latest: dict[str, float] = field(default_factory=dict)  # utilization, last sample

    def record(self, name: str, value: float) -> None:
        self.variant.record(name, value)

    def record_soon(self, samples: Sequence[tuple[str, float]]) -> None:
        self.variant.record_soon(samples, self.instance_id)

    def set_loaded_model_count(self, count: int) -> None:
        """LoadedModelCount is sampled at every change, so its Maximum/Average mean something."""
        self.loaded_model_count = count
        self.variant.record("LoadedModelCount", count)

    def sample(self, name: str, value: float) -> None:
        self.latest[name] = value
        self.variant.record(name, value)
        if name in self.variant.series.per_instance_utilization:
            self.variant.publish({"InstanceId": self.instance_id}, name, value)


def snapshot_of(dimensions: dict[str, str], stats: dict[str, Statistic],
                loaded_model_count: int) -> dict[str, Any]:
    metrics = {
        name: {"Namespace": ns, "Unit": unit, **stats[name].as_dict()}
        for name, (ns, unit) in METRICS.items()
    }
    metrics["LoadedModelCount"]["Current"] = loaded_model_count
    return {"Dimensions": dict(dimensions), "Metrics": metrics}


def endpoint_snapshot(name: str, variants: list[EndpointMetrics]) -> dict[str, Any]:
    """The endpoint's figures: all variants added up, and each variant on its own.

    With one variant the top level is that variant (dimensions EndpointName and VariantName);
    with several it is their sum under EndpointName alone.
    """
    total = {metric: Statistic() for metric in METRICS}
    for variant in variants:
        for metric, stat in variant.statistics().items():
            total[metric].merge(stat)
    dims = dict(variants[0].dimensions) if len(variants) == 1 else {"EndpointName": name}
    snapshot = snapshot_of(dims, total, sum(v.loaded_model_count for v in variants))
    snapshot["Variants"] = {v.dimensions["VariantName"]: v.snapshot() for v in variants}
    return snapshot

