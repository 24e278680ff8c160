"""The closed-loop load generator: one asyncio task per simulated user, no think time.

A controller (pure, driven by the caller's clock) decides at every tick how many users should be
running (from the phases) and whether a stopping condition is met; users are added one at a time
and retired gracefully (a retiring user finishes its request, so no sample is cut short).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.loadtest.config import LoadPlan
from harness.loadtest.invokers import FleetSource, Invoker, MetricsSource
from harness.loadtest.popularity import Chooser
from harness.loadtest.scaling import ScalingWatch
from harness.loadtest.schedule import position
from harness.loadtest.stopping import StopMonitor, StopReason

log = logging.getLogger(__name__)

PHASES_COMPLETE = "phases complete"
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM: the stop reason starts with this


@dataclass(frozen=True)
class Sample:
    start: float  # seconds since the test started
    end: float
    target_model: str | None
    status: int
    error_code: str | None
    model_latency_us: float | None
    cache_hit: bool | None
    phase: int
    variant: str | None = None  # the production variant that served (SageMaker's header)
    instance: str | None = None  # "<variant>/<instance-id>" (the emulator's header)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def latency_ms(self) -> float:
        return (self.end - self.start) * 1000.0


@dataclass(frozen=True)
class Event:
    t: float
    kind: str  # phase | stop | load | unload | cold-start | scaling
    detail: str


@dataclass(frozen=True)
class MetricsPoll:
    t: float
    metrics: dict[str, Any]


@dataclass(frozen=True)
class FleetPoll:
    t: float
    instances: dict[str, dict[str, Any]]  # "<variant>/<instance-id>" -> {"loaded_models", ...}


@dataclass
class LoadResult:
    plan: LoadPlan
    started_at: float  # epoch seconds
    duration_s: float
    stop_reason: str
    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    polls: list[MetricsPoll] = field(default_factory=list)
    fleet: list[FleetPoll] = field(default_factory=list)  # /_emulator/models samples
    users: list[tuple[float, int]] = field(default_factory=list)  # (t, active users)
    # (t, {variant: (current, desired) instance count}), when a ScalingWatch was given
    instances: list[tuple[float, dict[str, tuple[int, int]]]] = field(default_factory=list)
    generator: str = "asyncio+aiohttp"
    label: str = ""
    # error code -> the last message seen with it (what the endpoint said, shortened)
    error_messages: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    users: int
    phase: int
    new_phase: bool
    stop: StopReason | str | None


class Controller:
    """Phases and stopping conditions as a function of time (no I/O, no sleeping).

    Besides Inference Recommender's conditions it ends a run that can only fail: when the first
    ``abort_after_errors`` invocations all failed (a wrong endpoint name, a model that cannot
    load), or when that many in a row got no answer at all after some succeeded (the endpoint
    died: firing on would only count connection errors). The reason names the last error.
    """

    def __init__(self, plan: LoadPlan, start: float, *, abort_after_errors: int = 50) -> None:
        self.plan = plan
        self.start = start
        self.monitor = StopMonitor(plan.stopping, start)
        self._phase = -1
        self._successes = 0
        self._errors_in_a_row = 0
        self._unanswered_in_a_row = 0
        self._last_error: str | None = None
        self._abort_after_errors = abort_after_errors

    def record(
        self, completed_at: float, ok: bool, latency_ms: float, error_code: str | None = None,
        *, answered: bool = True, error_message: str | None = None, cold: bool = False,
    ) -> None:
        """One completed invocation. ``cold``: its model was loaded for it; its latency is left
        out of the thresholds [U] (Inference Recommender judges an endpoint's serving, and a
        load's first calls say more about the load than about serving)."""
        if ok:
            self._successes += 1
            self._errors_in_a_row = self._unanswered_in_a_row = 0
            if not cold:
                self.monitor.record(completed_at, latency_ms)
            return
        self._errors_in_a_row += 1
        self._unanswered_in_a_row = 0 if answered else self._unanswered_in_a_row + 1
        code = error_code or "error"
        self._last_error = f"{code}: {error_message}" if error_message else code

    def step(self, now: float) -> Step:
        pos = position(self.plan.phases, now - self.start)
        if pos is None:
            return Step(0, len(self.plan.phases) - 1, False, PHASES_COMPLETE)
        new_phase = pos.phase != self._phase
        self._phase = pos.phase
        if self._successes == 0 and self._errors_in_a_row >= self._abort_after_errors:
            # A wrong endpoint name or a model that cannot load: say so instead of hammering on.
            return Step(
                0,
                pos.phase,
                new_phase,
                f"aborted: the first {self._errors_in_a_row} invocations failed "
                f"(last error: {self._last_error})",
            )
        if self._unanswered_in_a_row >= self._abort_after_errors:
            return Step(
                0,
                pos.phase,
                new_phase,
                f"aborted: the endpoint stopped answering ({self._unanswered_in_a_row} "
                f"invocations in a row got no response after {self._successes} succeeded; "
                f"last error: {self._last_error})",
            )
        return Step(pos.users, pos.phase, new_phase, self.monitor.check(now))


async def run_load(
    plan: LoadPlan,
    invoker: Invoker,
    metrics: MetricsSource | None = None,
    *,
    tick_s: float = 0.05,
    poll_s: float = 0.5,
    drain_timeout_s: float = 75.0,
    generator: str = "asyncio+aiohttp",
    label: str = "",
    on_step: Callable[[Step, float], None] | None = None,
    fleet: FleetSource | None = None,
    scaling: ScalingWatch | None = None,
    think_s: float = 0.0,
    interrupt: asyncio.Event | None = None,
) -> LoadResult:
    """Run ``plan``; ``interrupt`` set (Ctrl-C) ends it early like a stopping condition, so
    what was measured until then is returned, not lost."""
    loop = asyncio.get_running_loop()
    clock = loop.time
    baseline = await metrics.poll() if metrics is not None else None
    start = clock()
    started_at = time.time()
    controller = Controller(plan, start)
    chooser = Chooser(plan.target_models, plan.popularity, plan.seed)
    result = LoadResult(
        plan=plan,
        started_at=started_at,
        duration_s=0.0,
        stop_reason="",
        generator=generator,
        label=label,
    )
    if baseline is not None:
        result.polls.append(MetricsPoll(0.0, baseline))
    current_phase = 0
    active: list[tuple[asyncio.Event, asyncio.Task[None]]] = []
    retired: list[asyncio.Task[None]] = []

    async def user(stop: asyncio.Event) -> None:
        while not stop.is_set():
            model = chooser()
            phase = current_phase
            t0 = clock()
            outcome = await invoker.invoke(model)
            t1 = clock()
            sample = Sample(
                t0 - start,
                t1 - start,
                model,
                outcome.status,
                outcome.error_code,
                outcome.model_latency_us,
                outcome.cache_hit,
                phase,
                outcome.variant,
                outcome.instance,
            )
            result.samples.append(sample)
            latency = (
                outcome.model_latency_us / 1000.0
                if outcome.model_latency_us is not None
                else sample.latency_ms
            )
            if not outcome.ok and outcome.error_message:
                result.error_messages[outcome.error_code or str(outcome.status)] = (
                    outcome.error_message)
            controller.record(t1, outcome.ok, latency, outcome.error_code,
                              answered=outcome.answered, error_message=outcome.error_message,
                              cold=outcome.cache_hit is False)
            if think_s:  # paced users: a low phase that still sends traffic
                await asyncio.sleep(think_s)

    async def poller() -> None:
        assert metrics is not None
        while True:
            await asyncio.sleep(poll_s)
            snapshot = await metrics.poll()
            if snapshot is not None:
                result.polls.append(MetricsPoll(clock() - start, snapshot))

    async def scaling_poller() -> None:
        """Instance counts, and each scaling activity when it first appears."""
        assert scaling is not None
        seen: set[str] = set()
        while True:
            polled = await scaling.poll()
            if polled is not None:
                t = clock() - start
                result.instances.append((t, polled.instances))
                for activity in reversed(polled.activities):
                    if activity["ActivityId"] not in seen:
                        seen.add(activity["ActivityId"])
                        if result.instances[1:]:  # those before the run are not events
                            result.events.append(Event(t, "scaling", activity["Description"]))
            await asyncio.sleep(poll_s)

    async def fleet_poller() -> None:
        """Each instance's loaded models, sampled from the emulator's introspection."""
        assert fleet is not None
        while True:
            snapshot = await fleet.poll()
            if snapshot is not None:
                result.fleet.append(FleetPoll(clock() - start, snapshot))
            await asyncio.sleep(poll_s)

    poll_task = asyncio.create_task(poller()) if metrics is not None else None
    fleet_task = asyncio.create_task(fleet_poller()) if fleet is not None else None
    scaling_task = asyncio.create_task(scaling_poller()) if scaling is not None else None
    reason: StopReason | str | None = None
    try:
        while True:
            now = clock()
            step = controller.step(now)
            if on_step is not None:
                on_step(step, now - start)
            if step.new_phase:
                current_phase = step.phase
                phase = plan.phases[step.phase]
                result.events.append(
                    Event(
                        now - start,
                        "phase",
                        f"phase {step.phase + 1}: {phase.initial_users} users "
                        f"+{phase.spawn_rate}/min for {phase.duration_s:g}s",
                    )
                )
            if step.stop is not None:
                reason = step.stop
                break
            if interrupt is not None and interrupt.is_set():
                reason = (f"{INTERRUPTED} after {now - start:.1f} s (Ctrl-C or SIGTERM): the "
                          "report holds what was measured until then")
                break
            while len(active) < step.users:
                stop_flag = asyncio.Event()
                active.append((stop_flag, asyncio.create_task(user(stop_flag))))
            while len(active) > step.users:
                stop_flag, task = active.pop()
                stop_flag.set()
                retired.append(task)
            if not result.users or result.users[-1][1] != len(active):
                result.users.append((now - start, len(active)))
            await asyncio.sleep(tick_s)
    finally:
        for stop_flag, task in active:
            stop_flag.set()
            retired.append(task)
        result.users.append((clock() - start, 0))
        if retired:
            _, pending = await asyncio.wait(retired, timeout=drain_timeout_s)
            for task in pending:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*pending, return_exceptions=True)
            for task in retired:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    log.error("a load-test user failed: %r", task.exception())
        end = clock()
        for task in (poll_task, scaling_task, fleet_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if metrics is not None:
            final = await metrics.poll()
            if final is not None:
                result.polls.append(MetricsPoll(end - start, final))
        if fleet is not None:
            last = await fleet.poll()
            if last is not None:
                result.fleet.append(FleetPoll(end - start, last))
    result.duration_s = end - start
    result.stop_reason = str(reason) if reason is not None else "interrupted"
    if reason is not None and reason != PHASES_COMPLETE:
        result.events.append(Event(end - start, "stop", str(reason)))
    result.events.extend(_load_events(result.polls))
    result.events.extend(
        Event(s.end, "cold-start", s.target_model or "")
        for s in result.samples
        if s.cache_hit is False
    )
    result.events.sort(key=lambda e: e.t)
    return result


def _count(metrics: dict[str, Any], name: str) -> float:
    return float(metrics.get(name, {}).get("SampleCount", 0) or 0)


def _load_events(polls: list[MetricsPoll]) -> list[Event]:
    """Model loads and unloads seen between two metric polls (the emulator counts each one)."""
    events: list[Event] = []
    for before, after in zip(polls, polls[1:], strict=False):
        for metric, kind in (("ModelLoadingTime", "load"), ("ModelUnloadingTime", "unload")):
            delta = _count(after.metrics, metric) - _count(before.metrics, metric)
            if delta > 0:
                events.append(Event(after.t, kind, f"{int(delta)} model {kind}(s)"))
    return events
