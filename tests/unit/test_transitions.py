"""Transition rules: what is refused, which rule applies, and a lifecycle task held by one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from emulator.clock import Clock
from emulator.control.lifecycle import Lifecycle
from emulator.transitions import (
    TransitionError,
    TransitionTable,
    parse_transition,
)
from tests.clock_support import FakeTime


@pytest.mark.parametrize(("rule", "says"), [
    ([], "JSON object"),
    ({"resource": "model", "status": "Creating", "duration_s": 1}, '"resource" must be'),
    ({"resource": "endpoint", "status": "Failed", "duration_s": 1}, '"status" must be'),
    ({"resource": "endpoint", "status": "Creating"}, "Say how the transition goes"),
    ({"resource": "endpoint", "status": "Creating", "duration_s": -1}, ">= 0"),
    ({"resource": "endpoint", "status": "Creating", "duration_s": "30"}, ">= 0"),
    ({"resource": "endpoint", "status": "Creating", "never": True, "outcome": "Failed"},
     "one or the other"),
    ({"resource": "endpoint", "status": "Creating", "never": True, "duration_s": 5},
     "one or the other"),
    ({"resource": "endpoint", "status": "Creating", "outcome": "InService"}, "can only be"),
    ({"resource": "endpoint", "status": "Creating", "duration_s": 1, "reason": "x"},
     '"reason"'),
    ({"resource": "endpoint", "status": "Creating", "duration_s": 1, "colour": "red"},
     "Unknown field"),
])
def test_a_rule_that_could_never_apply_is_refused(rule: Any, says: str) -> None:
    with pytest.raises(TransitionError) as refused:
        parse_transition(rule)
    assert says in str(refused.value)


def test_the_rule_put_last_that_matches_applies_and_a_same_key_replaces() -> None:
    table = TransitionTable()
    table.put(parse_transition({"resource": "endpoint", "status": "Creating",
                                "duration_s": 10}))
    table.put(parse_transition({"resource": "endpoint", "name": "Slow-*",
                                "status": "Creating", "duration_s": 30}))
    rule = table.match("endpoint", "slow-1", "Creating")
    assert rule is not None and rule.duration_s == 30
    assert table.match("inference-component", "slow-1", "Creating") is None
    assert table.match("endpoint", "slow-1", "Deleting") is None
    table.put(parse_transition({"resource": "endpoint", "name": "slow-*", "status": "Creating",
                                "outcome": "Failed"}))
    assert len(table.describe()) == 2
    failed = table.match("endpoint", "SLOW-2", "Creating")
    assert failed is not None and failed.outcome == "Failed" and failed.reason
    assert table.clear() == 2


@dataclass
class Record:
    name: str
    status: str
    modified: float = 0.0
    failure_reason: str | None = None


def held_lifecycle(rule: dict[str, Any]) -> tuple[Lifecycle[Record], Record, Clock, list[str]]:
    clock = Clock(1, time_fn=FakeTime())
    table = TransitionTable(clock)
    table.put(parse_transition(rule))
    record = Record("ep", "Creating")
    lifecycle: Lifecycle[Record] = Lifecycle(lambda _n: record, lambda _r: None, clock.now,
                                             "endpoint", table)
    return lifecycle, record, clock, []


def test_a_duration_holds_the_work_until_the_clock_passes_it() -> None:
    lifecycle, record, clock, done = held_lifecycle(
        {"resource": "endpoint", "status": "Creating", "duration_s": 30})

    async def work() -> None:
        done.append("work")
        record.status = "InService"

    async def scenario() -> None:
        task = lifecycle.spawn("ep", work())
        await clock.advance(29)
        assert lifecycle.held("ep") and not done
        await clock.advance(1)
        await task
        assert not lifecycle.held("ep")

    asyncio.run(scenario())
    assert (done, record.status) == (["work"], "InService")


def test_a_failed_outcome_fails_the_record_without_its_work() -> None:
    lifecycle, record, clock, done = held_lifecycle(
        {"resource": "endpoint", "status": "Creating", "outcome": "Failed", "reason": "no room"})

    async def work() -> None:
        done.append("work")

    async def scenario() -> None:
        await lifecycle.spawn("ep", work())

    asyncio.run(scenario())
    assert (done, record.status, record.failure_reason) == ([], "Failed", "no room")


def test_never_holds_until_cancelled() -> None:
    lifecycle, record, clock, done = held_lifecycle(
        {"resource": "endpoint", "status": "Creating", "never": True})

    async def work() -> None:
        done.append("work")

    async def scenario() -> None:
        task = lifecycle.spawn("ep", work())
        await clock.advance(86_400)
        assert lifecycle.held("ep") and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert (done, record.status) == ([], "Creating")
