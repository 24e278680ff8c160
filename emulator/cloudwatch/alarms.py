"""CloudWatch alarms: the one store of every alarm, its state and history, and their evaluation.

One ``AlarmStore`` per app (``app.state.alarms``, built in ``emulator/app.py`` beside the
``MetricStore``). Who uses it:

- the CloudWatch API (``emulator/cloudwatch/alarm_api.py``): PutMetricAlarm, DescribeAlarms, ...;
- Application Auto Scaling (``emulator/autoscaling``): the target-tracking alarms it creates and
  the policies alarm actions run (``add_action_handler``);
- **emulator/control (deployments)**: auto-rollback watches alarms through ``exists``, ``state``
  and ``subscribe`` only; nothing else here is promised to it.

Evaluation runs on the emulated clock (``emulator/clock.py``) over the same metric series the
CloudWatch reads serve (``emulator/cloudwatch/series.py``): ``emulator/cloudwatch/evaluation.py``
says how; every [U] choice is listed in ``docs/alarms.md``.

The parts beside it: one evaluation round (``alarm_rounds``) and the actions' handlers, queue
and background calls (``alarm_actions``).

Isolation: each alarm is evaluated on its own; one that fails (a surprise in its metric math,
its rule) is recorded on that alarm (INSUFFICIENT_DATA, the reason saying why) and the round goes
on with the others. Rules and expressions are parsed once, at Put or when a stored alarm is loaded
(``emulator/cloudwatch/compiled.py``); a stored alarm whose rule no longer parses is loaded,
listed and deletable, but skipped by the evaluation, with a warning in the log.

Persistence: ``emulator/cloudwatch/alarm_db.py`` (SQLite); every change writes only the alarms
it touched and the history items it added.

Thread safety: API calls run in worker threads, the evaluation on the event loop; one lock
guards the alarms. Subscribers are told after the change is stored (``alarm_listeners``: on
the event loop's thread, in order; one that raises is logged and stays subscribed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from emulator.clock import Clock
from emulator.cloudwatch import alarm_rule
from emulator.cloudwatch.actions import ActionCall, ActionHandler
from emulator.cloudwatch.alarm_actions import AlarmActions
from emulator.cloudwatch.alarm_db import AlarmDb, PendingWrites
from emulator.cloudwatch.alarm_listeners import StateListener, StateListeners
from emulator.cloudwatch.alarm_model import (
    COMPOSITE_ALARM,
    INSUFFICIENT_DATA,
    METRIC_ALARM,
    Alarm,
    HistoryItem,
    composite_reason,
    evaluation_interval,
)
from emulator.cloudwatch.alarm_rounds import AlarmRounds
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError, invalid
from emulator.cloudwatch.compiled import Compiled, CompileError, compile_alarm
from emulator.cloudwatch.due import DueQueue
from emulator.cloudwatch.notifications import SnsPublisher
from emulator.cloudwatch.series import MetricStore

log = logging.getLogger(__name__)

# How often the loop wakes, emulated seconds: the shortest alarm period CloudWatch evaluates.
TICK_S = 10.0
MAX_HISTORY = 10_000  # items kept, all alarms together  [U] (AWS keeps 30 days)


class AlarmStore:
    def __init__(self, metrics: MetricStore, clock: Clock, region: str, account: str,
                 state_file: Path | None = None, sns_endpoint_url: str | None = None) -> None:
        """``state_file``: the SQLite file alarms are kept in (``alarm_db``); None: memory."""
        self.metrics = metrics
        self.clock = clock
        self.region = region
        self.account = account
        self.state_file = state_file
        self.lock = threading.RLock()
        self.alarms: dict[str, Alarm] = {}
        self.history: list[HistoryItem] = []
        # Parsed rules and expressions, by alarm; an alarm missing here is not evaluated.
        self._compiled: dict[str, Compiled] = {}
        self._parents: dict[str, set[str]] = {}  # alarm -> the composites whose rule names it
        # What the next save writes (under the lock): alarms changed, deleted, history added.
        self._writes = PendingWrites()
        self._next_history_id = 1
        self.db = AlarmDb(state_file, MAX_HISTORY) if state_file is not None else None
        self.listeners = StateListeners()
        self.actions = AlarmActions(self.lock, self._action_done, self.save)
        self._rounds = AlarmRounds(self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._due = DueQueue()  # the metric alarms' next evaluations, real epoch seconds
        self._composites: set[str] = set()  # the names of the composite alarms
        self._save_lock = threading.Lock()
        self._load()
        # SNS topics: published to --sns-endpoint-url, else recorded in the history only.
        self.sns = SnsPublisher(sns_endpoint_url, self)
        self.add_action_handler("arn:aws:sns:", self.sns.publish, background=True)

    # -----------------------------------------------------------------------------------------
    # The interface deployments (emulator/control) rely on

    def exists(self, name: str) -> bool:
        with self.lock:
            return name in self.alarms

    def state(self, name: str) -> str | None:
        """"OK", "ALARM" or "INSUFFICIENT_DATA"; None when there is no such alarm."""
        with self.lock:
            alarm = self.alarms.get(name)
            return alarm.state if alarm is not None else None

    def subscribe(self, callback: StateListener) -> Callable[[], None]:
        """``callback(name, old, new)`` on every state change of any alarm; returns the
        function that unsubscribes it (``alarm_listeners``)."""
        return self.listeners.subscribe(callback)

    # -----------------------------------------------------------------------------------------
    # Actions

    def add_action_handler(self, arn_prefix: str, handler: ActionHandler,
                           background: bool = False) -> None:
        """Alarm actions whose ARN starts with ``arn_prefix`` are run by ``handler``; in the
        background when it talks to another server (SNS), so that a slow or absent server
        never holds up the evaluation of every alarm (and a deployment's rollback)."""
        self.actions.add_handler(arn_prefix, handler, background)

    def arn(self, name: str) -> str:
        return f"arn:aws:cloudwatch:{self.region}:{self.account}:alarm:{name}"

    # -----------------------------------------------------------------------------------------
    # Changes (every one stored, listed in the history and told to the listeners)

    def get(self, name: str) -> Alarm | None:
        with self.lock:
            return self.alarms.get(name)

    def all(self) -> list[Alarm]:
        with self.lock:
            return sorted(self.alarms.values(), key=lambda a: a.name)

    # -----------------------------------------------------------------------------------------
    # Persistence: only what changed is written (alarm_db)

    def _load(self) -> None:
        if self.db is None:
            return
        docs, history = self.db.load()
        self._adopt(docs)
        for item_id, doc in history:
            try:
                self.history.append(HistoryItem(**{**doc, "id": item_id}))
            except TypeError:
                log.warning("alarm history item %s not restored", item_id)
        self._next_history_id = self.db.next_history_id()

    def _adopt(self, docs: list[dict[str, Any]]) -> list[str]:
        """Stored alarms (``asdict`` of each) taken in as they were, state included, their
        first evaluations spread over their first interval; the names taken in (under the
        lock, or before the store is shared)."""
        adopted = []
        for doc in docs:
            try:
                alarm = Alarm(**doc)
            except TypeError as exc:
                log.warning("alarm %s not restored: its stored form is not an alarm (%s)",
                            doc.get("name"), exc)
                continue
            self.alarms[alarm.name] = alarm
            adopted.append(alarm.name)
            try:
                self._set_compiled(alarm.name, compile_alarm(alarm.alarm_type, alarm.config))
            except (CompileError, KeyError, TypeError) as exc:
                log.warning("alarm %s is not evaluated: its stored rule or expression does not "
                            "parse (%s); delete it or put it again", alarm.name, exc)
                alarm.state, alarm.reason = INSUFFICIENT_DATA, (
                    f"Unchecked: the stored alarm does not parse: {exc}")[:1023]
        # Their first evaluations spread over the first interval, not all in the first round
        # (10,000 at once would hold up the server's start by a second or more) [U].
        now = self.clock.now()
        for index, name in enumerate(sorted(adopted)):
            alarm = self.alarms[name]
            spread = self.clock.real_duration(evaluation_interval(alarm.config)) \
                if alarm.alarm_type == METRIC_ALARM else 0.0
            self._schedule(alarm, now + spread * index / max(1, len(adopted)))
        return adopted

    # -----------------------------------------------------------------------------------------
    # The whole state at once (reset, snapshots: ``emulator.state``)

    def export(self) -> list[dict[str, Any]]:
        """Every alarm as stored (configuration, state, reason, tags), by name."""
        with self.lock:
            return [asdict(self.alarms[name]) for name in sorted(self.alarms)]

    def clear(self) -> int:
        """Every alarm and the whole history forgotten, on disk too; how many alarms there
        were. Actions already queued still run (their alarm gone, they are not recorded)."""
        with self.lock:
            count = len(self.alarms)
            for name in list(self.alarms):
                self._due.forget(name)
                self._set_compiled(name, None)
            self.alarms.clear()
            self.history.clear()
            self._composites.clear()
            self._writes.clear()
        if self.db is not None:
            with self._save_lock:
                self.db.clear()
        return count

    def load(self, docs: list[dict[str, Any]]) -> int:
        """``export``'s alarms added as they were (state included) to a store that has none of
        them; ValueError naming one that is not an alarm or exists already."""
        with self.lock:
            for doc in docs:
                name = doc.get("name") if isinstance(doc, dict) else None
                if not isinstance(name, str):
                    raise ValueError(f"an alarm without a name: {str(doc)[:200]}")
                if name in self.alarms:
                    raise ValueError(f"the alarm {name} exists already")
                try:
                    Alarm(**doc)
                except TypeError as exc:
                    raise ValueError(f"the alarm {name} is not an alarm's stored form ({exc})") \
                        from None
            self._writes.changed.update(self._adopt(docs))
            self._wake()
        self.save()
        return len(docs)

    def save(self) -> None:
        """Write what changed since the last save (alarms, states, history) in one
        transaction; one writer at a time."""
        if self.db is None:
            with self.lock:
                self._writes.clear()
            return
        with self._save_lock:
            with self.lock:
                changed, deleted, history = self._writes.take(self.alarms)
            self.db.write(changed, deleted, history)

    def _schedule(self, alarm: Alarm, due: float) -> None:
        """When the alarm is evaluated next (a metric alarm); composites are in every round."""
        if alarm.alarm_type == COMPOSITE_ALARM:
            self._composites.add(alarm.name)
            return
        self._due.schedule(alarm.name, due)

    def take_due(self, now: float, every: bool) -> list[tuple[Alarm, Compiled, list[float]]]:
        """The metric alarms due now (all of them with ``every``) that have a rule to evaluate,
        with the ends of the windows to evaluate (``DueQueue.windows``), each scheduled again
        for the end of its next window (under the lock)."""
        if every:
            due = [a for a in self.alarms.values() if a.alarm_type == METRIC_ALARM]
        else:
            due = [a for a in map(self.alarms.get, self._due.take(now)) if a is not None]
        taken: list[tuple[Alarm, Compiled, list[float]]] = []
        for alarm in due:
            interval = self.clock.real_duration(evaluation_interval(alarm.config))
            ends = self._due.windows(alarm.name, now, interval, every)
            self._schedule(alarm, self._due.next_end(alarm.name, now, interval))
            if alarm.name in self._compiled:
                taken.append((alarm, self._compiled[alarm.name], ends))
        return taken

    def compiled(self, name: str) -> Compiled | None:
        """The alarm's parsed rule or expressions; None when it has none that parses."""
        with self.lock:
            return self._compiled.get(name)

    def rule(self, name: str) -> alarm_rule.Rule | None:
        compiled = self.compiled(name)
        return compiled.rule if compiled is not None else None

    def parents(self, name: str) -> list[str]:
        """The composite alarms whose rule names ``name``."""
        with self.lock:
            return sorted(self._parents.get(name, ()))

    def composite_rules(self) -> list[tuple[str, alarm_rule.Rule | None, str]]:
        """Each composite alarm that has a rule: its name, rule and state now."""
        with self.lock:
            return [(name, self._compiled[name].rule, self.alarms[name].state)
                    for name in sorted(self._composites)
                    if name in self._compiled and name in self.alarms]

    def mark_changed(self, name: str) -> None:
        """The alarm is written by the next save (under the lock)."""
        self._writes.changed.add(name)

    def _set_compiled(self, name: str, compiled: Compiled | None) -> None:
        """Keep ``name``'s parsed form (None: forget it) and who names whom (under the lock)."""
        old = self._compiled.pop(name, None)
        for child in old.rule.names if old is not None and old.rule is not None else ():
            self._parents.get(child, set()).discard(name)
            if not self._parents.get(child, True):
                del self._parents[child]
        if compiled is not None:
            self._compiled[name] = compiled
            for child in compiled.rule.names if compiled.rule is not None else ():
                self._parents.setdefault(child, set()).add(name)

    # -----------------------------------------------------------------------------------------
    # Changes from the API

    def put(self, name: str, alarm_type: str, config: dict[str, Any],
            tags: dict[str, str]) -> None:
        """Create or replace an alarm. A replaced alarm keeps its state until it is evaluated,
        at once (AWS: "its state is left unchanged, but the update completely overwrites the
        previous configuration")."""
        now = self.clock.now()
        try:
            compiled = compile_alarm(alarm_type, config)
        except CompileError as exc:
            raise CloudWatchError("ValidationError", str(exc)) from exc
        with self.lock:
            existing = self.alarms.get(name)
            if existing is not None and existing.alarm_type != alarm_type:
                raise invalid(f"The alarm {name} already exists as a {existing.alarm_type}; "
                              "delete it first to reuse its name.")  # [U] wording
            if existing is None:
                alarm = Alarm(name, self.arn(name), alarm_type, config, state_updated=now,
                              state_transitioned=now, config_updated=now, tags=dict(tags))
                self.alarms[name] = alarm
                kind = "Create"
            else:
                existing.config, existing.config_updated = config, now
                # tags given with an update are ignored, as AWS documents (TagResource adds)
                existing.last_repeat = 0.0
                alarm, kind = existing, "Update"
            self._set_compiled(name, compiled)
            self._writes.touched(name)
            self._due.forget(name)  # a new rule: its windows start now
            self._schedule(alarm, 0.0)
            self._wake()
            self._record(alarm, "ConfigurationUpdate", f'Alarm "{name}" '
                         f'{"created" if kind == "Create" else "updated"}',
                         {"version": "1.0", "type": kind,
                          ("createdAlarm" if kind == "Create" else "updatedAlarm"):
                              {"alarmName": name, **config}}, now)
        self.save()

    def delete(self, names: list[str]) -> list[str]:
        """Deletes all of them, or none: returns the names not found (nothing deleted then)."""
        now = self.clock.now()
        with self.lock:
            unknown = [n for n in names if n not in self.alarms]
            if unknown:
                return unknown
            for name in names:
                alarm = self.alarms.pop(name)
                self._due.forget(name)
                self._composites.discard(name)
                self._set_compiled(name, None)
                self._writes.removed(name)
                self._record(alarm, "ConfigurationUpdate", f'Alarm "{name}" deleted',
                             {"version": "1.0", "type": "Delete",
                              "deletedAlarm": {"alarmName": name, **alarm.config}}, now)
        self.save()
        return []

    def set_actions_enabled(self, names: list[str], enabled: bool) -> None:
        now = self.clock.now()
        with self.lock:
            for name in names:  # unknown names are skipped, as AWS does  [U]
                alarm = self.alarms.get(name)
                if alarm is None or alarm.actions_enabled == enabled:
                    continue
                alarm.config = {**alarm.config, "ActionsEnabled": enabled}
                alarm.config_updated = now
                self._writes.changed.add(name)
                self._record(alarm, "ConfigurationUpdate", f'Alarm "{name}" updated',
                             {"version": "1.0", "type": "Update",
                              "updatedAlarm": {"alarmName": name, "actionsEnabled": enabled}},
                             now)
        self.save()

    def set_state(self, name: str, state: str, reason: str, reason_data: str | None) -> None:
        """SetAlarmState: the state is set now, its actions run; the next evaluation may
        change it back (AWS: "the alarm returns to its actual state ... the next time")."""
        self.transition(name, state, reason, reason_data, None, manual=True)
        self.save()

    def tag(self, name: str, tags: dict[str, str]) -> None:
        with self.lock:
            self.alarms[name].tags.update(tags)
            self._writes.changed.add(name)
        self.save()

    def untag(self, name: str, keys: list[str]) -> None:
        with self.lock:
            for key in keys:
                self.alarms[name].tags.pop(key, None)
            self._writes.changed.add(name)
        self.save()

    # -----------------------------------------------------------------------------------------
    # Transitions, history, actions

    def _record(self, alarm: Alarm, item_type: str, summary: str, data: dict[str, Any],
                now: float) -> None:
        item = HistoryItem(alarm.name, alarm.alarm_type, now, item_type, summary,
                           json.dumps(data, separators=(",", ":")), self._next_history_id)
        self._next_history_id += 1
        self.history.append(item)
        self._writes.history.append(item)
        del self.history[:-MAX_HISTORY]

    def transition(self, name: str, state: str, reason: str, reason_data: str | None,
                    value: float | None, manual: bool = False) -> bool:
        """Store a new state (history, listeners, actions); False when it did not change."""
        now = self.clock.now()
        with self.lock:
            alarm = self.alarms.get(name)
            if alarm is None:
                return False
            old = alarm.state
            if alarm.value != value:
                alarm.value = value
                self._writes.changed.add(name)
            if old == state and not manual:
                return False  # the reason stays the transition's, as AWS shows it
            self._writes.changed.add(name)
            alarm.reason, alarm.reason_data, alarm.state_updated = reason, reason_data, now
            if old != state:
                alarm.state_transitioned = now
            alarm.state = state
            new_state: dict[str, Any] = {"stateValue": state, "stateReason": reason}
            if reason_data:
                with contextlib.suppress(ValueError):
                    new_state["stateReasonData"] = json.loads(reason_data)
            self._record(alarm, "StateUpdate", f"Alarm updated from {old} to {state}",
                         {"version": "1.0", "oldState": {"stateValue": old},
                          "newState": new_state}, now)
            if alarm.actions_enabled:
                self.actions.queue(alarm, False, old)
            alarm.last_repeat = now
        log.info("alarm %s: %s -> %s (%s)", name, old, state, reason)
        if old != state:
            self.listeners.notify(name, old, state)
        self._wake()
        return True

    def _wake(self) -> None:
        """Have the loop run a round now (from any thread)."""
        loop, changed = self._loop, self._changed
        if loop is not None and changed is not None and not loop.is_closed():
            loop.call_soon_threadsafe(changed.set)

    def _action_done(self, call: ActionCall, error: str | None) -> None:
        now = self.clock.now()
        with self.lock:
            alarm = self.alarms.get(call.alarm_name)
            if alarm is None:
                return
            if error is None:
                summary = f"Successfully executed action {call.arn}"
            else:
                summary = f"Failed to execute action {call.arn}. Received error: \"{error}\""
            self._record(alarm, "Action", summary, {
                "actionState": "Succeeded" if error is None else "Failed",
                "stateUpdateTimestamp": int(call.transitioned * 1000),
                "notificationResource": call.arn,
                **({"error": error} if error else {})}, now)

    # -----------------------------------------------------------------------------------------
    # Evaluation loop

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self._loop = self.listeners.loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        task = asyncio.create_task(self._run(), name="cloudwatch-alarms")
        try:
            yield
        finally:
            for running_task in (task, *self.actions.background):
                running_task.cancel()
            for running_task in (task, *self.actions.background):
                with contextlib.suppress(asyncio.CancelledError):
                    await running_task
            self.sns.close()
            self._loop = self.listeners.loop = None

    async def _run(self) -> None:
        assert self._changed is not None
        while True:
            try:
                await self.evaluate_due()
            except Exception:  # one bad round must not stop the alarms
                log.exception("alarm evaluation failed")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                # A SetAlarmState or a new alarm is acted on at once, not at the next tick; an
                # advance of the clock brings the tick forward.
                await self.clock.wait_for(self._changed.wait(), TICK_S)

    async def evaluate_all(self) -> None:
        """A round in which every metric alarm is due, and its background actions finished
        (tests that step a fake clock)."""
        await self.evaluate_due(every=True)
        if self.actions.background:
            await asyncio.gather(*self.actions.background)

    async def evaluate_due(self, every: bool = False) -> None:
        """One round (``alarm_rounds``): the metric alarms that are due (all of them with
        ``every``), the composite alarms, then the actions."""
        await self._rounds.evaluate_due(every)

    def _composite_reason(self, rule: alarm_rule.Rule, state: str) -> tuple[str, str]:
        """A composite alarm's StateReason and StateReasonData from its children now."""
        with self.lock:
            children = [self.alarms[n] for n in sorted(rule.alarms()) if n in self.alarms]
        return composite_reason(children, state)
