"""Inference Recommender's stopping conditions, judged over a sliding window (pure logic).

Completed invocations are fed in with their completion time; ``check(now)`` says whether a
condition is met. Times come from the caller, so tests drive it with a fake clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from emulator.cloudwatch.statistics import percentile  # the project's one
from harness.loadtest.config import StoppingConditions


@dataclass(frozen=True)
class StopReason:
    condition: str  # "MaxInvocations" | "ModelLatencyThreshold"
    detail: str

    def __str__(self) -> str:
        return f"{self.condition}: {self.detail}"


class StopMonitor:
    def __init__(self, conditions: StoppingConditions, start: float) -> None:
        self.conditions = conditions
        self.start = start
        # (completion time, latency in ms used for thresholds)
        self._window: deque[tuple[float, float]] = deque()

    def record(self, completed_at: float, latency_ms: float) -> None:
        self._window.append((completed_at, latency_ms))

    def _trim(self, now: float) -> None:
        horizon = now - self.conditions.window_s
        while self._window and self._window[0][0] < horizon:
            self._window.popleft()

    def rate_per_minute(self, now: float) -> float:
        self._trim(now)
        span = min(self.conditions.window_s, now - self.start)
        if span <= 0:
            return 0.0
        return len(self._window) * 60.0 / span

    def check(self, now: float) -> StopReason | None:
        c = self.conditions
        if c.max_invocations is None and not c.latency_thresholds:
            return None
        if now - self.start < c.min_window_s:
            return None
        self._trim(now)
        if c.max_invocations is not None:
            rate = self.rate_per_minute(now)
            if rate >= c.max_invocations:
                return StopReason(
                    "MaxInvocations", f"{rate:.0f} invocations/minute >= {c.max_invocations}"
                )
        if c.latency_thresholds and len(self._window) >= c.min_samples:
            latencies = [lat for _, lat in self._window]
            for threshold in c.latency_thresholds:
                value = percentile(latencies, threshold.percentile)
                if value > threshold.value_ms:
                    return StopReason(
                        "ModelLatencyThreshold",
                        f"{threshold.label} {value:.1f} ms > {threshold.value_ms:g} ms",
                    )
        return None
