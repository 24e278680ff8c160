"""Running statistics of each inference component's metrics, for ``/metrics`` and the page.

An endpoint for components publishes its calls' metrics
(``hosting.component_copies.ComponentMetrics``) and its copies' utilization
(``hosting.copy_utilization``) to the CloudWatch store under the one dimension
``InferenceComponentName`` and, with EnableEnhancedMetrics, per copy under
``container_dimensions``. ``ComponentTally`` stands in front of that store as
its ``MetricSink``: it forwards every sample unchanged and keeps, per component (the samples
under its one dimension only: a copy's series repeats them), a ``StatisticsTable``
(CloudWatch's running statistics per metric and, for durations, the samples per bucket of
``DURATION_BUCKETS_S``), as ``EndpointMetrics`` does for a variant. Reading them
never goes through the CloudWatch store's datapoints.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from emulator.metrics import (
    DURATION_BUCKETS_S,
    MICROSECONDS,
    MetricSink,
    SinkSample,
    Statistic,
    StatisticsTable,
)

# The one dimension of every metric AWS publishes for an inference component (its calls' and
# its copies' utilization).
DIMENSION = "InferenceComponentName"


def container_dimensions(endpoint: str, variant: str, component: str, instance_id: str,
                         container_id: str) -> dict[str, str]:
    """The dimensions of one copy's series with EnableEnhancedMetrics, in both namespaces
    (``AWS/SageMaker``: its calls' invocation metrics; ``/aws/sagemaker/InferenceComponents``:
    its utilization). AWS's enhanced-metrics page says only that ``InstanceId`` and
    ``ContainerId`` "become available alongside the existing namespace dimensions"; [U] the set
    is the one AWS's enhanced-metrics sample queries for a copy's GPU utilization
    (``{/aws/sagemaker/InferenceComponents,EndpointName,VariantName,InstanceId,ContainerId,
    InferenceComponentName,GpuId}``) less ``GpuId`` (no GPU is attributed to a copy here),
    and the invocation metrics take the same set."""
    return {"EndpointName": endpoint, "VariantName": variant, DIMENSION: component,
            "InstanceId": instance_id, "ContainerId": container_id}


class ComponentTally:
    """A ``MetricSink``: every sample goes on to ``inner`` (None: no CloudWatch store) and is
    counted under its component's name (samples under other dimensions only go on)."""

    def __init__(self, inner: MetricSink | None) -> None:
        self._inner = inner
        self._lock = threading.Lock()  # a component's first samples may come from two threads
        self._tables: dict[str, StatisticsTable] = {}

    def _table(self, component: str) -> StatisticsTable:
        table = self._tables.get(component)
        if table is None:
            with self._lock:
                table = self._tables.setdefault(component, StatisticsTable())
        return table

    def record_many(self, dimensions: Mapping[str, str],
                    samples: Sequence[SinkSample]) -> None:
        component = dimensions.get(DIMENSION) if len(dimensions) == 1 else None
        if component is not None:
            table = self._table(component)
            for _namespace, unit, name, _value in samples:
                if unit == MICROSECONDS:
                    table.count_duration(name)
            table.add_many((name, value) for _namespace, _unit, name, value in samples)
        if self._inner is not None:
            self._inner.record_many(dimensions, samples)

    def statistics(self, component: str) -> dict[str, Statistic]:
        """A copy of the component's statistics by metric name (only metrics it has had)."""
        table = self._tables.get(component)
        return table.statistics() if table is not None else {}

    def duration_buckets(self, component: str, metric: str) -> list[int]:
        """Samples per bucket of ``DURATION_BUCKETS_S`` (not cumulative; the last one past
        them); all zeros for a duration the component has not had."""
        table = self._tables.get(component)
        counts = table.duration_buckets().get(metric) if table is not None else None
        return counts if counts is not None else [0] * (len(DURATION_BUCKETS_S) + 1)
