"""CloudWatch on the emulator's port over the emulator's own metrics: ``series`` (samples,
bounded retention), ``statistics``, ``service`` (the read API and PutMetricData), ``alarms``
(every alarm, its state, evaluation and actions; deployments watch it too), ``wire``
(rpc-v2-cbor, JSON 1.0, query) and ``routes`` (HTTP)."""

from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.routes import build_cloudwatch_router, json_handler, query_handler
from emulator.cloudwatch.series import MetricStore
from emulator.cloudwatch.service import CloudWatchService

__all__ = ["AlarmStore", "CloudWatchService", "MetricStore", "build_cloudwatch_router",
           "json_handler", "query_handler"]
