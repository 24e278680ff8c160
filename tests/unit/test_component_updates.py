"""A rolling update's plan and its batches on their own (``emulator.control.component_updates``):
no server, no Triton; the copies the runtime is asked for, batch by batch, are recorded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from emulator.clock import Clock
from emulator.control.component_updates import PlanError, RollingUpdate, Rollout, plan

FAST = Clock(scale=1e6)  # an emulated hour in a few milliseconds


def _config(batch: tuple[str, int], wait_s: int = 60, rollback: tuple[str, int] | None = None,
            timeout_s: int | None = None, alarms: tuple[str, ...] = ()) -> dict[str, Any]:
    policy: dict[str, Any] = {"MaximumBatchSize": {"Type": batch[0], "Value": batch[1]},
                              "WaitIntervalInSeconds": wait_s}
    if rollback is not None:
        policy["RollbackMaximumBatchSize"] = {"Type": rollback[0], "Value": rollback[1]}
    if timeout_s is not None:
        policy["MaximumExecutionTimeoutInSeconds"] = timeout_s
    config: dict[str, Any] = {"RollingUpdatePolicy": policy}
    if alarms:
        config["AutoRollbackConfiguration"] = {"Alarms": [{"AlarmName": a} for a in alarms]}
    return config


class Alarms:
    """CloudWatch alarms as a deployment sees them; ``set`` changes one as SetAlarmState does."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self._listeners: list[Callable[[str, str, str], None]] = []

    def exists(self, name: str) -> bool:
        return name in self.states

    def state(self, name: str) -> str | None:
        return self.states.get(name)

    def subscribe(self, callback: Callable[[str, str, str], None]) -> Callable[[], None]:
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def set(self, name: str, state: str) -> None:
        old, self.states[name] = self.states.get(name, "OK"), state
        for listener in list(self._listeners):
            listener(name, old, state)


def _run(config: dict[str, Any], copies: int, alarms: Alarms | None = None,
         on_roll: Callable[[int, int], None] | None = None,
         rollout: Rollout | None = None, clock: Clock = FAST,
         ) -> tuple[str | None, list[tuple[int, int]], list[dict[str, Any]]]:
    """The update to its end: its FailureReason (None: done), the (old, new) copies asked for,
    and what was stored after each batch."""
    rolls: list[tuple[int, int]] = []
    saved: list[dict[str, Any]] = []

    async def roll(old: int, new: int) -> None:
        rolls.append((old, new))
        if on_roll is not None:
            on_roll(old, new)

    progress = rollout or Rollout(plan(config, copies).to_doc(), time.time(), copies, copies)
    update = RollingUpdate("ic", progress, roll, clock, alarms,
                           lambda r: saved.append(r.to_doc()))
    return asyncio.run(update.run()), rolls, saved


def test_batches_of_copy_count_then_all_new() -> None:
    reason, rolls, saved = _run(_config(("COPY_COUNT", 2)), copies=5)
    assert reason is None
    assert rolls == [(3, 2), (1, 4), (0, 5)]  # the last batch is what is left
    assert [s["new"] for s in saved] == [2, 4, 5]


def test_a_capacity_percent_is_rounded_up_to_whole_copies() -> None:
    assert plan(_config(("CAPACITY_PERCENT", 25)), 6).batch == 2  # 1.5 copies -> 2
    assert plan(_config(("CAPACITY_PERCENT", 50)), 1).batch == 1
    assert plan(_config(("COPY_COUNT", 1), rollback=("CAPACITY_PERCENT", 100)), 4
                ).rollback_batch == 4
    assert plan(_config(("COPY_COUNT", 1)), 4).rollback_batch == 4  # default: all at once


@pytest.mark.parametrize(("batch", "copies"), [
    (("COPY_COUNT", 3), 4),  # 75% of the copies
    (("COPY_COUNT", 2), 50),  # 4%
    (("CAPACITY_PERCENT", 60), 10),
    (("CAPACITY_PERCENT", 4), 10),
    (("CAPACITY_PERCENT", 101), 10),
])
def test_a_batch_outside_5_to_50_percent_of_the_copies_is_refused(
        batch: tuple[str, int], copies: int) -> None:
    with pytest.raises(PlanError, match="MaximumBatchSize"):
        plan(_config(batch), copies)


def test_a_batch_of_one_copy_is_accepted_for_one_or_two_copies() -> None:
    assert plan(_config(("COPY_COUNT", 1)), 1).batch == 1
    assert plan(_config(("COPY_COUNT", 1)), 2).batch == 1


def test_an_alarm_during_a_bake_rolls_back_in_rollback_batches() -> None:
    alarms = Alarms()
    alarms.states["guard"] = "OK"

    def fire_after_the_second_batch(old: int, new: int) -> None:
        if (old, new) == (2, 2):
            alarms.set("guard", "ALARM")

    reason, rolls, saved = _run(
        _config(("COPY_COUNT", 1), wait_s=3600, rollback=("COPY_COUNT", 1), alarms=("guard",)),
        copies=4, alarms=alarms, on_roll=fire_after_the_second_batch)
    assert rolls == [(3, 1), (2, 2), (3, 1), (4, 0)]
    assert reason is not None
    assert 'CloudWatch alarm "guard" went into ALARM state during batch 2 of 4' in reason
    assert saved[-1]["rolling_back"] and saved[-1]["new"] == 0 and saved[-1]["reason"] == reason


def test_an_alarm_already_in_alarm_stops_the_update_before_its_first_batch() -> None:
    alarms = Alarms()
    alarms.states["guard"] = "ALARM"
    reason, rolls, _ = _run(_config(("COPY_COUNT", 1), alarms=("guard",)), copies=2,
                            alarms=alarms)
    assert rolls == []
    assert reason is not None and '"guard"' in reason


def test_a_new_copy_that_fails_to_start_rolls_the_update_back() -> None:
    def fail_second_batch(old: int, new: int) -> None:
        if new == 2:
            raise RuntimeError("the model did not load")

    reason, rolls, _ = _run(_config(("COPY_COUNT", 1)), copies=3, on_roll=fail_second_batch)
    assert rolls == [(2, 1), (1, 2), (3, 0)]  # rollback default: all old copies at once
    assert reason is not None and "the model did not load" in reason


def test_the_execution_timeout_rolls_back() -> None:
    """MaximumExecutionTimeoutInSeconds 600 at a clock scale of 600: 1 s real; each bake
    lasts an emulated hour (6 s), so the first bake is cut by the timeout."""
    reason, rolls, _ = _run(_config(("COPY_COUNT", 1), wait_s=3600, timeout_s=600), copies=2,
                            clock=Clock(scale=600))
    assert rolls[-1] == (2, 0)  # back to the old copies
    assert reason is not None and "MaximumExecutionTimeoutInSeconds (600 s)" in reason


def test_a_resumed_update_brings_both_sides_back_then_goes_on() -> None:
    config = _config(("COPY_COUNT", 1))
    stored = Rollout(plan(config, 3).to_doc(), time.time(), 3, 3, new=1, resumed=1)
    reason, rolls, _ = _run(config, 3, rollout=stored)
    assert reason is None
    assert rolls == [(2, 1), (1, 2), (0, 3)]
    rolling_back = Rollout(plan(config, 3).to_doc(), time.time(), 3, 3, new=2,
                           rolling_back=True, reason="why", resumed=1)
    reason, rolls, _ = _run(config, 3, rollout=rolling_back)
    assert reason == "why"
    assert rolls == [(1, 2), (3, 0)]
