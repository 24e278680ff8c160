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

Thread safety: API calls run in worker threads, the evaluation on the event loop; one lock
guards the alarms. Subscribers are called on the event loop thread (``call_soon_threadsafe``
when the change came from a worker thread), after the change is stored, in subscription order;
they must not block. A subscriber that raises is logged and stays subscribed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from emulator.clock import Clock
from emulator.cloudwatch.series import MetricStore

log = logging.getLogger(__name__)

OK, ALARM, INSUFFICIENT_DATA = "OK", "ALARM", "INSUFFICIENT_DATA"
STATES = (OK, ALARM, INSUFFICIENT_DATA)
METRIC_ALARM, COMPOSITE_ALARM = "MetricAlarm", "CompositeAlarm"
INITIAL_REASON = "Unchecked: Initial alarm creation"

StateListener = Callable[[str, str, str], None]  # (alarm name, old state, new state)


@dataclass
class HistoryItem:
    alarm_name: str
    alarm_type: str
    timestamp: float  # real epoch seconds
    item_type: str  # ConfigurationUpdate | StateUpdate | Action
    summary: str
    data: str  # JSON text, as AWS writes HistoryData


@dataclass
class Alarm:
    """One alarm. ``config`` holds the Put*Alarm parameters as accepted (AlarmName excluded)."""

    name: str
    arn: str
    alarm_type: str
    config: dict[str, Any]
    state: str = INSUFFICIENT_DATA
    reason: str = INITIAL_REASON
    reason_data: str | None = None
    state_updated: float = 0.0  # real epoch seconds
    state_transitioned: float = 0.0
    config_updated: float = 0.0
    tags: dict[str, str] = field(default_factory=dict)
    # The last moment its repeating actions (Auto Scaling policies) ran, real epoch seconds.
    last_repeat: float = 0.0

    @property
    def actions_enabled(self) -> bool:
        return bool(self.config.get("ActionsEnabled", True))

    def actions_for(self, state: str) -> list[str]:
        member = {OK: "OKActions", ALARM: "AlarmActions",
                  INSUFFICIENT_DATA: "InsufficientDataActions"}[state]
        return list(self.config.get(member) or [])


@dataclass(frozen=True)
class ActionCall:
    """One alarm action to run: the ARN, and the alarm as it is at that moment."""

    arn: str
    alarm_name: str
    alarm_arn: str
    state: str
    reason: str
    reason_data: str | None
    config: dict[str, Any]
    repeated: bool  # a repeat while the alarm stays in ALARM, not a state change


ActionHandler = Callable[[ActionCall], Awaitable[str | None]]  # -> None, or why it failed


class AlarmStore:
    def __init__(self, metrics: MetricStore, clock: Clock, region: str, account: str,
                 state_file: Path | None = None) -> None:
        self.metrics = metrics
        self.clock = clock
        self.region = region
        self.account = account
        self.state_file = state_file
        self.lock = threading.RLock()
        self.alarms: dict[str, Alarm] = {}
        self.history: list[HistoryItem] = []
        self._listeners: list[StateListener] = []
        self._action_handlers: list[tuple[str, ActionHandler]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._load()

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
        function that unsubscribes it."""
        with self.lock:
            self._listeners.append(callback)

        def unsubscribe() -> None:
            with self.lock, contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return unsubscribe

    # -----------------------------------------------------------------------------------------
    # Actions

    def add_action_handler(self, arn_prefix: str, handler: ActionHandler) -> None:
        """Alarm actions whose ARN starts with ``arn_prefix`` are run by ``handler``."""
        self._action_handlers.append((arn_prefix, handler))

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

    def _notify(self, name: str, old: str, new: str) -> None:
        with self.lock:
            listeners = list(self._listeners)
        loop = self._loop

        def call() -> None:
            for listener in listeners:
                try:
                    listener(name, old, new)
                except Exception:  # noqa: BLE001 - one bad listener must not stop the others
                    log.exception("alarm listener failed on %s %s -> %s", name, old, new)

        if loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                call()
            else:
                loop.call_soon_threadsafe(call)
        else:
            call()

    # -----------------------------------------------------------------------------------------
    # Persistence: a JSON file in the cache folder, written whole after every change

    def _load(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        try:
            saved = json.loads(self.state_file.read_text())
            self.alarms = {a["name"]: Alarm(**a) for a in saved.get("alarms", [])}
            self.history = [HistoryItem(**h) for h in saved.get("history", [])]
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("alarms not restored: %s is unreadable (%s)", self.state_file, exc)

    def save(self) -> None:
        if self.state_file is None:
            return
        with self.lock:
            text = json.dumps({"alarms": [asdict(a) for a in self.alarms.values()],
                               "history": [asdict(h) for h in self.history]})
        temporary = self.state_file.with_suffix(".tmp")
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(text)
        os.replace(temporary, self.state_file)

    # -----------------------------------------------------------------------------------------
    # Evaluation loop

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self._loop = asyncio.get_running_loop()
        yield

    def names(self) -> Iterable[str]:
        with self.lock:
            return list(self.alarms)
