"""What a load test measured (``LoadResult``) and the controller that steers it.

The load itself is Locust's (``locust_engine.py``, started by ``locust_run.run_load``).
The ``Controller`` (pure, driven by the caller's clock) decides at every tick how many users
should be running (from the phases) and whether a stopping condition is met; Locust's shape
asks it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from harness.loadtest.config import LoadPlan
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
    generator: str = "locust"
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


def finish_events(result: LoadResult) -> None:
    """The stop, model load/unload and cold-start events, in time order (once the run is over)."""
    if result.stop_reason and result.stop_reason != PHASES_COMPLETE and not any(
            e.kind == "stop" for e in result.events):
        result.events.append(Event(result.duration_s, "stop", result.stop_reason))
    result.events.extend(_load_events(result.polls))
    result.events.extend(
        Event(s.end, "cold-start", s.target_model or "")
        for s in result.samples
        if s.cache_hit is False
    )
    result.events.sort(key=lambda e: e.t)


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
