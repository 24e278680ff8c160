"""Running statistics of each inference component's metrics, for ``/metrics`` and the page.

An endpoint for components publishes its calls' metrics
(``hosting.component_copies.ComponentMetrics``) and its copies' utilization
(``hosting.copy_utilization``) to the CloudWatch store under the one dimension
``InferenceComponentName``. ``ComponentTally`` stands in front of that store as
its ``MetricSink``: it forwards every sample unchanged and keeps, per component and metric,
CloudWatch's running statistics (SampleCount, Sum, Min, Max) and, for durations, the samples
per bucket of ``DURATION_BUCKETS_S`` (Prometheus histograms), as ``EndpointMetrics`` does for a
variant. Reading them never goes through the CloudWatch store's datapoints.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping, Sequence

from emulator.metrics import (
    DURATION_BUCKETS_S,
    MICROSECONDS,
    MetricSink,
    SinkSample,
    Statistic,
)

# The one dimension of every metric AWS publishes for an inference component (its calls' and
# its copies' utilization).
DIMENSION = "InferenceComponentName"


class ComponentTally:
    """A ``MetricSink``: every sample goes on to ``inner`` (None: no CloudWatch store) and is
    counted under its component's name (samples without the dimension only go on)."""

    def __init__(self, inner: MetricSink | None) -> None:
        self._inner = inner
        self._lock = threading.Lock()  # utilization samples come from the sampler's thread
        self._stats: dict[str, dict[str, Statistic]] = {}
        self._buckets: dict[str, dict[str, list[int]]] = {}

    def record_many(self, dimensions: Mapping[str, str],
                    samples: Sequence[SinkSample]) -> None:
        component = dimensions.get(DIMENSION)
        if component is not None:
            with self._lock:
                stats = self._stats.setdefault(component, {})
                buckets = self._buckets.setdefault(component, {})
                for _namespace, unit, name, value in samples:
                    stats.setdefault(name, Statistic()).add(value)
                    if unit == MICROSECONDS:
                        counts = buckets.setdefault(name, [0] * (len(DURATION_BUCKETS_S) + 1))
                        counts[bisect.bisect_left(DURATION_BUCKETS_S, value / 1e6)] += 1
        if self._inner is not None:
            self._inner.record_many(dimensions, samples)

    def statistics(self, component: str) -> dict[str, Statistic]:
        """A copy of the component's statistics by metric name (only metrics it has had)."""
        with self._lock:
            return {name: Statistic(s.sample_count, s.total, s.minimum, s.maximum)
                    for name, s in self._stats.get(component, {}).items()}

    def duration_buckets(self, component: str, metric: str) -> list[int]:
        """Samples per bucket of ``DURATION_BUCKETS_S`` (not cumulative; the last one past
        them); all zeros for a duration the component has not had."""
        with self._lock:
            counts = self._buckets.get(component, {}).get(metric)
            return list(counts) if counts is not None else [0] * (len(DURATION_BUCKETS_S) + 1)
