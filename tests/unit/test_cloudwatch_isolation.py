"""One alarm never stops the others, and what is stored can be evaluated: the real AlarmStore,
metric store and API behind the wire, a fake clock (scale 60), SQLite in a temporary folder."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from emulator.clock import Clock
from emulator.cloudwatch import evaluation
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.alarms import AlarmStore as Store
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError
from emulator.cloudwatch.series import MetricStore
from emulator.cloudwatch.service import CloudWatchService
from tests.clock_support import FakeTime


class Rig:
    def __init__(self, folder: Path | None = None) -> None:
        self.time = FakeTime()
        self.clock = Clock(60, time_fn=self.time)
        self.metrics = MetricStore(self.clock)
        self.folder = folder
        self.alarms = self._store()
        self.api = CloudWatchService(self.metrics, self.clock, self.alarms)

    def _store(self) -> AlarmStore:
        return AlarmStore(self.metrics, self.clock, "us-east-1", "123456789012",
                          self.folder / "alarms.db" if self.folder else None)

    def restart(self) -> None:
        assert self.alarms.db is not None
        self.alarms.db.close()
        self.alarms = self._store()
        self.api = CloudWatchService(self.metrics, self.clock, self.alarms)

    def call(self, operation: str, **params: Any) -> dict[str, Any]:
        return self.api.call(operation, params)

    def metric_alarm(self, name: str, **overrides: Any) -> None:
        self.call("PutMetricAlarm", **{
            "AlarmName": name, "Namespace": "CI", "MetricName": "m", "Statistic": "Maximum",
            "Period": 60, "EvaluationPeriods": 1, "Threshold": 1.0,
            "ComparisonOperator": "GreaterThanThreshold", **overrides})

    def round(self, *values: float) -> None:
        for value in values:
            self.metrics.record("CI", "m", {}, value, "None")
        self.time.now += 1.0
        asyncio.run(self.alarms.evaluate_all())

    def alarm(self, name: str) -> Any:
        alarm = self.alarms.get(name)
        assert alarm is not None
        return alarm


UNCHECKED = "Unchecked: the alarm could not be evaluated"


def test_a_metric_alarm_that_fails_is_recorded_and_the_others_go_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig()
    rig.metric_alarm("fails")
    rig.metric_alarm("works")
    real = evaluation.evaluate

    def evaluate(config: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if config.get("AlarmDescription") == "broken":
            raise ArithmeticError("a surprise")
        return real(config, *args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", evaluate)
    rig.metric_alarm("fails", AlarmDescription="broken")
    rig.round(5.0)
    assert rig.alarm("works").state == "ALARM"
    failed = rig.alarm("fails")
    assert failed.state == "INSUFFICIENT_DATA"
    assert failed.reason.startswith(UNCHECKED) and "a surprise" in failed.reason


def test_a_composite_that_fails_is_recorded_and_the_others_go_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig()
    rig.metric_alarm("kid")
    rig.call("PutCompositeAlarm", AlarmName="a-fails", AlarmRule="ALARM(kid)")
    rig.call("PutCompositeAlarm", AlarmName="b-works", AlarmRule="ALARM(kid)")
    real = Store._composite_reason

    def reason(self: Store, rule: Any, state: str) -> tuple[str, str]:
        if rule is self.rule("a-fails"):
            raise KeyError("a surprise")
        return real(self, rule, state)

    monkeypatch.setattr(Store, "_composite_reason", reason)
    rig.round(5.0)
    assert rig.alarm("kid").state == "ALARM"
    assert rig.alarm("b-works").state == "ALARM"
    assert rig.alarm("a-fails").reason.startswith(UNCHECKED)


# ---------------------------------------------------------------------------------------------
# Whatever can be stored can be evaluated: random expressions and rules, each either refused
# at Put (ValidationError / InvalidParameterValue) or evaluated without a failure.

_MATH_PIECES = ["m1", "m2", "e0", "2", "0", "1.5e3", "+", "-", "*", "/", "^", "(", ")", ",",
                "SUM(", "AVG(", "MIN(", "MAX(", "ABS(", "FILL(", "METRICS()", "METRICS(",
                "-", "(", ")"]


def _expression(rng: random.Random) -> str:
    if rng.random() < 0.5:  # well formed, then perhaps broken
        def build(depth: int) -> str:
            if depth == 0 or rng.random() < 0.3:
                return rng.choice(["m1", "m2", "3", "0"])
            kind = rng.randrange(4)
            if kind == 0:
                return f"{build(depth - 1)} {rng.choice('+-*/^')} {build(depth - 1)}"
            if kind == 1:
                return f"-{build(depth - 1)}"
            if kind == 2:
                return f"({build(depth - 1)})"
            name = rng.choice(["SUM", "AVG", "MIN", "MAX", "ABS", "FILL"])
            args = [build(depth - 1) for _ in range(rng.randrange(0, 4))]
            if name in ("SUM", "MAX") and rng.random() < 0.3:
                args.append("METRICS()")
            return f"{name}({', '.join(args)})"

        text = build(rng.randrange(1, 8))
        if rng.random() < 0.3 and len(text) > 1:
            cut = rng.randrange(len(text))
            text = text[:cut] + text[cut + 1:]
        return text
    return " ".join(rng.choice(_MATH_PIECES) for _ in range(rng.randrange(1, 12)))


def test_every_expression_that_is_stored_is_evaluated() -> None:
    rng = random.Random(7)
    rig = Rig()
    stat = {"Metric": {"Namespace": "CI", "MetricName": "m"}, "Period": 60, "Stat": "Maximum"}
    stored = refused = 0
    for index in range(600):
        expression = _expression(rng)
        try:
            rig.call("PutMetricAlarm", AlarmName=f"math-{index}", EvaluationPeriods=2,
                     Threshold=1.0, ComparisonOperator="GreaterThanThreshold", Metrics=[
                         {"Id": "m1", "MetricStat": stat, "ReturnData": False},
                         {"Id": "m2", "MetricStat": stat, "ReturnData": False},
                         {"Id": "e1", "Expression": expression}])
            stored += 1
        except CloudWatchError as exc:
            assert exc.status == 400, (expression, exc.message)
            refused += 1
    rig.round(5.0)
    rig.round(0.0)
    failures = [(a.name, a.reason) for a in rig.alarms.all() if a.reason.startswith(UNCHECKED)]
    assert failures == []
    for alarm in rig.alarms.all():  # and each on its own, as the text it was stored with
        evaluation.evaluate(alarm.config, rig.metrics, rig.clock, rig.time.now, alarm.state)
    assert stored > 100 and refused > 100  # both kinds were tried


def _rule(rng: random.Random) -> str:
    def build(depth: int) -> str:
        if depth == 0 or rng.random() < 0.25:
            return rng.choice(["ALARM(kid)", "OK(kid)", 'INSUFFICIENT_DATA("kid")', "TRUE",
                               "FALSE"])
        kind = rng.randrange(3)
        if kind == 0:
            return f"{build(depth - 1)} {rng.choice(['AND', 'OR'])} {build(depth - 1)}"
        if kind == 1:
            return "NOT " * rng.randrange(1, 40 if rng.random() < 0.9 else 2000) + build(
                depth - 1)
        return f"({build(depth - 1)})"

    text = build(rng.randrange(1, 9))
    if rng.random() < 0.3:
        cut = rng.randrange(len(text))
        text = text[:cut] + text[cut + rng.randrange(1, 4):]
    return text


def test_every_rule_that_is_stored_is_evaluated() -> None:
    rng = random.Random(11)
    rig = Rig()
    rig.metric_alarm("kid")
    stored = refused = 0
    for index in range(400):
        try:
            rig.call("PutCompositeAlarm", AlarmName=f"rule-{index}", AlarmRule=_rule(rng))
            stored += 1
        except CloudWatchError as exc:
            assert exc.status == 400, exc.message
            refused += 1
    rig.round(5.0)
    failures = [(a.name, a.reason) for a in rig.alarms.all() if a.reason.startswith(UNCHECKED)]
    assert failures == []
    composites = [a for a in rig.alarms.alarms.values() if a.alarm_type == "CompositeAlarm"]
    assert all(a.state in ("OK", "ALARM") for a in composites)
    assert stored > 100 and refused > 20


# ---------------------------------------------------------------------------------------------
# The store


def test_a_restart_skips_a_stored_rule_that_no_longer_parses(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(tmp_path)
    rig.metric_alarm("kid", TreatMissingData="ignore")
    rig.call("PutCompositeAlarm", AlarmName="broken", AlarmRule="ALARM(kid)")
    rig.call("PutCompositeAlarm", AlarmName="works", AlarmRule="ALARM(kid)")
    assert rig.alarms.db is not None
    rig.alarms.db.close()
    with sqlite3.connect(tmp_path / "alarms.db") as db:
        (doc,) = db.execute("SELECT doc FROM alarms WHERE name = 'broken'").fetchone()
        changed = json.loads(doc)
        changed["config"]["AlarmRule"] = "ALARM(kid"
        db.execute("UPDATE alarms SET doc = ? WHERE name = 'broken'", (json.dumps(changed),))
    with caplog.at_level(logging.WARNING):
        rig.alarms = rig._store()
        rig.api = CloudWatchService(rig.metrics, rig.clock, rig.alarms)
    assert any("broken" in r.getMessage() and "does not parse" in r.getMessage()
               for r in caplog.records)
    rig.call("SetAlarmState", AlarmName="kid", StateValue="ALARM", StateReason="test")
    rig.round()
    assert rig.alarm("works").state == "ALARM"
    broken = rig.alarm("broken")
    assert broken.state == "INSUFFICIENT_DATA" and "does not parse" in broken.reason
    listed = rig.call("DescribeAlarms", AlarmTypes=["CompositeAlarm"])["CompositeAlarms"]
    assert {a["AlarmName"] for a in listed} == {"broken", "works"}
    rig.call("DeleteAlarms", AlarmNames=["broken"])  # and it can be deleted
    rig.restart()
    assert rig.alarms.get("broken") is None and rig.alarm("works").state == "ALARM"


def test_a_put_writes_only_the_alarm_it_changed(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(tmp_path)
    for index in range(300):
        rig.metric_alarm(f"a-{index:03d}")
    assert rig.alarms.db is not None
    written: list[tuple[int, int, int]] = []
    real = rig.alarms.db.write

    def write(alarms: dict[str, str], deleted: list[str],
              history: list[tuple[int, str]]) -> None:
        written.append((len(alarms), len(deleted), len(history)))
        real(alarms, deleted, history)

    monkeypatch.setattr(rig.alarms.db, "write", write)
    rig.metric_alarm("one-more")
    rig.call("DeleteAlarms", AlarmNames=["a-000"])
    assert written == [(1, 0, 1), (0, 1, 1)]
    rig.restart()
    assert len(rig.alarms.all()) == 300 and rig.alarms.get("one-more") is not None


def test_history_pages_survive_new_items() -> None:
    rig = Rig()
    for index in range(8):
        rig.metric_alarm("paged", Threshold=float(index))
    first = rig.call("DescribeAlarmHistory", AlarmName="paged", MaxRecords=5)
    rig.metric_alarm("paged", Threshold=99.0)  # a newer item arrives between the pages
    second = rig.call("DescribeAlarmHistory", AlarmName="paged", MaxRecords=5,
                      NextToken=first["NextToken"])
    summaries = [i["HistoryData"] for i in first["AlarmHistoryItems"] + second[
        "AlarmHistoryItems"]]
    assert len(summaries) == 8 and len(set(summaries)) == 8  # each item once, none skipped
    with pytest.raises(CloudWatchError) as raised:
        rig.call("DescribeAlarmHistory", NextToken="garbage")
    assert raised.value.code == "InvalidNextToken"
