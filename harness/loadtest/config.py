"""A load test's plan, in the shape of SageMaker Inference Recommender's advanced job.

``TrafficPattern.Phases`` (``InitialNumberOfUsers``, ``SpawnRate`` new users per *minute*,
``DurationInSeconds``) run one after the other; ``StoppingConditions`` end the test early when
the endpoint reaches ``MaxInvocations`` per minute or a ``ModelLatencyThresholds`` percentile
goes over its value. The same JSON a team writes for ``CreateInferenceRecommendationsJob`` can
be given to ``mme loadtest --config``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# A load client's read timeout on one InvokeEndpoint call: SageMaker gives a model 60 s to answer.
CALL_TIMEOUT_S = 70.0
# How long the calls in flight are waited for when a ramp-down stops their users or the run ends:
# a whole call and a margin, so every call the endpoint served is counted.
IN_FLIGHT_WAIT_S = CALL_TIMEOUT_S + 5.0


def user_stop_timeout(given: float | None) -> float:
    """How long a user that a ramp-down stops may finish the call it has in flight (Locust's
    ``stop_timeout``): the one given, else a whole call and its margin, so the call is counted.
    Locust's default, 0 (kill it mid-call), cannot be told from none, so 0 counts as none."""
    return given if given else IN_FLIGHT_WAIT_S


class PlanError(ValueError):
    """A phase, stopping condition or popularity that cannot be run."""


@dataclass(frozen=True)
class Phase:
    initial_users: int
    spawn_rate: int  # new users per minute, as Inference Recommender counts them
    duration_s: float

    def __post_init__(self) -> None:
        if self.initial_users < 1:
            raise PlanError("InitialNumberOfUsers must be at least 1")
        if self.spawn_rate < 0:
            raise PlanError("SpawnRate must be at least 0")
        if self.duration_s <= 0:
            raise PlanError("DurationInSeconds must be positive")

    def users_at(self, elapsed_s: float) -> int:
        """Users ``elapsed_s`` seconds into this phase (new users arrive one at a time)."""
        return self.initial_users + int(self.spawn_rate * max(elapsed_s, 0.0) / 60.0)

    @property
    def peak_users(self) -> int:
        return self.users_at(self.duration_s)

    def as_dict(self) -> dict[str, Any]:
        return {
            "InitialNumberOfUsers": self.initial_users,
            "SpawnRate": self.spawn_rate,
            "DurationInSeconds": self.duration_s,
        }


@dataclass(frozen=True)
class LatencyThreshold:
    percentile: float  # 50, 90, 95, 99 ... ("P95" in the API)
    value_ms: float

    def __post_init__(self) -> None:
        if not 0 < self.percentile <= 100:
            raise PlanError(f"percentile {self.percentile} is not in (0, 100]")
        if self.value_ms <= 0:
            raise PlanError("ValueInMilliseconds must be positive")

    @property
    def label(self) -> str:
        return f"P{self.percentile:g}"

    def as_dict(self) -> dict[str, Any]:
        return {"Percentile": self.label, "ValueInMilliseconds": self.value_ms}


@dataclass(frozen=True)
class StoppingConditions:
    max_invocations: int | None = None  # per minute
    latency_thresholds: tuple[LatencyThreshold, ...] = ()
    # Conditions are judged over the last `window_s` seconds, and only once `min_window_s` of
    # traffic has been seen, so the first few requests (often cold starts) cannot stop a test.
    window_s: float = 60.0
    min_window_s: float = 5.0
    min_samples: int = 20

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.max_invocations is not None:
            out["MaxInvocations"] = self.max_invocations
        if self.latency_thresholds:
            out["ModelLatencyThresholds"] = [t.as_dict() for t in self.latency_thresholds]
        return out


@dataclass(frozen=True)
class Popularity:
    kind: str = "uniform"  # uniform | zipf
    s: float = 1.0  # Zipf exponent: weight of the k-th model is 1 / k**s

    def __post_init__(self) -> None:
        if self.kind not in ("uniform", "zipf"):
            raise PlanError(f"popularity {self.kind!r}: expected uniform or zipf[:S]")
        if self.kind == "zipf" and self.s <= 0:
            raise PlanError("the Zipf parameter must be positive")

    @classmethod
    def parse(cls, text: str) -> Popularity:
        """``uniform``, ``zipf`` (s=1) or ``zipf:1.2``."""
        kind, _, value = text.strip().lower().partition(":")
        if kind == "zipf" and value:
            try:
                return cls("zipf", float(value))
            except ValueError as exc:
                raise PlanError(f"not a Zipf parameter: {value!r}") from exc
        if value:
            raise PlanError(f"popularity {text!r}: only zipf takes a parameter")
        return cls(kind)

    def __str__(self) -> str:
        return f"zipf:{self.s:g}" if self.kind == "zipf" else "uniform"


@dataclass(frozen=True)
class LoadPlan:
    phases: tuple[Phase, ...]
    stopping: StoppingConditions = field(default_factory=StoppingConditions)
    target_models: tuple[str | None, ...] = (None,)  # None: a single-model endpoint
    popularity: Popularity = field(default_factory=Popularity)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.phases:
            raise PlanError("a load test needs at least one phase")
        if not self.target_models:
            raise PlanError("a load test needs at least one TargetModel")

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    @property
    def peak_users(self) -> int:
        return max(p.peak_users for p in self.phases)

    def as_dict(self) -> dict[str, Any]:
        return {
            "TrafficPattern": {
                "TrafficType": "PHASES",
                "Phases": [p.as_dict() for p in self.phases],
            },
            "StoppingConditions": self.stopping.as_dict(),
            "TargetModels": list(self.target_models),
            "Popularity": str(self.popularity),
            "Seed": self.seed,
        }


_PERCENTILE = re.compile(r"^[pP]?(\d+(?:\.\d+)?)$")


def parse_percentile(value: str | float | int) -> float:
    match = _PERCENTILE.match(str(value).strip())
    if not match:
        raise PlanError(f"not a percentile: {value!r} (examples: P95, 99)")
    return float(match.group(1))


def parse_phase(text: str) -> Phase:
    """``USERS:SPAWN_PER_MINUTE:SECONDS``, e.g. ``1:60:30`` (or ``USERS:SECONDS`` for no spawn)."""
    parts = text.split(":")
    try:
        if len(parts) == 2:
            return Phase(int(parts[0]), 0, float(parts[1]))
        if len(parts) == 3:
            return Phase(int(parts[0]), int(parts[1]), float(parts[2]))
    except ValueError as exc:
        raise PlanError(f"phase {text!r}: {exc}") from exc
    raise PlanError(f"phase {text!r}: expected USERS:SPAWN_PER_MINUTE:SECONDS")


def parse_threshold(text: str) -> LatencyThreshold:
    """``P95:100`` = stop when the 95th percentile of ModelLatency goes over 100 ms."""
    percentile, sep, value = text.partition(":")
    if not sep:
        raise PlanError(f"latency threshold {text!r}: expected PERCENTILE:MILLISECONDS")
    try:
        return LatencyThreshold(parse_percentile(percentile), float(value))
    except ValueError as exc:
        raise PlanError(f"latency threshold {text!r}: {exc}") from exc


def stopping_from_api(data: Mapping[str, Any]) -> StoppingConditions:
    thresholds = tuple(
        LatencyThreshold(parse_percentile(t["Percentile"]), float(t["ValueInMilliseconds"]))
        for t in data.get("ModelLatencyThresholds", [])
    )
    max_inv = data.get("MaxInvocations")
    return StoppingConditions(
        max_invocations=int(max_inv) if max_inv is not None else None, latency_thresholds=thresholds
    )


def phases_from_api(data: Mapping[str, Any]) -> tuple[Phase, ...]:
    pattern = data.get("TrafficPattern", data)
    kind = pattern.get("TrafficType", "PHASES")
    if kind != "PHASES":
        raise PlanError(f"TrafficType {kind!r} is not supported (only PHASES)")
    return tuple(
        Phase(
            int(p.get("InitialNumberOfUsers", 1)),
            int(p.get("SpawnRate", 0)),
            float(p["DurationInSeconds"]),
        )
        for p in pattern.get("Phases", [])
    )


def plan_from_api(
    data: Mapping[str, Any],
    *,
    target_models: Sequence[str | None] | None = None,
    popularity: Popularity | None = None,
    seed: int = 0,
) -> LoadPlan:
    """Build a plan from Inference Recommender's ``InputConfig`` JSON (or a subset of it).

    Accepts either the whole ``InputConfig`` (``TrafficPattern`` and ``StoppingConditions`` at
    the top) or a ``CreateInferenceRecommendationsJob`` request (under ``InputConfig``).
    """
    if "InputConfig" in data:
        stopping = data.get("StoppingConditions", {})
        data = {**data["InputConfig"], "StoppingConditions": stopping}
    models = target_models if target_models is not None else data.get("TargetModels") or [None]
    return LoadPlan(
        phases=phases_from_api(data),
        stopping=stopping_from_api(data.get("StoppingConditions", {})),
        target_models=tuple(models),
        popularity=popularity or Popularity.parse(str(data.get("Popularity", "uniform"))),
        seed=int(data.get("Seed", seed)),
    )
