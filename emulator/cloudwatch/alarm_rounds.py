"""One evaluation round of every alarm that is due.

The metric alarms that are due are evaluated in a worker thread over the metric series
(``emulator/cloudwatch/evaluation.py``), then the composite alarms against their children's
states (children first: a composite of composites settles in as many passes as it is deep),
then the actions (``alarm_actions``). Each alarm on its own: one that fails is recorded on that
alarm (INSUFFICIENT_DATA, the reason saying why), the others go on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Protocol

from emulator.clock import Clock
from emulator.cloudwatch import alarm_rule, evaluation
from emulator.cloudwatch.alarm_actions import AlarmActions
from emulator.cloudwatch.alarm_model import ALARM, INSUFFICIENT_DATA, OK, Alarm
from emulator.cloudwatch.compiled import Compiled
from emulator.cloudwatch.series import MetricStore

log = logging.getLogger(__name__)

MAX_COMPOSITE_DEPTH = 10  # passes per round to settle composites of composites


class Alarms(Protocol):
    """What a round needs of the alarms' store (``emulator.cloudwatch.alarms.AlarmStore``)."""

    lock: threading.RLock
    alarms: dict[str, Alarm]
    clock: Clock
    metrics: MetricStore
    actions: AlarmActions

    def take_due(self, now: float,
                 every: bool) -> list[tuple[Alarm, Compiled, list[float]]]: ...

    def transition(self, name: str, state: str, reason: str, reason_data: str | None,
                   value: float | None, manual: bool = False) -> bool: ...

    def mark_changed(self, name: str) -> None: ...

    def save(self) -> None: ...

    def state(self, name: str) -> str | None: ...

    def composite_rules(self) -> list[tuple[str, alarm_rule.Rule | None, str]]: ...

    def _composite_reason(self, rule: alarm_rule.Rule, state: str) -> tuple[str, str]: ...


class AlarmRounds:
    """The rounds of one store's alarms."""

    def __init__(self, store: Alarms) -> None:
        self._store = store

    async def evaluate_due(self, every: bool = False) -> None:
        """One round: the metric alarms that are due (all of them with ``every``), the
        composite alarms, then the actions (state changes' and, every evaluation while in
        ALARM, Auto Scaling policies' again)."""
        store = self._store
        now = store.clock.now()
        with store.lock:
            work = [(a.name, dict(a.config), a.state, compiled, ends)
                    for a, compiled, ends in store.take_due(now, every)]
        outcomes = await asyncio.to_thread(self._evaluate_all, work) if work else []
        changed = False
        for (name, *_), evaluations in zip(work, outcomes, strict=True):
            for index, outcome in enumerate(evaluations):
                try:
                    changed |= self._settle(name, outcome,
                                            repeat=index == len(evaluations) - 1)
                except Exception as exc:
                    log.exception("alarm %s: its new state could not be stored", name)
                    changed |= self._failed(name, exc)
        if self._evaluate_composites():
            changed = True
        if changed:
            await asyncio.to_thread(store.save)  # off the event loop
        await store.actions.run()

    def _settle(self, name: str, outcome: evaluation.Outcome | Exception | None,
                repeat: bool) -> bool:
        """Store one evaluation's outcome; ``repeat``: an alarm that stays in ALARM runs its
        repeating actions again (once a round, however many windows it caught up on)."""
        if isinstance(outcome, Exception):
            return self._failed(name, outcome)
        if outcome is None:
            return False
        store = self._store
        if store.transition(name, outcome.state, outcome.reason, outcome.reason_data,
                            outcome.value):
            return True
        with store.lock:
            still = store.alarms.get(name)
            if repeat and still is not None and still.state == ALARM and still.actions_enabled:
                store.actions.queue(still, True, ALARM)
        return False

    def _failed(self, name: str, error: Exception) -> bool:
        """An alarm that could not be evaluated: INSUFFICIENT_DATA, the reason saying why [U]
        (AWS keeps an alarm it cannot evaluate in INSUFFICIENT_DATA)."""
        store = self._store
        reason = (f"Unchecked: the alarm could not be evaluated ({type(error).__name__}: "
                  f"{error})")[:1023]
        with store.lock:
            alarm = store.alarms.get(name)
            if alarm is None or alarm.reason == reason:
                return False
            if alarm.state == INSUFFICIENT_DATA:
                alarm.reason, alarm.reason_data = reason, None
                alarm.state_updated = store.clock.now()
                store.mark_changed(name)
                return True
        return store.transition(name, INSUFFICIENT_DATA, reason, None, None)

    def _evaluate_all(self, work: list[tuple[str, dict[str, Any], str, Compiled, list[float]]]
                      ) -> list[list[evaluation.Outcome | Exception | None]]:
        """Each alarm's outcome at the end of each of its windows, oldest first (the state each
        one leaves is the next one's current state); an alarm that fails stops at its error."""
        store = self._store
        out: list[list[evaluation.Outcome | Exception | None]] = []
        for name, config, state, compiled, ends in work:
            outcomes: list[evaluation.Outcome | Exception | None] = []
            for end in ends:
                try:
                    outcome = evaluation.evaluate(config, store.metrics, store.clock, end,
                                                  state, compiled.expressions)
                except Exception as exc:  # noqa: BLE001 - recorded on this alarm alone
                    log.warning("alarm %s could not be evaluated: %s: %s", name,
                                type(exc).__name__, exc)
                    outcomes.append(exc)
                    break
                outcomes.append(outcome)
                if outcome is not None:
                    state = outcome.state
            out.append(outcomes)
        return out

    def _evaluate_composites(self) -> bool:
        """Every composite alarm against its children's states now (children first: a
        composite of composites settles in as many passes as it is deep)."""
        store = self._store
        changed = False
        for _ in range(MAX_COMPOSITE_DEPTH):
            composites = store.composite_rules()
            moved = False
            for name, rule, current in composites:
                if rule is None:
                    continue
                try:
                    state = ALARM if rule.holds(store.state) else OK
                    if state == current:
                        continue
                    reason, data = store._composite_reason(rule, state)
                    moved |= store.transition(name, state, reason, data, None)
                except Exception as exc:
                    log.exception("composite alarm %s could not be evaluated", name)
                    changed |= self._failed(name, exc)
            changed |= moved
            if not moved:
                break
        return changed
