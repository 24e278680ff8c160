"""CloudWatch's read API over the emulator's own metrics: behaviour only, no wire format.
The alarm operations and PutMetricData are ``alarm_api.py``'s, dispatched from here.

Inputs are validated parameter dicts (timestamps as emulated epoch seconds, see
``emulator/clock.py``); outputs are dicts shaped like botocore's output shapes, with timestamps
as emulated epoch seconds. The wire modules turn both into JSON, CBOR or XML.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from emulator.clock import Clock
from emulator.cloudwatch import statistics
from emulator.cloudwatch.alarm_api import AlarmApi
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError, combination, invalid
from emulator.cloudwatch.series import MetricStore, SeriesKey

MAX_DATAPOINTS = 1440  # GetMetricStatistics' documented limit per call
MAX_QUERIES = 500  # GetMetricData's documented limit: "as many as 500 MetricDataQuery structures"
MAX_DATA_POINTS = 100_800  # GetMetricData's MaxDatapoints when omitted (per call, then a page)
_QUERY_ID = re.compile(r"[a-z][a-zA-Z0-9_]*")
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
    def __init__(self, store: MetricStore, clock: Clock, alarms: AlarmStore | None = None) -> None:
        self.store = store
        self.clock = clock
        self.alarms = alarms
        self._alarm_api = AlarmApi(alarms, store, clock).handlers() if alarms else {}

    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """``call`` off the event loop: a large GetMetricData is seconds of numpy and Python."""
        return await asyncio.to_thread(self.call, operation, params)

    def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        handler = {
            "GetMetricStatistics": self.get_metric_statistics,
            "GetMetricData": self.get_metric_data,
            "ListMetrics": self.list_metrics,
            **self._alarm_api,
        }.get(operation)
        if handler is None:
            raise CloudWatchError("InvalidAction", f"Operation {operation} is not supported by "
                                  "the emulator")
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
        # One pass over the samples, not one per period: a mask per period cost periods x
        # samples (86,400 one-second periods of a full series: minutes of the event loop).
        order = np.argsort(index, kind="stable")  # samples arrive in time order: already sorted
        index, values = index[order], values[order]
        bounds = np.flatnonzero(np.diff(index)) + 1
        for first, group in zip(np.concatenate(([0], bounds)), np.split(values, bounds),
                                strict=True):
            yield start + int(index[first]) * period, group

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
        for query in queries:
            self._check_query(query)
        budget = params.get("MaxDatapoints") or MAX_DATA_POINTS
        if budget < 1:
            raise invalid("The parameter MaxDatapoints must be greater than 0.")  # [U] wording
        first, skip = _decode_data_token(params.get("NextToken"), len(queries))
        descending = params.get("ScanBy", "TimestampDescending") == "TimestampDescending"
        now = self.clock.now()
        results: list[dict[str, Any]] = []
        out: dict[str, Any] = {"MetricDataResults": results, "Messages": []}
        for position in range(first, len(queries)):
            query = queries[position]
            if not query.get("ReturnData", True):
                continue
            stat = query["MetricStat"]
            period = int(stat["Period"])
            start, end = self._window(params, period)
            metric = stat["Metric"]
            key = SeriesKey.of(metric.get("Namespace", ""), metric.get("MetricName", ""),
                               _dimensions(metric.get("Dimensions")))
            points = [(ts, statistics.compute(stat["Stat"], values))
                      for ts, values in self._buckets(key, start, end, period, now,
                                                      stat.get("Unit"))]
            points.sort(reverse=descending)
            offset = skip if position == first else 0
            page = points[offset: offset + budget]
            budget -= len(page)
            complete = offset + len(page) == len(points)
            results.append({
                "Id": query["Id"], "Label": query.get("Label") or metric.get("MetricName"),
                "Timestamps": [p[0] for p in page], "Values": [p[1] for p in page],
                "StatusCode": "Complete" if complete else "PartialData",
            })
            if not complete or (budget == 0 and position + 1 < len(queries)):
                # [U] AWS pages at MaxDatapoints (100,800 by default) without saying where; here
                # a page ends there, and the next one goes on from the same query and point.
                resume = (position, offset + len(page)) if not complete else (position + 1, 0)
                out["NextToken"] = _encode_data_token(*resume)
                break
        return out

    @staticmethod
    def _check_query(query: dict[str, Any]) -> None:
        """Every query is checked before any is computed: a bad one fails the whole call."""
        if not _QUERY_ID.fullmatch(query["Id"]):
            # The rule is documented ("The first character must be a lowercase letter"; letters,
            # numbers and underscore); [U] the wording.
            raise CloudWatchError("ValidationError", f"The value {query['Id']} for parameter "
                                  "MetricDataQueries.Id is not valid: it must start with a "
                                  "lowercase letter and hold only letters, numbers and _.")
        stat = query.get("MetricStat")
        if query.get("Expression") is not None or stat is None:
            # [U] metric math is not emulated; say so rather than answer wrongly.
            raise CloudWatchError(
                "ValidationError",
                f"The query {query['Id']} must have a MetricStat: metric math expressions "
                "are not supported by the emulator.")
        _check_period(int(stat["Period"]), "MetricDataQueries.MetricStat.Period")
        if not statistics.is_supported(stat["Stat"]):
            raise CloudWatchError("ValidationError", f"The value {stat['Stat']} for "
                                  "parameter MetricDataQueries.MetricStat.Stat is not valid.")

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


def _encode_data_token(query: int, point: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"query": query, "point": point})
                                    .encode()).decode()


def _decode_data_token(token: str | None, queries: int) -> tuple[int, int]:
    """(query, point) a GetMetricData page goes on from; InvalidNextToken for anything else."""
    if not token:
        return 0, 0
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        query, point = decoded["query"], decoded["point"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        query = point = None
    if (isinstance(query, int) and isinstance(point, int) and not isinstance(query, bool)
            and not isinstance(point, bool) and 0 <= query < queries and point >= 0):
        return query, point
    raise CloudWatchError("InvalidNextToken", "The service couldn't process the NextToken "
                          "because it is not valid.")


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
