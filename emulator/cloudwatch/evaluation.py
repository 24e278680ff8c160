"""One evaluation of one metric alarm, as CloudWatch documents it: behaviour only, no state.

- The alarm looks at its last ``EvaluationPeriods`` periods of ``Period`` emulated seconds,
  ending at the moment of evaluation [U: CloudWatch aligns periods to the clock; the emulated
  past is compressed (emulator/clock.py), so the windows slide with the present instead].
- A period's datapoint is the alarm's statistic (``Statistic`` or ``ExtendedStatistic``) of the
  samples in it, or the value of the one ``Metrics[]`` query with ``ReturnData`` (metric math,
  ``emulator/cloudwatch/metric_math.py``); a period without samples has no datapoint (missing).
- ``DatapointsToAlarm`` (M, default N) out of N breaching -> ALARM.
- ``TreatMissingData``: ``breaching`` / ``notBreaching`` count a missing datapoint as such;
  ``missing``: all missing -> INSUFFICIENT_DATA, else the present ones decide (fewer than M
  breaching -> OK) [U]; ``ignore``: all missing -> the state stays, else ALARM at M breaching,
  OK only when enough present datapoints are good that M cannot breach, else it stays [U].
- ``EvaluateLowSampleCountPercentile: ignore``: a percentile alarm whose datapoints hold fewer
  samples than 10 / (1 - p/100) keeps its state (AWS: "the alarm state doesn't change") [U: the
  bound].
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from emulator.clock import Clock
from emulator.cloudwatch import metric_math, statistics
from emulator.cloudwatch.series import MetricStore, SeriesKey

OK, ALARM, INSUFFICIENT_DATA = "OK", "ALARM", "INSUFFICIENT_DATA"

OPERATORS: dict[str, tuple[str, Callable[..., Any]]] = {
    "GreaterThanOrEqualToThreshold": ("greater than or equal to", np.greater_equal),
    "GreaterThanThreshold": ("greater than", np.greater),
    "LessThanThreshold": ("less than", np.less),
    "LessThanOrEqualToThreshold": ("less than or equal to", np.less_equal),
}


@dataclass(frozen=True)
class Outcome:
    state: str
    reason: str
    reason_data: str
    value: float | None  # the most recent datapoint (what a step scaling policy compares)


def _dimensions(items: list[dict[str, str]] | None) -> dict[str, str]:
    return {d["Name"]: d["Value"] for d in items or []}


def _reason_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%d/%m/%y %H:%M:%S")


def _data_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+0000"


def _number(value: float) -> str:
    return repr(float(value))


class _Periods:
    """The alarm's N windows, most recent last; real bounds, emulated start times."""

    def __init__(self, clock: Clock, now: float, period: int, count: int) -> None:
        self.width = clock.real_duration(period)
        self.count = count
        self.now = now
        self.start = now - count * self.width
        self.emulated_starts = [clock.to_emulated(self.start + k * self.width, now)
                                for k in range(count)]

    def series(self, store: MetricStore, key: SeriesKey, statistic: str,
               unit: str | None) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """(values, sample counts) per window, NaN where a window has no sample."""
        times, values = store.samples(key, self.start, self.now, unit)
        out = np.full(self.count, np.nan)
        counts = np.zeros(self.count)
        if times.size:
            index = np.clip(np.floor((times - self.start) / self.width).astype(np.int64), 0,
                            self.count - 1)
            for k in np.unique(index):
                selected = values[index == k]
                out[k] = statistics.compute(statistic, selected)
                counts[k] = selected.size
        return out, counts


def evaluate(config: dict[str, Any], store: MetricStore, clock: Clock, now: float,
             current: str,
             expressions: Mapping[str, metric_math.Program] | None = None) -> Outcome | None:
    """The alarm's state now, or None when it stays as it is (``ignore``). ``expressions``:
    the alarm's metric math as parsed when it was put (parsed here when not given)."""
    count = int(config["EvaluationPeriods"])
    required = int(config.get("DatapointsToAlarm") or count)
    threshold = float(config["Threshold"])
    words, compare = OPERATORS[config["ComparisonOperator"]]
    treat = config.get("TreatMissingData") or "missing"
    statistic: str | None = config.get("Statistic") or config.get("ExtendedStatistic")
    if config.get("Metrics"):
        period = period_of(config)
        periods = _Periods(clock, now, period, count)
        series: dict[str, np.ndarray[Any, Any]] = {}
        samples = np.zeros(count)
        for query in config["Metrics"]:
            stat = query.get("MetricStat")
            if stat is None:
                continue
            metric = stat["Metric"]
            key = SeriesKey.of(metric.get("Namespace", ""), metric["MetricName"],
                               _dimensions(metric.get("Dimensions")))
            series[query["Id"]], counts = periods.series(store, key, stat["Stat"],
                                                         stat.get("Unit"))
            samples = np.maximum(samples, counts)
        metric_ids = [q["Id"] for q in config["Metrics"] if q.get("MetricStat")]
        for query in config["Metrics"]:  # in order: an expression may use one before it
            if query.get("Expression"):
                program = (expressions or {}).get(query["Id"]) or metric_math.parse(
                    query["Expression"])
                series[query["Id"]] = metric_math.evaluate(program, series, count, metric_ids)
        returned = next(q for q in config["Metrics"] if q.get("ReturnData", True))
        values = series[returned["Id"]]
        statistic = None
    else:
        period = int(config["Period"])
        periods = _Periods(clock, now, period, count)
        key = SeriesKey.of(config["Namespace"], config["MetricName"],
                           _dimensions(config.get("Dimensions")))
        values, samples = periods.series(store, key, str(statistic), config.get("Unit"))

    present = ~np.isnan(values)
    breaching = present & compare(np.where(present, values, 0.0), threshold)
    missing = int((~present).sum())
    bad, good = int(breaching.sum()), int((present & ~breaching).sum())
    if treat == "breaching":
        bad, missing = bad + missing, 0
    elif treat == "notBreaching":
        good, missing = good + missing, 0

    if (config.get("EvaluateLowSampleCountPercentile") == "ignore" and statistic
            and statistics.is_percentile(statistic) and present.any()):
        p = float(statistic[1:])
        least = 10 / (1 - p / 100) if p < 100 else math.inf
        if (samples[present] < least).any():
            return None

    if bad >= required:
        state = ALARM
    elif missing == count:
        if treat == "ignore":
            return None
        state = INSUFFICIENT_DATA
    elif treat == "ignore" and good <= count - required:
        return None  # M breaching datapoints are still possible among the missing ones
    else:
        state = OK
    latest = float(values[present][-1]) if present.any() else None
    reason = _reason(state, current, values, present, breaching, periods, count, required,
                     words, threshold, missing, treat)
    data: dict[str, Any] = {
        "version": "1.0", "queryDate": _data_time(now),
        "startDate": _data_time(periods.emulated_starts[0]),
        **({"statistic": statistic} if statistic else {}),
        "period": period,
        "recentDatapoints": [float(v) for v in values[present]],
        "threshold": threshold,
        "evaluatedDatapoints": [
            {"timestamp": _data_time(periods.emulated_starts[k]),
             **({"sampleCount": float(samples[k])} if samples[k] else {}),
             **({"value": float(values[k])} if present[k] else {})}
            for k in reversed(range(count))],
    }
    return Outcome(state, reason, json.dumps(data, separators=(",", ":")), latest)


def _reason(state: str, current: str, values: np.ndarray[Any, Any],
            present: np.ndarray[Any, Any], breaching: np.ndarray[Any, Any], periods: _Periods,
            count: int, required: int, words: str, threshold: float, missing: int,
            treat: str) -> str:
    if state == INSUFFICIENT_DATA:
        return (f"Insufficient Data: {count} datapoint{'s were' if count > 1 else ' was'} "
                "unknown.")
    chosen = breaching if state == ALARM else present & ~breaching
    if state == OK and not chosen.any() and breaching.any():
        # Some breached, fewer than M, the rest missing: say so [U] (AWS's wording unknown).
        listed = int(breaching.sum())
        shown = ", ".join(f"{_number(values[k])} ({_reason_time(periods.emulated_starts[k])})"
                          for k in reversed(range(count)) if breaching[k])
        return (f"Threshold Crossed: {listed} out of the last {count} datapoints [{shown}] "
                f"{'were' if listed != 1 else 'was'} {words} the threshold "
                f"({_number(threshold)}), fewer than the {required} needed for ALARM; "
                f"{missing} datapoint{'s were' if missing != 1 else ' was'} missing.")
    shown = ", ".join(f"{_number(values[k])} ({_reason_time(periods.emulated_starts[k])})"
                      for k in reversed(range(count)) if chosen[k])
    listed = int(chosen.sum())
    verb = "were" if listed != 1 else "was"
    relation = words if state == ALARM else f"not {words}"
    if count == 1 and listed == 1:
        text = f"Threshold Crossed: 1 datapoint [{shown}] was {relation} the threshold " \
               f"({_number(threshold)})."
    elif listed:
        text = (f"Threshold Crossed: {listed} out of the last {count} datapoints [{shown}] "
                f"{verb} {relation} the threshold ({_number(threshold)}) (minimum "
                f"{required} datapoint{'s' if required > 1 else ''} for {current} -> {state} "
                "transition).")
    else:
        treated = "Breaching" if treat == "breaching" else "NonBreaching"
        text = (f"Threshold Crossed: no datapoints were received for {count} period"
                f"{'s' if count > 1 else ''} and {count} missing datapoint"
                f"{'s were' if count > 1 else ' was'} treated as [{treated}].")
    return text


def period_of(config: dict[str, Any]) -> int:
    """An alarm's period: its own, or its metric math queries' (one period for all)."""
    if config.get("Metrics"):
        periods = {int(q["MetricStat"]["Period"]) for q in config["Metrics"]
                   if q.get("MetricStat")}
        periods |= {int(q["Period"]) for q in config["Metrics"] if q.get("Period")}
        return min(periods) if periods else 60
    return int(config["Period"])
