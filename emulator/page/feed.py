"""What the live page shows beyond ``/_emulator/models``: what happened, and when.

The ``Feed`` keeps, in bounded memory:

- the last ``EVENT_LIMIT`` lifecycle steps of every model (downloading, loading, loaded,
  evicted with its reason, ...), told by each instance's ModelManager through its observer hook;
- loads, unloads and errors counted per ``BUCKET_S``-second bucket over the last
  ``TIMELINE_S`` seconds (the page's timeline);
- the last ``ERROR_LIMIT`` invocation errors, with the SageMaker error code the client got, and
  how many each endpoint had since the server started (the page's tiles count those);
- the last ``ACTIVITY_LIMIT`` things that happened to an endpoint rather than to a model: a
  deployment started, rolled back or ended, a scaling activity (which alarm, which policy, from
  how many to how many). They are kept apart from the model events, so that a burst of loads
  never pushes a rollback out of the history.

It is told of each instance as it is built (``watch``, called by the composition root around
the instance builder), before the instance starts, so a SingleModel container's start-up load is
on it too, and nothing in the hosting code needs to know about the page. Everything runs on the
event loop: no locks.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from emulator.manager.events import ModelObserver

EVENT_LIMIT = 500
ERROR_LIMIT = 50
ACTIVITY_LIMIT = 200
BUCKET_S = 10
TIMELINE_S = 600

# Steps counted on the timeline (the others are listed, not counted).
LOAD_STEPS = frozenset({"loaded"})
UNLOAD_STEPS = frozenset({"unloaded", "taken-out"})


class Watchable(Protocol):
    def add_observer(self, observer: ModelObserver) -> None: ...


@dataclass(frozen=True)
class ModelEvent:
    time: float  # epoch seconds
    endpoint: str
    variant: str
    instance: str
    model: str
    step: str  # see emulator.manager.events.ModelObserver
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def evicted(self) -> bool:
        return self.step == "unloading" and self.details.get("reason") == "lru"


@dataclass(frozen=True)
class InvocationError:
    time: float
    endpoint: str
    model: str | None
    status: int
    code: str  # the x-amzn-ErrorType the client read, e.g. ModelError
    message: str


@dataclass(frozen=True)
class Activity:
    """Something that happened to an endpoint: ``kind`` is one of ``deployment`` (started),
    ``rollback`` (started: why), ``rolled-back`` (the old config serves again), ``deployed``
    (the new config serves, the deployment ended), ``scaling`` (an Application Auto Scaling
    activity); ``text`` says it in a sentence, ``details`` the figures."""

    time: float  # epoch seconds
    endpoint: str
    kind: str
    text: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Bucket:
    start: float
    loads: int = 0
    unloads: int = 0
    errors: int = 0


class Feed:
    def __init__(self) -> None:
        self.events: deque[ModelEvent] = deque(maxlen=EVENT_LIMIT)
        self.errors: deque[InvocationError] = deque(maxlen=ERROR_LIMIT)
        self.error_counts: dict[str, int] = {}  # by endpoint, every error told since the start
        self.activities: deque[Activity] = deque(maxlen=ACTIVITY_LIMIT)
        self._buckets: deque[Bucket] = deque(maxlen=TIMELINE_S // BUCKET_S)
        self.version = 0
        self._changed = asyncio.Event()

    # --- being told --------------------------------------------------------------------------

    def watch(self, endpoint: str, variant: str, instance: str, models: Watchable) -> None:
        """Be told of the model events of an instance (its model manager, or a multi-container
        instance's view over its members' managers)."""
        models.add_observer(self._observer(endpoint, variant, instance))

    def _observer(self, endpoint: str, variant: str, instance: str) -> ModelObserver:
        def observe(step: str, target: str, details: dict[str, Any]) -> None:
            event = ModelEvent(time.time(), endpoint, variant, instance, target, step,
                               dict(details))
            self.events.append(event)
            bucket = self._bucket(event.time)
            if step in LOAD_STEPS:
                bucket.loads += 1
            elif step in UNLOAD_STEPS:
                bucket.unloads += 1
            self._touch()
        return observe

    def invocation_failed(self, endpoint: str, model: str | None, status: int, code: str,
                          message: str) -> None:
        self.errors.append(InvocationError(time.time(), endpoint, model, status, code, message))
        self.error_counts[endpoint] = self.error_counts.get(endpoint, 0) + 1
        self._bucket(time.time()).errors += 1
        self._touch()

    def activity(self, endpoint: str, kind: str, text: str,
                 details: dict[str, Any] | None = None) -> None:
        """Something happened to an endpoint (see ``Activity``)."""
        self.activities.append(Activity(time.time(), endpoint, kind, text, dict(details or {})))
        self._touch()

    def clear(self) -> None:
        """Everything told so far forgotten (a reset of the server): the page starts over."""
        self.events.clear()
        self.errors.clear()
        self.error_counts.clear()
        self.activities.clear()
        self._buckets.clear()
        self._touch()

    def _bucket(self, now: float) -> Bucket:
        start = now - now % BUCKET_S
        if not self._buckets or self._buckets[-1].start < start:
            self._buckets.append(Bucket(start))
        return self._buckets[-1]

    def _touch(self) -> None:
        self.version += 1
        told, self._changed = self._changed, asyncio.Event()
        told.set()

    def next_change(self) -> asyncio.Event:
        """Set at the next thing told. Take it *before* reading the state, so nothing told
        between the read and the wait is missed; each waiter holds its own."""
        return self._changed

    # --- telling ------------------------------------------------------------------------------

    def timeline(self, now: float) -> dict[str, Any]:
        """Every bucket of the last TIMELINE_S seconds, oldest first (empty ones included)."""
        first = now - now % BUCKET_S - TIMELINE_S + BUCKET_S
        by_start = {b.start: b for b in self._buckets}
        buckets = [by_start.get(first + i * BUCKET_S, Bucket(first + i * BUCKET_S))
                   for i in range(TIMELINE_S // BUCKET_S)]
        return {"BucketSeconds": BUCKET_S, "Buckets": [asdict(b) for b in buckets]}

    def recent_events(self, limit: int = 100) -> list[dict[str, Any]]:
        return [{**asdict(e), "evicted": e.evicted} for e in list(self.events)[-limit:]][::-1]

    def recent_errors(self) -> list[dict[str, Any]]:
        return [asdict(e) for e in self.errors][::-1]

    def recent_activities(self) -> list[dict[str, Any]]:
        """Newest first."""
        return [asdict(a) for a in self.activities][::-1]
