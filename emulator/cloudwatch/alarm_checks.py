"""Whether a metric alarm's configuration is one the emulator evaluates (PutMetricAlarm, and the
alarms Application Auto Scaling creates), or the CloudWatch error that says why not: behaviour
only. What the emulator does not evaluate is refused with a ValidationError that says so, never
stored and ignored; every metric math expression is evaluated once here, so what is stored can be
evaluated. Limits are CloudWatch's documented ones; wordings marked [U] are the emulator's.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from emulator.cloudwatch import metric_math, statistics
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError, combination, invalid
from emulator.cloudwatch.evaluation import OPERATORS
from emulator.cloudwatch.names import check_metric_names

ALARM_PERIODS = (10, 20, 30)  # or a multiple of 60 (PutMetricAlarm's Period)
# "Period multiplied by EvaluationPeriods can't be more than 604,800 seconds. For alarms with a
# period of less than one hour (3,600 seconds), the total evaluation period can't be longer than
# one day (86,400 seconds)."
MAX_EVALUATION_SECONDS = 604_800
MAX_SHORT_EVALUATION_SECONDS = 86_400
LONG_PERIOD_S = 3_600
MAX_ALARM_METRICS = 10  # "an alarm can include as many as 10 metrics" (metric math)
TREAT_MISSING = ("breaching", "notBreaching", "ignore", "missing")
UNSUPPORTED_MEMBERS = ("EvaluationWindow", "WarmUpConfiguration", "EvaluationCriteria",
                       "EvaluationInterval", "ActionConfiguration")
_QUERY_ID = re.compile(r"[a-z][a-zA-Z0-9_]*")


def not_supported(what: str) -> CloudWatchError:
    return CloudWatchError("ValidationError", f"{what} is not supported by the emulator.")


def dimensions(items: list[dict[str, str]] | None, where: str = "Dimensions") -> dict[str, str]:
    """Name -> value; a name given twice is refused (a metric has each dimension once)."""
    found: dict[str, str] = {}
    for item in items or []:
        if item["Name"] in found:
            raise invalid(f"The dimension {item['Name']} is given twice in {where}.")  # [U]
        found[item["Name"]] = item["Value"]
    return found


def check_alarm_period(period: int, name: str = "Period") -> None:
    if period not in ALARM_PERIODS and (period < 60 or period % 60):
        raise invalid(f"The parameter {name} must be 10, 20, 30 or a multiple of 60; "
                      f"{period} was given.")  # [U] wording; the rule is documented


def check_metric_alarm(config: dict[str, Any]) -> None:
    """A metric alarm's configuration the emulator evaluates, or the error that says why not
    (also used for the alarms Application Auto Scaling creates)."""
    for member in UNSUPPORTED_MEMBERS:
        if config.get(member) is not None:
            raise not_supported(member)
    if config.get("ThresholdMetricId") is not None:
        raise not_supported("ThresholdMetricId (anomaly detection alarms)")
    operator = config.get("ComparisonOperator")
    if operator is None:
        raise CloudWatchError("MissingParameter", "The parameter ComparisonOperator is "
                              "required.")
    check_metric_names(config)
    if operator not in OPERATORS:
        raise not_supported(f"ComparisonOperator {operator} (anomaly detection bands)")
    if config.get("Threshold") is None:
        raise CloudWatchError("MissingParameter", "The parameter Threshold is required.")
    if not math.isfinite(config["Threshold"]):
        raise invalid("The parameter Threshold must be a finite number.")
    periods = config.get("EvaluationPeriods")
    if periods is None:
        raise CloudWatchError("MissingParameter", "The parameter EvaluationPeriods is "
                              "required.")
    if periods < 1:
        raise invalid("The parameter EvaluationPeriods must be greater than or equal to 1.")
    to_alarm = config.get("DatapointsToAlarm")
    if to_alarm is not None and not 1 <= to_alarm <= periods:
        raise CloudWatchError("ValidationError", "DatapointsToAlarm must be between 1 and "
                              f"EvaluationPeriods ({periods}); {to_alarm} was given.")
    treat = config.get("TreatMissingData")
    if treat is not None and treat not in TREAT_MISSING:
        raise invalid(f"The value {treat} for parameter TreatMissingData is invalid "
                      f"(one of {', '.join(TREAT_MISSING)}).")
    low = config.get("EvaluateLowSampleCountPercentile")
    if low is not None and low not in ("evaluate", "ignore"):
        raise invalid(f"The value {low} for parameter EvaluateLowSampleCountPercentile is "
                      "invalid (evaluate or ignore).")
    single = [m for m in ("MetricName", "Namespace", "Statistic", "ExtendedStatistic",
                          "Dimensions", "Period", "Unit") if config.get(m) is not None]
    if config.get("Metrics"):
        if single:
            raise combination(f"The parameters Metrics and {', '.join(single)} cannot be "
                              "specified together.")
        period = _check_metrics(config["Metrics"])
    else:
        for member in ("MetricName", "Namespace", "Period"):
            if config.get(member) is None:
                raise CloudWatchError("MissingParameter", f"The parameter {member} is "
                                      "required (or give Metrics).")
        standard, extended = config.get("Statistic"), config.get("ExtendedStatistic")
        if (standard is None) == (extended is None):
            raise combination("Exactly one of Statistic and ExtendedStatistic must be "
                              "specified.")
        if extended is not None and not statistics.is_percentile(extended):
            raise not_supported(f"ExtendedStatistic {extended} (pNN percentiles are "
                                "evaluated)")
        if low is not None and extended is None:
            raise combination("EvaluateLowSampleCountPercentile is for percentile alarms "
                              "(ExtendedStatistic) only.")
        period = int(config["Period"])
        check_alarm_period(period)
        dimensions(config.get("Dimensions"))
    if period * periods > MAX_EVALUATION_SECONDS:
        raise CloudWatchError("ValidationError", "Metrics cannot be checked across more than "
                              "a week (EvaluationPeriods * Period must be <= 604800).")
    if period < LONG_PERIOD_S and period * periods > MAX_SHORT_EVALUATION_SECONDS:
        raise CloudWatchError("ValidationError", "Metrics cannot be checked across more than "
                              "a day (EvaluationPeriods * Period must be <= 86400) with a "
                              f"period under {LONG_PERIOD_S} seconds.")


def _check_metrics(queries: list[dict[str, Any]]) -> int:
    """An alarm's metric math: the one period of its MetricStats."""
    if len(queries) > MAX_ALARM_METRICS:
        raise invalid(f"The collection Metrics must not have a size greater than "
                      f"{MAX_ALARM_METRICS}.")
    returned = [q for q in queries if q.get("ReturnData", True)]
    if len(returned) != 1:
        raise CloudWatchError("ValidationError", "Exactly one element of the Metrics list "
                              "must return data (ReturnData true; the others false).")
    ids: set[str] = set()
    periods: set[int] = set()
    for query in queries:
        query_id = query["Id"]
        if not _QUERY_ID.fullmatch(query_id) or query_id in ids:
            raise CloudWatchError("ValidationError", f"The value {query_id} for Metrics.Id "
                                  "is not valid: it must start with a lowercase letter, hold "
                                  "only letters, numbers and _, and be unique.")
        if query.get("AccountId") is not None:
            raise not_supported("Metrics.AccountId (cross-account alarms)")
        stat, expression = query.get("MetricStat"), query.get("Expression")
        if (stat is None) == (expression is None):
            raise CloudWatchError("ValidationError", f"The query {query_id} must have exactly "
                                  "one of MetricStat and Expression.")
        if stat is not None:
            period = int(stat["Period"])
            check_alarm_period(period, "Metrics.MetricStat.Period")
            periods.add(period)
            if not statistics.is_supported(stat["Stat"]):
                raise not_supported(f"Stat {stat['Stat']} (SampleCount, Average, Sum, "
                                    "Minimum, Maximum and pNN are evaluated)")
            if not stat["Metric"].get("MetricName") or not stat["Metric"].get("Namespace"):
                raise CloudWatchError("MissingParameter", f"The query {query_id} needs "
                                      "MetricStat.Metric.MetricName and Namespace.")
            dimensions(stat["Metric"].get("Dimensions"),
                        f"the dimensions of query {query_id}")
        else:
            try:
                node = metric_math.parse(str(expression))
            except metric_math.MathError as exc:
                raise CloudWatchError("ValidationError", str(exc)) from exc
            unknown = metric_math.references(node) - ids - {"*"}
            if unknown:
                raise CloudWatchError("ValidationError", f"The expression of {query_id} "
                                      f"refers to {', '.join(sorted(unknown))}: not the Id of "
                                      "a query before it.")
            if query.get("Period") is not None:
                check_alarm_period(int(query["Period"]), "Metrics.Period")
        ids.add(query_id)
    if len(periods) > 1:
        raise CloudWatchError("ValidationError", "All MetricStat queries of an alarm must "
                              "have the same Period in the emulator.")  # [U]
    if not periods:
        raise CloudWatchError("ValidationError", "An alarm's Metrics must include at least "
                              "one MetricStat.")
    _dry_run(queries)
    return periods.pop()


def _dry_run(queries: list[dict[str, Any]]) -> None:
    """Every expression evaluated once over one missing datapoint, in the order the alarm's
    evaluation runs them: what is stored is what can be evaluated (arity, METRICS() where one
    series is needed)."""
    series: dict[str, Any] = {}
    metric_ids = [q["Id"] for q in queries if q.get("MetricStat")]
    for query_id in metric_ids:
        series[query_id] = np.full(1, np.nan)
    for query in queries:
        if query.get("Expression"):
            try:
                series[query["Id"]] = metric_math.evaluate(
                    metric_math.parse(str(query["Expression"])), series, 1, metric_ids)
            except metric_math.MathError as exc:
                raise CloudWatchError("ValidationError", f"The expression of {query['Id']} "
                                      f"cannot be evaluated: {exc}") from exc
