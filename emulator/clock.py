"""The one place the emulated clock is kept: the clock scale (``--clock-scale``,
``MME_CLOCK_SCALE``) and the advances a test asks for (``POST /_emulator/clock/advance``).

Everything AWS expresses in time (metric periods, alarm evaluation windows, cooldowns, bakes) is
an *emulated* duration; ``Clock`` turns it into seconds of its own timeline. With
``--clock-scale 60`` one emulated minute passes per real second, so a target-tracking scale-out
(3 one-minute datapoints) happens in 3 real seconds and a scale-in (15 datapoints) in 15.

How absolute times relate (the choice that keeps AWS's published code working unmodified):
**the present is the real present and the past is compressed.** An event that happened ``s`` real
seconds ago is reported as ``s * scale`` seconds ago, and a client's ``StartTime``/``EndTime`` are
read the same way: ``datetime.utcnow() - timedelta(minutes=10)`` names the moment 10 emulated
minutes ago, i.e. 10 real seconds ago at scale 60, so the usual "last ten minutes" query covers
exactly the last ten emulated minutes. The price: the reported timestamp of one past event moves
further into the past from one call to the next (at scale 1 nothing moves). A clock that started
at real now and ran faster would put every recent sample in the client's future, outside any
``EndTime=utcnow()`` window; hence this choice.

**An advance pushes the past further back.** ``advance(n)`` moves the timeline forward by ``n``
emulated seconds (``n / scale`` of its own seconds) at once: every event before it is ``n``
emulated seconds older afterwards (a datapoint, an alarm's last change, a scaling activity, a
bake's start), while the present stays the real present, so a client's ``utcnow()`` windows keep
working and whatever happens after the advance is stamped "now". The two compose as a sum: an
event ``s`` real seconds ago, with advances of ``a`` emulated seconds since, is reported
``s * scale + a`` emulated seconds ago. With no advance the offset is 0 and the clock is the
scaled clock above, exactly.

The timeline (``now()``) is the real epoch plus the advances' offset (``a / scale``); every
stored time is a point of it, and conversion to the client's emulated time happens only at the
edges (the CloudWatch and Application Auto Scaling wire), always against one ``now`` per request
so that a response is self-consistent.

Timers: whatever waits an emulated duration waits on the clock (``sleep``, ``sleep_until``,
``wait_for``, ``wait_until``). An advance walks its span from one due timer to the next, in
order: it moves the offset to the soonest deadline, wakes every timer due then, and lets the
woken tasks run until each waits on the clock again or ends (what they do in between, an alarm
round, a deployment's next traffic shift, happens "at" that deadline), then goes on. An alarm
whose period passes during an advance is evaluated at that point of the timeline, over the metric
data as it is; a bake that ends during it ends there, and the next step's bake starts there. An
advance returns once every timer that became due has been woken and its task has settled.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long an advance lets the tasks it woke run before it moves on without them (real seconds;
# a deployment's step may start a model server meanwhile), and how many empty turns of the event
# loop count as settled (a task woken through a queue by a woken task runs within a few).
SETTLE_LIMIT_S = 60.0
_QUIET_TURNS = 8
_MAX_STEPS = 1_000_000  # timers woken by one advance, at most (a timer re-armed at 0 s loops)


class Ticks:
    """The moments of a periodic job on a grid of its own: each tick one period after the
    previous tick, not after the job's last run ended, so a run that takes part of a period
    (a busy machine, a fast clock) does not stretch every period after it. A tick more than a
    whole period in the past (the job ran very late, or an advance jumped the timeline) is
    dropped: the grid starts again from now. ``now`` is the timeline the periods are read on."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._at = now()

    def next(self, period: float) -> float:
        """When the next tick is due, ``period`` after the last (on ``now``'s timeline)."""
        self._at += period
        now = self._now()
        if self._at < now - period:
            self._at = now
        return self._at


class ClockError(ValueError):
    """An advance the clock cannot make (the message says what to fix)."""


@dataclass(order=True)
class _Timer:
    deadline: float  # on the clock's timeline
    seq: int
    waker: asyncio.Future[None] = field(compare=False)
    task: asyncio.Task[object] | None = field(compare=False)


class Clock:
    def __init__(self, scale: float = 1.0, time_fn: Callable[[], float] = time.time) -> None:
        if not scale > 0:
            raise ValueError(f"clock scale must be > 0, got {scale!r}")
        self.scale = scale
        self.time_fn = time_fn  # injected in tests; production uses the wall clock
        self._offset = 0.0  # the advances, in the timeline's seconds (emulated / scale)
        self._timers: list[_Timer] = []  # a heap; woken or cancelled ones are skipped
        self._seq = itertools.count()
        self._busy: set[asyncio.Task[object]] = set()  # woken by an advance, not settled yet
        self._watched: set[asyncio.Task[object]] = set()  # tasks told to leave _busy as they end
        self._advancing: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"Clock(scale={self.scale!r}, advanced={self.advanced!r})"

    # -- readings ------------------------------------------------------------------------------

    def now(self) -> float:
        """The timeline's present: real epoch seconds plus the advances (see the module
        docstring). Every stored time is a point of this timeline."""
        return self.time_fn() + self._offset

    @property
    def advanced(self) -> float:
        """Emulated seconds advanced in all (``POST /_emulator/clock/advance``)."""
        return self._offset * self.scale

    def present(self, now: float | None = None) -> float:
        """The emulated present as an epoch (the real present; see the module docstring)."""
        return (self.now() if now is None else now) - self._offset

    def real_duration(self, emulated_seconds: float) -> float:
        return emulated_seconds / self.scale

    def emulated_duration(self, real_seconds: float) -> float:
        return real_seconds * self.scale

    def to_emulated(self, real_ts: float, now: float | None = None) -> float:
        """The emulated timestamp of a moment of the timeline, as seen at ``now``."""
        now = self.now() if now is None else now
        return self.present(now) - (now - real_ts) * self.scale

    def to_real(self, emulated_ts: float, now: float | None = None) -> float:
        """The moment of the timeline a client's timestamp names, as seen at ``now``."""
        now = self.now() if now is None else now
        return now - (self.present(now) - emulated_ts) / self.scale

    # -- waiting -------------------------------------------------------------------------------

    async def sleep(self, emulated_seconds: float) -> None:
        """Wait ``emulated_seconds``; an advance that passes the deadline ends it early."""
        await self.sleep_until(self.now() + self.real_duration(max(0.0, emulated_seconds)))

    async def sleep_until(self, deadline: float) -> None:
        """Wait until the timeline reaches ``deadline``."""
        timer, handle = self._arm(deadline)
        try:
            await timer.waker
        finally:
            handle.cancel()
            if not timer.waker.done():
                timer.waker.cancel()

    async def wait_for(self, awaitable: Awaitable[T], emulated_timeout: float) -> T:
        """``asyncio.wait_for`` with an emulated timeout (``TimeoutError`` when it runs out)."""
        deadline = self.now() + self.real_duration(max(0.0, emulated_timeout))
        return await self.wait_until(awaitable, deadline)

    async def wait_until(self, awaitable: Awaitable[T], deadline: float) -> T:
        """``awaitable``'s result if it comes before the timeline reaches ``deadline``, else
        ``TimeoutError`` (``awaitable`` cancelled). Both at once: the result wins."""
        inner = asyncio.ensure_future(awaitable)
        timer, handle = self._arm(deadline)
        try:
            await asyncio.wait((inner, timer.waker), return_when=asyncio.FIRST_COMPLETED)
        finally:
            handle.cancel()
            if not timer.waker.done():
                timer.waker.cancel()
            if not inner.done():
                inner.cancel()
        if inner.done() and not inner.cancelled():
            self._woken_during_advance()
            return inner.result()
        raise TimeoutError

    def _arm(self, deadline: float) -> tuple[_Timer, asyncio.TimerHandle]:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        timer = _Timer(deadline, next(self._seq), loop.create_future(), task)
        while self._timers and self._timers[0].waker.done():  # woken by real time, or left
            heapq.heappop(self._timers)
        heapq.heappush(self._timers, timer)
        if task is not None:
            self._busy.discard(task)  # it waits on the clock again: settled
        handle = loop.call_at(loop.time() + max(0.0, deadline - self.now()), _wake, timer.waker)
        return timer, handle

    def _woken_during_advance(self) -> None:
        """A task whose wait ended by something else than its timer (an alarm put on a queue by
        a task an advance woke) settles before the advance goes on."""
        task = asyncio.current_task()
        if task is not None and self._advancing is not None and self._advancing.locked():
            self._mark_busy(task)

    def _mark_busy(self, task: asyncio.Task[object]) -> None:
        self._busy.add(task)
        if task not in self._watched:
            self._watched.add(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[object]) -> None:
        self._busy.discard(task)
        self._watched.discard(task)

    # -- advancing -----------------------------------------------------------------------------

    async def advance(self, emulated_seconds: float) -> float:
        """Move the timeline ``emulated_seconds`` forward, waking each timer in order at its
        deadline; returns the emulated present once every woken task has settled."""
        if isinstance(emulated_seconds, bool) or not isinstance(emulated_seconds, (int, float)) \
                or not math.isfinite(emulated_seconds) or emulated_seconds < 0:
            raise ClockError(f"seconds must be a finite number >= 0, got {emulated_seconds!r}")
        if self._advancing is None:
            self._advancing = asyncio.Lock()
        async with self._advancing:  # one advance at a time, each walked in order
            await self._settle()
            left = self.real_duration(float(emulated_seconds))
            for _ in range(_MAX_STEPS):
                step = min(left, max(0.0, self._next_deadline() - self.now()))
                self._offset += step
                left -= step
                if self._wake_due():
                    await self._settle()
                elif left <= 0:
                    break
            else:
                log.warning("clock advance stopped after %d timers", _MAX_STEPS)
                self._offset += left
        return self.present()

    def _next_deadline(self) -> float:
        while self._timers and self._timers[0].waker.done():
            heapq.heappop(self._timers)
        return self._timers[0].deadline if self._timers else math.inf

    def _wake_due(self) -> bool:
        """Wake every timer due on the timeline now; True if any was."""
        now, woke = self.now(), False
        while self._timers and (self._timers[0].waker.done() or self._timers[0].deadline <= now):
            timer = heapq.heappop(self._timers)
            if timer.waker.done():
                continue
            timer.waker.set_result(None)
            woke = True
            if timer.task is not None:
                self._mark_busy(timer.task)
        return woke

    async def _settle(self) -> None:
        """Let the woken tasks run until each waits on the clock again or ends."""
        loop = asyncio.get_running_loop()
        limit = loop.time() + SETTLE_LIMIT_S
        quiet = 0
        while quiet < _QUIET_TURNS:
            if self._busy:
                quiet = 0
                if loop.time() > limit:
                    log.warning("clock advance goes on without %d task(s) still busy after %.0f "
                                "s: %s", len(self._busy), SETTLE_LIMIT_S,
                                ", ".join(sorted(t.get_name() for t in self._busy)))
                    self._busy.clear()
                    return
                await asyncio.sleep(0.001)
            else:
                quiet += 1
                await asyncio.sleep(0)


def _wake(waker: asyncio.Future[None]) -> None:
    if not waker.done():
        waker.set_result(None)
