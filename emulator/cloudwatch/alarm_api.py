"""CloudWatch's alarm operations and PutMetricData: behaviour only (``wire`` does the protocols).

Every request is checked whole before anything changes: a refused call changes nothing. What
the emulator does not evaluate (anomaly detection bands, ``ThresholdMetricId``, Metrics Insights
queries, search expressions, EC2/SSM/Lambda actions, ``EvaluationCriteria`` ...) is refused
with a ValidationError that says so, never stored and ignored. Limits are CloudWatch's
documented ones; wordings marked [U] are the emulator's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from emulator.clock import Clock
from emulator.cloudwatch import alarm_model, alarm_rule, paging
from emulator.cloudwatch.alarm_checks import check_metric_alarm, dimensions, not_supported
from emulator.cloudwatch.alarm_model import ALARM, COMPOSITE_ALARM, INSUFFICIENT_DATA, METRIC_ALARM
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError, combination, invalid
from emulator.cloudwatch.names import check_dimensions, check_name
from emulator.cloudwatch.series import MetricStore

MAX_PARENTS = 150  # "Any single alarm can be included in the rule expressions of as many as 150"
MAX_ACTIONS = 5  # per state
MAX_TAGS = 50
MAX_NAMES = 100
DESCRIBE_PAGE = 50  # DescribeAlarms' MaxRecords default (1-100)
HISTORY_PAGE = 100  # DescribeAlarmHistory's MaxRecords default (1-100)
MAX_METRIC_DATA = 1000  # PutMetricData: "up to 1000 different metrics"
MAX_VALUES = 150  # "each PutMetricData request can include up to 150 values" per datum
MAX_VALUE = 2.0 ** 360
# [U] Counts are expanded into raw samples: at most this many per request (a series keeps at
# most 256 Ki; a count of 1e12 would take the server's memory).
MAX_EXPANDED_SAMPLES = 150_000
PAST_S = 14 * 86_400  # PutMetricData: timestamps up to two weeks in the past
FUTURE_S = 2 * 3600  # and up to two hours in the future
_SNS_ARN = re.compile(r"arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_.-]+")
_POLICY_ARN = re.compile(r"arn:aws[a-z-]*:autoscaling:[a-z0-9-]+:\d{12}:scalingPolicy:.+")


def _check_actions(params: dict[str, Any], composite: bool) -> None:
    for member in ("OKActions", "AlarmActions", "InsufficientDataActions"):
        actions = params.get(member) or []
        if len(actions) > MAX_ACTIONS:
            raise invalid(f"The collection {member} must not have a size greater than "
                          f"{MAX_ACTIONS}.")
        for arn in actions:
            if _SNS_ARN.fullmatch(arn):
                continue
            if _POLICY_ARN.fullmatch(arn):
                if composite:
                    raise CloudWatchError("ValidationError", f"The action {arn} is not valid "
                                          "for a composite alarm: composite alarms notify "
                                          "(SNS) and cannot run Auto Scaling policies.")
                continue
            if arn.startswith("arn:"):
                raise not_supported(f"The action {arn} (the emulator runs SNS topics and "
                                    "Application Auto Scaling policies)")
            raise invalid(f"Invalid arn syntax: {arn}")


class AlarmApi:
    def __init__(self, alarms: AlarmStore, metrics: MetricStore, clock: Clock) -> None:
        self.alarms = alarms
        self.metrics = metrics
        self.clock = clock

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {
            "PutMetricAlarm": self.put_metric_alarm,
            "PutCompositeAlarm": self.put_composite_alarm,
            "DescribeAlarms": self.describe_alarms,
            "DescribeAlarmsForMetric": self.describe_alarms_for_metric,
            "DescribeAlarmHistory": self.describe_alarm_history,
            "SetAlarmState": self.set_alarm_state,
            "DeleteAlarms": self.delete_alarms,
            "EnableAlarmActions": lambda p: self.alarm_actions(p, True),
            "DisableAlarmActions": lambda p: self.alarm_actions(p, False),
            "TagResource": self.tag_resource,
            "UntagResource": self.untag_resource,
            "ListTagsForResource": self.list_tags_for_resource,
            "PutMetricData": self.put_metric_data,
        }

    # -----------------------------------------------------------------------------------------
    # PutMetricAlarm

    def put_metric_alarm(self, params: dict[str, Any]) -> dict[str, Any]:
        check_name(params["AlarmName"], "AlarmName")
        config = {k: v for k, v in params.items() if k not in ("AlarmName", "Tags")}
        check_metric_alarm(config)
        _check_actions(params, composite=False)
        self.alarms.put(params["AlarmName"], METRIC_ALARM, config, _tags(params.get("Tags")))
        return {}

    # -----------------------------------------------------------------------------------------
    # PutCompositeAlarm

    def put_composite_alarm(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["AlarmName"]
        check_name(name, "AlarmName")
        for member in ("ActionsSuppressor", "ActionsSuppressorWaitPeriod",
                       "ActionsSuppressorExtensionPeriod", "ActionConfiguration"):
            if params.get(member) is not None:
                raise not_supported(member)
        try:
            rule = alarm_rule.parse(params["AlarmRule"])
        except alarm_rule.RuleError as exc:
            raise CloudWatchError("ValidationError", str(exc)) from exc
        referred = rule.alarms()
        missing = sorted(n for n in referred if not self.alarms.exists(n))
        if missing:
            raise CloudWatchError("ValidationError", "Could not save the composite alarm as "
                                  f"alarms {missing} in the alarm rule do not exist")
        if name in referred or self._reaches(referred, name):
            raise CloudWatchError("ValidationError", "The alarm rule of a composite alarm "
                                  f"must not refer to itself: {name} is part of a cycle.")
        for child in sorted(referred):
            parents = set(self.alarms.parents(child)) - {name}
            if len(parents) >= MAX_PARENTS:
                raise CloudWatchError("LimitExceeded", f"The alarm {child} is already in the "
                                      f"rules of {MAX_PARENTS} composite alarms, the most one "
                                      "alarm can be in; remove it from one of them first.")
        existing = self.alarms.get(name)
        if existing is not None and existing.alarm_type != COMPOSITE_ALARM:
            raise invalid(f"The alarm {name} already exists as a metric alarm; delete it "
                          "first to reuse its name.")  # [U]
        _check_actions(params, composite=True)
        config = {k: v for k, v in params.items() if k not in ("AlarmName", "Tags")}
        self.alarms.put(name, COMPOSITE_ALARM, config, _tags(params.get("Tags")))
        return {}

    def _reaches(self, names: set[str], target: str) -> bool:
        """Whether a composite among ``names`` refers, through its rule, to ``target``."""
        seen: set[str] = set()
        stack = list(names)
        while stack:
            alarm = self.alarms.get(stack.pop())
            if alarm is None or alarm.name in seen or alarm.alarm_type != COMPOSITE_ALARM:
                continue
            seen.add(alarm.name)
            rule = self.alarms.rule(alarm.name)
            children = rule.alarms() if rule is not None else set()
            if target in children:
                return True
            stack.extend(children)
        return False

    # -----------------------------------------------------------------------------------------
    # Describe

    def describe_alarms(self, params: dict[str, Any]) -> dict[str, Any]:
        names = params.get("AlarmNames") or []
        if len(names) > MAX_NAMES:
            raise invalid(f"The collection AlarmNames must not have a size greater than "
                          f"{MAX_NAMES}.")
        if names and params.get("AlarmNamePrefix"):
            raise combination("AlarmNames and AlarmNamePrefix cannot be specified together.")
        children_of, parents_of = params.get("ChildrenOfAlarmName"), params.get(
            "ParentsOfAlarmName")
        if (children_of or parents_of) and any(params.get(k) for k in (
                "AlarmNames", "AlarmNamePrefix", "StateValue", "ActionPrefix", "AlarmTypes")):
            raise combination("With ChildrenOfAlarmName or ParentsOfAlarmName, only "
                              "MaxRecords and NextToken may be given.")
        if children_of and parents_of:
            raise combination("ChildrenOfAlarmName and ParentsOfAlarmName cannot be "
                              "specified together.")
        types = set(params.get("AlarmTypes") or [METRIC_ALARM])
        if children_of or parents_of:
            types = {METRIC_ALARM, COMPOSITE_ALARM}
        if "LogAlarm" in types:
            types.discard("LogAlarm")  # the emulator has no log alarms: none to list
        found: list[alarm_model.Alarm] = []
        related = self._related(children_of, parents_of)
        named = [self.alarms.get(n) for n in sorted(set(names))]  # in name order, as all()
        for alarm in [a for a in named if a is not None] if names else self.alarms.all():
            if alarm.alarm_type not in types:
                continue
            if names and alarm.name not in names:
                continue
            if params.get("AlarmNamePrefix") and not alarm.name.startswith(
                    params["AlarmNamePrefix"]):
                continue
            if params.get("StateValue") and alarm.state != params["StateValue"]:
                continue
            prefix = params.get("ActionPrefix")
            if prefix and not any(a.startswith(prefix) for state in alarm_model.STATES
                                  for a in alarm.actions_for(state)):
                continue
            if related is not None and alarm.name not in related:
                continue
            found.append(alarm)
        page, token = paging.page(found, [a.name for a in found], params, DESCRIBE_PAGE)
        now = self.clock.now()
        out: dict[str, Any] = {
            "MetricAlarms": [self.describe(a, now) for a in page
                             if a.alarm_type == METRIC_ALARM],
            "CompositeAlarms": [self.describe(a, now) for a in page
                                if a.alarm_type == COMPOSITE_ALARM]}
        if token:
            out["NextToken"] = token
        return out

    def _related(self, children_of: str | None, parents_of: str | None) -> set[str] | None:
        if children_of:
            alarm = self.alarms.get(children_of)
            if alarm is None or alarm.alarm_type != COMPOSITE_ALARM:
                return set()
            rule = self.alarms.rule(children_of)
            return rule.alarms() if rule is not None else set()
        if parents_of:
            return set(self.alarms.parents(parents_of))
        return None

    def describe(self, alarm: alarm_model.Alarm, now: float) -> dict[str, Any]:
        emulated = self.clock.to_emulated
        item: dict[str, Any] = {
            "AlarmName": alarm.name, "AlarmArn": alarm.arn,
            "AlarmConfigurationUpdatedTimestamp": emulated(alarm.config_updated, now),
            "ActionsEnabled": alarm.actions_enabled,
            "OKActions": alarm.actions_for(alarm_model.OK),
            "AlarmActions": alarm.actions_for(ALARM),
            "InsufficientDataActions": alarm.actions_for(INSUFFICIENT_DATA),
            "StateValue": alarm.state, "StateReason": alarm.reason,
            "StateUpdatedTimestamp": emulated(alarm.state_updated, now),
            "StateTransitionedTimestamp": emulated(alarm.state_transitioned, now),
        }
        if alarm.reason_data:
            item["StateReasonData"] = alarm.reason_data
        config = alarm.config
        if config.get("AlarmDescription") is not None:
            item["AlarmDescription"] = config["AlarmDescription"]
        if alarm.alarm_type == COMPOSITE_ALARM:
            item["AlarmRule"] = config["AlarmRule"]
            return item
        for member in ("MetricName", "Namespace", "Statistic", "ExtendedStatistic",
                       "Period", "Unit", "EvaluationPeriods", "DatapointsToAlarm",
                       "Threshold", "ComparisonOperator", "EvaluateLowSampleCountPercentile",
                       "Metrics"):
            if config.get(member) is not None:
                item[member] = config[member]
        if not config.get("Metrics"):
            item["Dimensions"] = config.get("Dimensions") or []
        item["TreatMissingData"] = config.get("TreatMissingData") or "missing"
        return item

    def describe_alarms_for_metric(self, params: dict[str, Any]) -> dict[str, Any]:
        wanted_dims = dimensions(params.get("Dimensions"))
        now = self.clock.now()
        found = []
        for alarm in self.alarms.all():
            config = alarm.config
            if alarm.alarm_type != METRIC_ALARM or config.get("Metrics"):
                continue
            if (config.get("MetricName"), config.get("Namespace")) != (
                    params["MetricName"], params["Namespace"]):
                continue
            if params.get("Dimensions") is not None and dimensions(
                    config.get("Dimensions")) != wanted_dims:
                continue
            if any(params.get(k) is not None and config.get(k) != params[k]
                   for k in ("Statistic", "ExtendedStatistic", "Period", "Unit")):
                continue
            found.append(self.describe(alarm, now))
        return {"MetricAlarms": found}

    def describe_alarm_history(self, params: dict[str, Any]) -> dict[str, Any]:
        now = self.clock.now()
        start = params.get("StartDate")
        end = params.get("EndDate")
        if start is not None and end is not None and start > end:
            raise invalid("The parameter StartDate must be less than the parameter EndDate.")
        types = set(params.get("AlarmTypes") or [METRIC_ALARM])
        kind = params.get("HistoryItemType")
        with self.alarms.lock:
            items = list(self.alarms.history)
        found = []
        for item in items:
            if params.get("AlarmName") and item.alarm_name != params["AlarmName"]:
                continue
            if item.alarm_type not in types or (kind and item.item_type != kind):
                continue
            when = self.clock.to_emulated(item.timestamp, now)
            if (start is not None and when < start) or (end is not None and when > end):
                continue
            found.append((when, item))
        descending = params.get("ScanBy", "TimestampDescending") == "TimestampDescending"
        if descending:
            found.reverse()
        page, token = paging.page(found, [item.id for _when, item in found], params,
                                  HISTORY_PAGE, descending)
        out: dict[str, Any] = {"AlarmHistoryItems": [{
            "AlarmName": item.alarm_name, "AlarmType": item.alarm_type, "Timestamp": when,
            "HistoryItemType": item.item_type, "HistorySummary": item.summary,
            "HistoryData": item.data} for when, item in page]}
        if token:
            out["NextToken"] = token
        return out

    # -----------------------------------------------------------------------------------------
    # State, deletion, actions, tags

    def set_alarm_state(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["AlarmName"]
        if not self.alarms.exists(name):
            raise CloudWatchError("ResourceNotFound", f"Alarm {name} does not exist.", 404)
        data = params.get("StateReasonData")
        if data is not None:
            try:
                json.loads(data)
            except ValueError as exc:
                raise CloudWatchError("InvalidFormat", "The StateReasonData must be JSON: "
                                      f"{exc}") from exc
        self.alarms.set_state(name, params["StateValue"], params["StateReason"], data)
        return {}

    def delete_alarms(self, params: dict[str, Any]) -> dict[str, Any]:
        names = list(dict.fromkeys(params["AlarmNames"]))
        if len(names) > MAX_NAMES:
            raise invalid(f"The collection AlarmNames must not have a size greater than "
                          f"{MAX_NAMES}.")
        unknown = [n for n in names if not self.alarms.exists(n)]
        if unknown:
            raise CloudWatchError("ResourceNotFound", "1 or more alarms do not exist: "
                                  f"{', '.join(unknown)}; nothing was deleted.", 404)
        parents = {parent for name in names for parent in self.alarms.parents(name)
                   if parent not in names}
        if parents:
            # [U] AWS's wording; a composite alarm must not be left with a rule on nothing
            raise CloudWatchError("ValidationError", "Could not delete the alarms: they are "
                                  f"referred to by the composite alarms {sorted(parents)}; "
                                  "delete or change those first.")
        unknown = self.alarms.delete(names)
        if unknown:  # deleted by someone else meanwhile
            raise CloudWatchError("ResourceNotFound", "1 or more alarms do not exist: "
                                  f"{', '.join(unknown)}; nothing was deleted.", 404)
        return {}

    def alarm_actions(self, params: dict[str, Any], enabled: bool) -> dict[str, Any]:
        names = params["AlarmNames"]
        if len(names) > MAX_NAMES:
            raise invalid(f"The collection AlarmNames must not have a size greater than "
                          f"{MAX_NAMES}.")
        self.alarms.set_actions_enabled(names, enabled)
        return {}

    def _alarm_of_arn(self, arn: str) -> str:
        name = arn.split(":alarm:", 1)[1] if ":alarm:" in arn else ""
        alarm = self.alarms.get(name)
        if alarm is None or alarm.arn != arn:
            raise CloudWatchError("ResourceNotFoundException",
                                  f"Resource {arn} does not exist.", 404)
        return name

    def tag_resource(self, params: dict[str, Any]) -> dict[str, Any]:
        name = self._alarm_of_arn(params["ResourceARN"])
        tags = _tags(params["Tags"])
        alarm = self.alarms.get(name)
        if alarm is not None and len({**alarm.tags, **tags}) > MAX_TAGS:
            raise invalid(f"A resource can have at most {MAX_TAGS} tags.")
        self.alarms.tag(name, tags)
        return {}

    def untag_resource(self, params: dict[str, Any]) -> dict[str, Any]:
        self.alarms.untag(self._alarm_of_arn(params["ResourceARN"]), params["TagKeys"])
        return {}

    def list_tags_for_resource(self, params: dict[str, Any]) -> dict[str, Any]:
        alarm = self.alarms.get(self._alarm_of_arn(params["ResourceARN"]))
        tags = alarm.tags if alarm is not None else {}
        return {"Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}

    # -----------------------------------------------------------------------------------------
    # PutMetricData

    def put_metric_data(self, params: dict[str, Any]) -> dict[str, Any]:
        namespace = params["Namespace"]
        check_name(namespace, "Namespace", ascii_only=True)
        if namespace.startswith("AWS/"):
            raise invalid("The value AWS/ for parameter Namespace is invalid.")
        if params.get("EntityMetricData"):
            raise not_supported("EntityMetricData")
        data = params.get("MetricData") or []
        if not data:
            raise CloudWatchError("MissingParameter", "The parameter MetricData is required.")
        if len(data) > MAX_METRIC_DATA:
            raise invalid("The collection MetricData must not have a size greater than "
                          f"{MAX_METRIC_DATA}.")
        now = self.clock.now()
        batches = []
        expanded_total = 0
        for index, datum in enumerate(data, start=1):
            where = f"MetricData.member.{index}"
            check_name(datum.get("MetricName"), f"{where}.MetricName")
            check_dimensions(datum.get("Dimensions"), f"{where}.Dimensions")
            if datum.get("StatisticValues") is not None:
                raise not_supported(f"{where}.StatisticValues (give Value, or Values and "
                                    "Counts: the emulator keeps raw samples)")
            has_value, values = datum.get("Value") is not None, datum.get("Values")
            if has_value and values:
                raise combination(f"The parameters {where}.Value and {where}.Values are "
                                  "mutually exclusive and you have specified both.")
            if not has_value and not values:
                raise CloudWatchError("MissingParameter", f"The parameter {where}.Value, "
                                      f"{where}.Values or {where}.StatisticValues is "
                                      "required.")
            samples = [datum["Value"]] if has_value else list(values)
            counts = datum.get("Counts")
            if len(samples) > MAX_VALUES:
                raise invalid(f"The collection {where}.Values must not have a size greater "
                              f"than {MAX_VALUES}.")
            if counts is not None:
                if len(counts) != len(samples):
                    raise invalid(f"The parameters {where}.Values and {where}.Counts must be "
                                  "of the same size.")
                if any(not math.isfinite(c) or c < 0 or c != math.floor(c) for c in counts):
                    # [U] counts are whole numbers here: samples are kept raw
                    raise invalid(f"The parameter {where}.Counts must hold whole numbers of "
                                  "0 or more in the emulator.")
            for value in samples:
                if not math.isfinite(value) or abs(value) > MAX_VALUE:
                    raise invalid(f"The value {value} for parameter {where}.Value is invalid.")
            resolution = datum.get("StorageResolution")
            if resolution is not None and resolution not in (1, 60):
                raise invalid(f"The value {resolution} for parameter "
                              f"{where}.StorageResolution is invalid (1 or 60).")
            stamp = datum.get("Timestamp")
            real = now if stamp is None else self.clock.to_real(float(stamp), now)
            if stamp is not None and not (now - PAST_S <= float(stamp) <= now + FUTURE_S):
                raise invalid(f"The parameter {where}.Timestamp must be within the last two "
                              "weeks and at most two hours in the future.")
            expanded_total += int(sum(counts)) if counts is not None else len(samples)
            if expanded_total > MAX_EXPANDED_SAMPLES:
                raise invalid(f"The Counts of one PutMetricData request must add up to at most "
                              f"{MAX_EXPANDED_SAMPLES} in the emulator (it keeps raw samples).")
            expanded = ([v for v, c in zip(samples, counts, strict=True)
                         for _ in range(int(c))] if counts is not None else samples)
            batches.append((datum["MetricName"],
                            dimensions(datum.get("Dimensions"), f"{where}.Dimensions"),
                            min(real, now), expanded, datum.get("Unit") or "None"))
        for metric, dims, when, values_, unit in batches:
            self.metrics.record_at(namespace, metric, dims, when, values_, unit)
        return {}


def _tags(items: list[dict[str, str]] | None) -> dict[str, str]:
    tags = {t["Key"]: t["Value"] for t in items or []}
    if len(tags) > MAX_TAGS:
        raise invalid(f"A resource can have at most {MAX_TAGS} tags.")
    return tags
