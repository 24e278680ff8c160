"""Who is told of every alarm state change: auto-rollback of deployments (``emulator/control``)
and the live page subscribe through ``AlarmStore.subscribe``.

Subscribers are called on the event loop's thread (``call_soon_threadsafe`` when the change came
from a worker thread: an API call), in subscription order; they must not block. One that raises
is logged and stays subscribed: one bad listener never stops the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

StateListener = Callable[[str, str, str], None]  # (alarm name, old state, new state)


class StateListeners:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[StateListener] = []
        # The loop that evaluates the alarms (set while it runs): listeners are called there.
        self.loop: asyncio.AbstractEventLoop | None = None

    def subscribe(self, callback: StateListener) -> Callable[[], None]:
        """``callback(name, old, new)`` on every state change; returns the unsubscriber."""
        with self._lock:
            self._listeners.append(callback)

        def unsubscribe() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return unsubscribe

    def notify(self, name: str, old: str, new: str) -> None:
        with self._lock:
            listeners = list(self._listeners)
        loop = self.loop

        def call() -> None:
            for listener in listeners:
                try:
                    listener(name, old, new)
                except Exception:  # one bad listener must not stop the others
                    log.exception("alarm listener failed on %s %s -> %s", name, old, new)

        if loop is None or loop.is_closed():
            call()
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            call()
        else:
            loop.call_soon_threadsafe(call)
