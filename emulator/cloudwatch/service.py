"""CloudWatch's read API over the emulator's own metrics: behaviour only, no wire format.

Inputs are validated parameter dicts (timestamps as emulated epoch seconds, see
``emulator/clock.py``); outputs are dicts shaped like botocore's output shapes, with timestamps
as emulated epoch seconds. The wire modules turn both into JSON, CBOR or XML.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from emulator.clock import Clock
from emulator.cloudwatch import statistics
from emulator.cloudwatch.errors import CloudWatchError, combination, invalid
from emulator.cloudwatch.series import MetricStore, SeriesKey

MAX_DATAPOINTS = 1440  # GetMetricStatistics' documented limit per call
MAX_QUERIES = 500  # GetMetricData's documented limit: "as many as 500 MetricDataQuery structures"
LIST_PAGE = 500  # ListMetrics returns up to 500 results per call
HIGH_RESOLUTION_PERIODS = (1, 5, 10, 20, 30)
RECENTLY_ACTIVE_S = 3 * 3600.0  # RecentlyActive=PT3H


def _dimensions(items: list[dict[str, str]] | None) -> dict[str, str]:
    return {d["Name"]: d["Value"] for d in items or []}


def _check_period(period: int, name: str = "Period") -> None:
    if period not in HIGH_RESOLUTION_PERIODS and period % 60:
        # [U] wording; the rule itself is documented (1, 5, 10, 20, 30 or a multiple of 60).
        raise invalid(f"The parameter {name} must be 1, 5, 10, 20, 30, or a multiple of 60.")


def _aligned_start(start: float, period: int) -> float:
    """CloudWatch rounds StartTime down: to the minute for periods of a minute or more."""
    unit = 60 if period >= 60 else 1
    return math.floor(start / unit) * unit


class CloudWatchService:
    def __init__(self, store: MetricStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        handler = {
            "GetMetricStatistics": self.get_metric_statistics,
            "GetMetricData": self.get_metric_data,
            "ListMetrics": self.list_metrics,
        }.get(operation)
        if handler is None:
            raise CloudWatchError("InvalidAction", f"Operation {operation} is not supported by "
                                  "the emulator (GetMetricStatistics, GetMetricData, ListMetrics)")
        return handler(params)

    # -----------------------------------------------------------------------------------------
    # Bucketing: the one place emulated periods meet real sample times

    def _buckets(self, key: SeriesKey, start: float, end: float, period: int, now: float,
                 unit: str | None) -> Iterator[tuple[float, npt.NDArray[Any]]]:
        """(emulated period start, samples) for every period of [start, end) holding data."""
        real_start = self.clock.to_real(start, now)
        times, values = self.store.samples(key, real_start, self.clock.to_real(end, now), unit)
        if not times.size:
            return
        index = np.floor((times - real_start) / self.clock.real_duration(period)).astype(np.int64)
        for i in np.unique(index):
            yield start + int(i) * period, values[index == i]

    @staticmethod
    def _window(params: Mapping[str, Any], period: int) -> tuple[float, float]:
        start, end = float(params["StartTime"]), float(params["EndTime"])
        if start >= end:
            raise invalid("The parameter StartTime must be less than the parameter EndTime.")
        return _aligned_start(start, period), end

    # -----------------------------------------------------------------------------------------

    def get_metric_statistics(self, params: dict[str, Any]) -> dict[str, Any]:
        standard = params.get("Statistics") or []
        extended = params.get("ExtendedStatistics") or []
        if bool(standard) == bool(extended):
            raise combination("Must specify either Statistics or ExtendedStatistics, but not both.")
        for name in extended:
            if not statistics.is_percentile(name):
                raise invalid(f"The value {name} for parameter ExtendedStatistics is not valid.")
        period = int(params["Period"])
        _check_period(period)
        start, end = self._window(params, period)
        requested = math.ceil((end - start) / period)
        if requested > MAX_DATAPOINTS:
            raise combination(
                f"You have requested up to {requested} datapoints, which exceeds the limit of "
                f"{MAX_DATAPOINTS}. You may reduce the datapoints requested by increasing Period, "
                "or decreasing the time range.")
        key = SeriesKey.of(params["Namespace"], params["MetricName"],
                           _dimensions(params.get("Dimensions")))
        unit = params.get("Unit")
        shown_unit = unit or self.store.unit(key) or "None"
        now = self.clock.now()
        datapoints = []
        for timestamp, values in self._buckets(key, start, end, period, now, unit):
            point: dict[str, Any] = {"Timestamp": timestamp, "Unit": shown_unit}
            for name in standard:
                point[name] = statistics.compute(name, values)
            if extended:
                point["ExtendedStatistics"] = {n: statistics.compute(n, values) for n in extended}
            datapoints.append(point)
        return {"Label": params["MetricName"], "Datapoints": datapoints}

    def get_metric_data(self, params: dict[str, Any]) -> dict[str, Any]:
        queries = params["MetricDataQueries"]
        if len(queries) > MAX_QUERIES:
            # [U] wording: CloudWatch's own for a collection over its limit (PutMetricData's
            # "The collection MetricData must not have a size greater than 1000.").
            raise invalid("The collection MetricDataQueries must not have a size greater than "
                          f"{MAX_QUERIES}.")
        ids = [q["Id"] for q in queries]
        if len(set(ids)) != len(ids):
            raise CloudWatchError("ValidationError", "The values for parameter id in "
                                  "MetricDataQueries are not unique.")
        if params.get("NextToken"):
            # Every answer fits in one page here, so no token is ever handed out.
            raise CloudWatchError("InvalidNextToken", "The service couldn't process the "
                                  "NextToken because it is not valid.")
        descending = params.get("ScanBy", "TimestampDescending") == "TimestampDescending"
        now = self.clock.now()
        results = []
        for query in queries:
            stat = query.get("MetricStat")
            if query.get("Expression") is not None or stat is None:
                # [U] metric math is not emulated; say so rather than answer wrongly.
                raise CloudWatchError(
                    "ValidationError",
                    f"The query {query['Id']} must have a MetricStat: metric math expressions "
                    "are not supported by the emulator.")
            period = int(stat["Period"])
            _check_period(period, "MetricDataQueries.MetricStat.Period")
            if not statistics.is_supported(stat["Stat"]):
                raise CloudWatchError("ValidationError", f"The value {stat['Stat']} for "
                                      "parameter MetricDataQueries.MetricStat.Stat is not valid.")
            start, end = self._window(params, period)
            metric = stat["Metric"]
            key = SeriesKey.of(metric.get("Namespace", ""), metric.get("MetricName", ""),
                               _dimensions(metric.get("Dimensions")))
            points = [(ts, statistics.compute(stat["Stat"], values))
                      for ts, values in self._buckets(key, start, end, period, now,
                                                      stat.get("Unit"))]
            points.sort(reverse=descending)
            if query.get("ReturnData", True):
                results.append({
                    "Id": query["Id"], "Label": query.get("Label") or metric.get("MetricName"),
                    "Timestamps": [p[0] for p in points], "Values": [p[1] for p in points],
                    "StatusCode": "Complete",
                })
        return {"MetricDataResults": results, "Messages": []}

    def list_metrics(self, params: dict[str, Any]) -> dict[str, Any]:
        since = None
        if params.get("RecentlyActive"):
            since = self.clock.now() - self.clock.real_duration(RECENTLY_ACTIVE_S)
        filters = params.get("Dimensions") or []
        found = []
        for key in self.store.keys(active_since=since):
            if params.get("Namespace") and key.namespace != params["Namespace"]:
                continue
            if params.get("MetricName") and key.metric_name != params["MetricName"]:
                continue
            dims = dict(key.dimensions)
            if any(f["Name"] not in dims or ("Value" in f and dims[f["Name"]] != f["Value"])
                   for f in filters):
                continue
            found.append(key)
        found.sort(key=lambda k: (k.namespace, k.metric_name, k.dimensions))
        offset = _decode_token(params.get("NextToken"))
        page = found[offset: offset + LIST_PAGE]
        out: dict[str, Any] = {"Metrics": [
            {"Namespace": k.namespace, "MetricName": k.metric_name,
             "Dimensions": [{"Name": n, "Value": v} for n, v in k.dimensions]}
            for k in page]}
        if offset + LIST_PAGE < len(found):
            out["NextToken"] = base64.urlsafe_b64encode(
                json.dumps({"offset": offset + LIST_PAGE}).encode()).decode()
        return out


def _decode_token(token: str | None) -> int:
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(token.encode()))["offset"]
        if isinstance(offset, int) and offset >= 0:
            return offset
    except (ValueError, KeyError, TypeError, binascii.Error):
        pass
    raise invalid("The parameter NextToken is not valid.")
