"""CloudWatch alarm evaluation, period by period: the real metric store and AlarmStore, the API
behind the wire, and a fake clock (scale 60: one emulated minute per real second)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from emulator.clock import Clock
from emulator.cloudwatch import alarm_rule, metric_math
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError
from emulator.cloudwatch.due import DueQueue
from emulator.cloudwatch.series import MetricStore
from emulator.cloudwatch.service import CloudWatchService
from tests.clock_support import FakeTime


class Rig:
    def __init__(self) -> None:
        self.time = FakeTime()
        self.clock = Clock(60, time_fn=self.time)
        self.metrics = MetricStore(self.clock)
        self.alarms = AlarmStore(self.metrics, self.clock, "us-east-1", "123456789012")
        self.api = CloudWatchService(self.metrics, self.clock, self.alarms)
        self.changes: list[tuple[str, str, str]] = []
        self.unsubscribe = self.alarms.subscribe(lambda *c: self.changes.append(c))

    def put(self, **overrides: Any) -> None:
        self.api.call("PutMetricAlarm", {
            "AlarmName": "a", "Namespace": "CI", "MetricName": "m", "Statistic": "Maximum",
            "Period": 60, "EvaluationPeriods": 3, "DatapointsToAlarm": 2, "Threshold": 1.0,
            "ComparisonOperator": "GreaterThanThreshold", **overrides})

    def minute(self, *values: float) -> str | None:
        """One emulated minute with these samples, then an evaluation; the state after it."""
        for value in values:
            self.metrics.record("CI", "m", {}, value, "None")
        self.time.now += 1.0
        asyncio.run(self.alarms.evaluate_all())
        return self.alarms.state("a")


def test_m_out_of_n_and_the_listeners() -> None:
    rig = Rig()
    rig.put()
    assert rig.alarms.exists("a") and rig.alarms.state("a") == "INSUFFICIENT_DATA"
    assert rig.minute(0.0) == "OK"
    assert rig.minute(5.0) == "OK"  # one breaching of the last three: not two
    assert rig.minute(0.0) == "OK"
    assert rig.minute(5.0) == "ALARM"  # 5, 0, 5: two out of three
    reason = rig.alarms.get("a").reason  # type: ignore[union-attr]
    assert reason.startswith("Threshold Crossed: 2 out of the last 3 datapoints [5.0 (")
    assert reason.endswith("were greater than the threshold (1.0) (minimum 2 datapoints for "
                           "OK -> ALARM transition).")
    assert rig.changes == [("a", "INSUFFICIENT_DATA", "OK"), ("a", "OK", "ALARM")]
    rig.unsubscribe()
    assert rig.minute(0.0) == "OK"  # 0, 5, 0: one breaching
    assert len(rig.changes) == 2  # unsubscribed: told nothing more


def test_a_late_round_still_sees_a_datapoint_in_a_window_it_skipped() -> None:
    """CloudWatch evaluates every period: a round that runs two periods late (a busy machine)
    evaluates the windows it skipped, so one breaching datapoint among them is not lost."""
    rig = Rig()
    rig.put(EvaluationPeriods=1, DatapointsToAlarm=1)
    assert rig.minute(0.0) == "OK"
    rig.time.now += 0.5
    rig.metrics.record("CI", "m", {}, 5.0, "None")  # in the next window only
    rig.time.now += 2.0  # the rounds of the next two minutes did not run
    asyncio.run(rig.alarms.evaluate_due())
    assert [c[1:] for c in rig.changes] == [("INSUFFICIENT_DATA", "OK"), ("OK", "ALARM"),
                                            ("ALARM", "INSUFFICIENT_DATA")]
    # the window that ends now has no datapoint (TreatMissingData "missing")


def test_a_round_that_runs_a_little_late_loses_no_datapoint() -> None:
    """Each alarm's windows follow on from one another: a round that runs part of a period late
    (a loaded machine; a fast emulated clock makes every millisecond seconds) still evaluates
    the window holding a datapoint recorded just after the last one ended."""
    rig = Rig()
    rig.put(EvaluationPeriods=1, DatapointsToAlarm=1)
    assert rig.minute(0.0) == "OK"
    rig.time.now += 0.1
    rig.metrics.record("CI", "m", {}, 5.0, "None")  # just after the window evaluated last
    rig.time.now += 1.3  # the next round runs 0.4 of a period after its window ended
    asyncio.run(rig.alarms.evaluate_due())
    assert rig.alarms.state("a") == "ALARM"


def test_windows_tile_time_however_late_the_rounds_run() -> None:
    due = DueQueue()
    now, ends = 1000.0, due.windows("a", 1000.0, 30.0)
    for lateness in (0.0, 4.0, 13.0, 29.0, 31.0, 45.0, 0.1, 89.0, 2.0):
        now = due.next_end("a", now, 30.0) + lateness
        ends += due.windows("a", now, 30.0)
    assert all(later - earlier == 30.0 for earlier, later in zip(ends, ends[1:], strict=False))
    assert now - ends[-1] < 30.0  # nothing older than one window waits for the next round


@pytest.mark.parametrize(("treat", "states"), [
    ("missing", ["ALARM", "ALARM", "OK", "INSUFFICIENT_DATA"]),
    ("ignore", ["ALARM", "ALARM", "ALARM", "ALARM"]),
    ("breaching", ["ALARM", "ALARM", "ALARM", "ALARM"]),
    ("notBreaching", ["ALARM", "ALARM", "OK", "OK"]),
])
def test_treat_missing_data_after_the_data_stops(treat: str, states: list[str]) -> None:
    rig = Rig()
    rig.put(TreatMissingData=treat)
    rig.minute(5.0)
    seen = [rig.minute(5.0)] + [rig.minute() for _ in range(3)]
    assert seen == states


def test_ignore_keeps_a_state_until_enough_good_data() -> None:
    rig = Rig()
    rig.put(TreatMissingData="ignore", EvaluationPeriods=3, DatapointsToAlarm=3)
    rig.minute(5.0), rig.minute(5.0)
    assert rig.minute(5.0) == "ALARM"
    rig.minute(), rig.minute()
    # one good datapoint among missing ones: three breaching are no longer possible
    assert rig.minute(0.0) == "OK"


def test_low_sample_count_percentile_keeps_its_state() -> None:
    rig = Rig()
    rig.put(Statistic=None, ExtendedStatistic="p99", EvaluationPeriods=1,
            DatapointsToAlarm=None, EvaluateLowSampleCountPercentile="ignore")
    assert rig.minute(5.0) == "INSUFFICIENT_DATA"  # 1 sample < 10 / (1 - 0.99)
    assert rig.minute(*([5.0] * 1000)) == "ALARM"


def test_metric_math() -> None:
    series = {"m1": np.array([1.0, np.nan, 4.0]), "m2": np.array([2.0, 2.0, 0.0])}
    ratio = metric_math.evaluate(metric_math.parse("m1 / m2"), series, 3)
    assert ratio[0] == 0.5 and np.isnan(ratio[1]) and np.isnan(ratio[2])  # x/0: no datapoint
    total = metric_math.evaluate(metric_math.parse("SUM(METRICS()) / 2"), series, 3)
    assert total.tolist() == [1.5, 1.0, 2.0]
    filled = metric_math.evaluate(metric_math.parse("FILL(m1, 0) - 2 ^ 2"), series, 3)
    assert filled.tolist() == [-3.0, -4.0, 0.0]
    for bad in ("ANOMALY_DETECTION_BAND(m1)", "m1 +", "(m1", "SEARCH('x', 'Sum', 60)"):
        with pytest.raises(metric_math.MathError):
            metric_math.parse(bad)


def test_alarm_rule() -> None:
    rule = alarm_rule.parse('ALARM("a") OR ALARM(b) AND NOT OK('
                            'arn:aws:cloudwatch:us-east-1:123456789012:alarm:c)')
    assert rule.alarms() == {"a", "b", "c"}
    states = {"a": "OK", "b": "ALARM", "c": "INSUFFICIENT_DATA"}
    assert rule.holds(states.get)  # AND before OR: a OR (b AND NOT OK(c))
    states["c"] = "OK"
    assert not rule.holds(states.get)
    assert alarm_rule.parse("TRUE").holds(states.get)
    for bad in ("", "ALARM(a) AND", "ALARM(a", "SOMETIMES(a)", '(ALARM("a")'):
        with pytest.raises(alarm_rule.RuleError):
            alarm_rule.parse(bad)


def test_a_metric_math_alarm_refuses_what_it_cannot_evaluate() -> None:
    rig = Rig()
    stat = {"Metric": {"Namespace": "CI", "MetricName": "m"}, "Period": 60, "Stat": "Sum"}
    base = {"AlarmName": "x", "EvaluationPeriods": 1, "Threshold": 1.0,
            "ComparisonOperator": "GreaterThanThreshold"}
    for metrics, words in [
        ([{"Id": "m1", "MetricStat": stat}, {"Id": "e1", "Expression": "m1 * 2"}],
         "Exactly one element"),
        ([{"Id": "m1", "MetricStat": stat, "ReturnData": False},
          {"Id": "e1", "Expression": "RATE(m1)"}], "RATE"),
        ([{"Id": "m1", "MetricStat": stat, "ReturnData": False},
          {"Id": "e1", "Expression": "m2 * 2"}], "m2"),
        ([{"Id": "M1", "MetricStat": stat}], "lowercase"),
    ]:
        with pytest.raises(CloudWatchError) as raised:
            rig.api.call("PutMetricAlarm", {**base, "Metrics": metrics})
        assert words in raised.value.message
    assert not rig.alarms.exists("x")


def test_auto_scaling_actions_repeat_while_in_alarm_and_sns_does_not() -> None:
    rig = Rig()
    ran: list[tuple[str, bool]] = []

    async def handler(calls: list[Any]) -> list[str | None]:
        ran.extend((c.arn, c.repeated) for c in calls)
        return [None for _ in calls]

    rig.alarms.add_action_handler("arn:aws:autoscaling:", handler)
    policy = ("arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:x:resource/sagemaker/"
              "endpoint/e/variant/v:policyName/p")
    topic = "arn:aws:sns:us-east-1:123456789012:t"
    rig.put(EvaluationPeriods=1, DatapointsToAlarm=1, AlarmActions=[policy, topic])
    assert rig.minute(5.0) == "ALARM" and rig.minute(5.0) == "ALARM"
    assert rig.minute(5.0) == "ALARM"
    assert ran == [(policy, False), (policy, True), (policy, True)]
    actions = rig.api.call("DescribeAlarmHistory", {"AlarmName": "a",
                                                    "HistoryItemType": "Action"})
    # the state change's two actions; the repeats that ran are not history
    assert sorted(i["HistorySummary"] for i in actions["AlarmHistoryItems"]) == [
        f"Successfully executed action {policy}", f"Successfully executed action {topic}"]
    assert rig.minute(0.0) == "OK"
    assert len(ran) == 3  # no repeat once OK


def test_history_by_date() -> None:
    rig = Rig()
    rig.put()
    created = rig.time.now
    rig.minute(0.0)  # 60 emulated seconds later: INSUFFICIENT_DATA -> OK
    history = rig.api.call("DescribeAlarmHistory", {"AlarmName": "a"})["AlarmHistoryItems"]
    assert [i["HistoryItemType"] for i in history] == ["StateUpdate", "ConfigurationUpdate"]
    later = rig.api.call("DescribeAlarmHistory", {"AlarmName": "a",
                                                  "StartDate": created + 1})
    assert [i["HistoryItemType"] for i in later["AlarmHistoryItems"]] == ["StateUpdate"]
    oldest_first = rig.api.call("DescribeAlarmHistory", {"AlarmName": "a",
                                                         "ScanBy": "TimestampAscending"})
    assert [i["HistoryItemType"] for i in oldest_first["AlarmHistoryItems"]] == [
        "ConfigurationUpdate", "StateUpdate"]
    with pytest.raises(CloudWatchError):
        rig.api.call("DescribeAlarmHistory", {"StartDate": created + 10, "EndDate": created})


def test_put_metric_data_counts_are_bounded() -> None:
    """A count of 1e12 expanded into raw samples took the server's memory."""
    rig = Rig()
    with pytest.raises(CloudWatchError) as raised:
        rig.api.call("PutMetricData", {"Namespace": "CI", "MetricData": [
            {"MetricName": "m", "Values": [1.0], "Counts": [1e12]}]})
    assert "Counts" in raised.value.message
    assert list(rig.metrics.keys()) == []
    rig.api.call("PutMetricData", {"Namespace": "CI", "MetricData": [
        {"MetricName": "m", "Values": [1.0, 2.0], "Counts": [3.0, 1.0]}]})
    key = next(rig.metrics.keys())
    assert sorted(rig.metrics.samples(key, 0, float("inf"))[1].tolist()) == [1.0, 1.0, 1.0, 2.0]


def test_an_update_keeps_the_state_and_ignores_new_tags() -> None:
    rig = Rig()
    rig.put(Tags=[{"Key": "team", "Value": "ml"}])
    rig.minute(5.0)
    assert rig.minute(5.0) == "ALARM"
    rig.put(Threshold=10.0, Tags=[{"Key": "team", "Value": "other"}])
    assert rig.alarms.state("a") == "ALARM"  # until it is evaluated again
    alarm = rig.alarms.get("a")
    assert alarm is not None and alarm.tags == {"team": "ml"}
    assert alarm.config["Threshold"] == 10.0
    assert rig.minute(5.0) == "OK"  # 5 is not over the new threshold


def test_a_slow_notification_never_holds_up_the_alarms() -> None:
    """An SNS server that does not answer must not stop every alarm from being evaluated
    (nor a deployment's rollback that waits on one)."""
    rig = Rig()
    release = asyncio.Event()

    async def hangs(calls: list[Any]) -> list[str | None]:
        await release.wait()
        return [None for _ in calls]

    rig.alarms.add_action_handler("arn:aws:lambda:", hangs, background=True)

    async def scenario() -> list[str | None]:
        rig.put(EvaluationPeriods=1, DatapointsToAlarm=1,
                AlarmActions=["arn:aws:sns:us-east-1:123456789012:t"])
        alarm = rig.alarms.get("a")
        assert alarm is not None  # a background action the API would refuse, put directly
        rig.alarms.put("a", "MetricAlarm", {**alarm.config, "AlarmActions": [
            "arn:aws:lambda:us-east-1:123456789012:function:f"]}, {})
        states = []
        for value in (5.0, 0.0):
            rig.metrics.record("CI", "m", {}, value, "None")
            rig.time.now += 1.0
            await asyncio.wait_for(rig.alarms.evaluate_due(every=True), 5)
            states.append(rig.alarms.state("a"))
        release.set()
        return states

    assert asyncio.run(scenario()) == ["ALARM", "OK"]
