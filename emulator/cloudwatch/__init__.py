"""CloudWatch's read API (GetMetricStatistics, GetMetricData, ListMetrics) over the emulator's
own metrics: ``store`` (samples, bounded retention), ``statistics``, ``service`` (behaviour),
``wire`` (rpc-v2-cbor, JSON 1.0, query) and ``routes`` (HTTP)."""

from emulator.cloudwatch.routes import build_cloudwatch_router, json_handler, query_handler
from emulator.cloudwatch.series import MetricStore
from emulator.cloudwatch.service import CloudWatchService

__all__ = ["CloudWatchService", "MetricStore", "build_cloudwatch_router", "json_handler",
           "query_handler"]
