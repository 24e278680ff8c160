"""Alarm actions: who runs each kind (by ARN prefix), the calls waiting for the next round, and
those running in the background.

A state change (and, every evaluation while an alarm stays in ALARM, an Auto Scaling policy's
action again) queues its calls under the store's lock; the round runs them after its
evaluations (``AlarmStore.evaluate_due``). A handler that talks to another server (SNS) runs each
call in the background, so a slow or absent server never holds up the evaluation of every alarm
(and a deployment's rollback). Each call's outcome is written to the alarm's history.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from emulator.cloudwatch.actions import ActionCall, ActionHandler
from emulator.cloudwatch.alarm_model import Alarm

log = logging.getLogger(__name__)

# Actions CloudWatch runs again at every evaluation while the alarm stays in ALARM (Auto
# Scaling's documented behaviour); the others (SNS) run once per state change.
REPEATING_PREFIX = "arn:aws:autoscaling:"


class AlarmActions:
    """``done(call, error)`` writes a call's outcome to its alarm's history; ``save`` stores
    what changed (called off the event loop)."""

    def __init__(self, lock: threading.RLock, done: Callable[[ActionCall, str | None], None],
                 save: Callable[[], None]) -> None:
        self._lock = lock
        self._done = done
        self._save = save
        # (ARN prefix, handler, run in the background: not awaited by the round)
        self._handlers: list[tuple[str, ActionHandler, bool]] = []
        self._pending: list[ActionCall] = []  # to run in the next round (under the lock)
        self.background: set[asyncio.Task[bool]] = set()

    def add_handler(self, arn_prefix: str, handler: ActionHandler, background: bool) -> None:
        self._handlers.append((arn_prefix, handler, background))

    def queue(self, alarm: Alarm, repeated: bool, old: str) -> None:
        """The alarm's actions for its state, for the next round (the caller holds the lock);
        a repeat runs only the actions that repeat."""
        self._pending.extend(
            ActionCall(arn, alarm.name, alarm.arn, alarm.state, alarm.reason, alarm.reason_data,
                       dict(alarm.config), repeated, alarm.value, alarm.state_transitioned, old)
            for arn in alarm.actions_for(alarm.state)
            if not repeated or arn.startswith(REPEATING_PREFIX))

    async def run(self) -> None:
        """Run the queued calls, each by the handler of its ARN prefix."""
        with self._lock:
            calls, self._pending = self._pending, []
        if not calls:
            return
        by_handler: dict[int, list[ActionCall]] = {}
        recorded = False
        for call in calls:
            for index, (prefix, _handler, _background) in enumerate(self._handlers):
                if call.arn.startswith(prefix):
                    by_handler.setdefault(index, []).append(call)
                    break
            else:
                self._done(call, "no handler for this kind of action in the emulator")
                recorded = True
        for index, batch in by_handler.items():
            _prefix, handler, background = self._handlers[index]
            if background:  # one task per call: a slow one holds up no other
                for call in batch:
                    task = asyncio.create_task(self._run_batch(handler, [call]))
                    self.background.add(task)
                    task.add_done_callback(self.background.discard)
            else:
                recorded |= await self._run_batch(handler, batch, save=False)
        if recorded:
            await asyncio.to_thread(self._save)

    async def _run_batch(self, handler: ActionHandler, batch: list[ActionCall],
                         save: bool = True) -> bool:
        """Run one handler's calls and write their history; True when it wrote any."""
        try:
            results = await handler(batch)
        except Exception as exc:
            log.exception("alarm actions failed")
            results = [f"{type(exc).__name__}: {exc}" for _ in batch]
        recorded = False
        for call, error in zip(batch, results, strict=True):
            if call.repeated and error is None:
                continue  # [U] a repeat that ran is not history (one item per minute)
            self._done(call, error)
            recorded = True
        if recorded and save:
            await asyncio.to_thread(self._save)
        return recorded
