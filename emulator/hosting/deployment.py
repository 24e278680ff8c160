"""Guarded deployments: the plan of an UpdateEndpoint with a ``DeploymentConfig``, and the
endpoint that splits its traffic between two generations while the plan runs.

A deployment is a second generation of the same variants (green) beside the first (blue). The
router draws the generation first, with the step's traffic share, then the variant and the
instance inside that generation as always (``routing.py``). With the same variants and weights on
both sides (guardrails require the same variant names) that is the same as splitting each
variant's share between the generations.

What SageMaker documents and this module follows:
- ALL_AT_ONCE: one step, all traffic to green, then the final bake (WaitIntervalInSeconds).
- CANARY: the canary's share, a bake, then all of it and the final bake. CanarySize is at most
  50% of the variant's instance count.
- LINEAR: steps of LinearStepSize (10-50% of the variant's instance count), each baked.
- RollingUpdatePolicy: batches of MaximumBatchSize (5-50%), each baked; refused for endpoints
  with several variants (documented exclusion).

[U] choices, all here:
- A CAPACITY_PERCENT size moves exactly that percentage of the traffic (SageMaker turns on whole
  instances of the green fleet; the emulator does not round, so a one-instance endpoint can run
  a canary). An INSTANCE_COUNT size moves ``count / instance count`` of it.
- Where an endpoint has several variants, sizes are checked against each variant and the share
  is taken from the smallest variant (the strictest reading).
- A rolling update moves whole instances: a batch of ``ceil(MaximumBatchSize)`` new instances
  starts, takes its instances' share of the traffic, then as many old instances drain and stop;
  every batch is baked. The old fleet keeps at least one instance until the new config serves.
  A rollback brings the old fleet back to its size at once, moves all traffic back, then stops
  the new instances (RollbackMaximumBatchSize is not used: SageMaker's default when absent).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from emulator.contract import runtime
from emulator.hosting.endpoint import Endpoint, InvokeResult

ALL_AT_ONCE = "ALL_AT_ONCE"
CANARY = "CANARY"
LINEAR = "LINEAR"
INSTANCE_COUNT = "INSTANCE_COUNT"
CAPACITY_PERCENT = "CAPACITY_PERCENT"
BLUE_GREEN = "BlueGreenUpdatePolicy"
ROLLING = "RollingUpdatePolicy"


class PlanError(ValueError):
    """A DeploymentConfig SageMaker refuses (message says what to fix)."""


@dataclass(frozen=True)
class Plan:
    """The traffic shares of green, step by step (the last is 1.0), and their bakes."""

    kind: str  # BLUE_GREEN or ROLLING
    routing: str  # ALL_AT_ONCE, CANARY, LINEAR (a rolling update is LINEAR in batches)
    shares: tuple[float, ...]
    bake_s: float  # emulated seconds of each step's bake
    termination_wait_s: float
    max_execution_s: float | None
    alarms: tuple[str, ...]

    @property
    def steps(self) -> int:
        return len(self.shares)

    @property
    def rolling(self) -> bool:
        return self.kind == ROLLING

    def to_doc(self) -> dict[str, Any]:
        return {"kind": self.kind, "routing": self.routing, "shares": list(self.shares),
                "bake_s": self.bake_s, "termination_wait_s": self.termination_wait_s,
                "max_execution_s": self.max_execution_s, "alarms": list(self.alarms)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Plan:
        return cls(doc["kind"], doc["routing"], tuple(doc["shares"]), doc["bake_s"],
                   doc["termination_wait_s"], doc.get("max_execution_s"),
                   tuple(doc.get("alarms") or ()))


def alarm_names(config: dict[str, Any]) -> list[str]:
    rollback = config.get("AutoRollbackConfiguration") or {}
    return [a["AlarmName"] for a in rollback.get("Alarms") or [] if a.get("AlarmName")]


def plan(config: dict[str, Any], instance_counts: Sequence[int]) -> Plan:
    """The plan of a DeploymentConfig for a new fleet whose variants have ``instance_counts``;
    raises ``PlanError`` with SageMaker's kind of message for what it refuses."""
    blue_green = config.get(BLUE_GREEN)
    rolling = config.get(ROLLING)
    alarms = tuple(alarm_names(config))
    if blue_green and rolling:  # [U] wording
        raise PlanError("DeploymentConfig takes either BlueGreenUpdatePolicy or "
                        "RollingUpdatePolicy, not both.")
    if rolling:
        if len(instance_counts) > 1:  # documented exclusion; [U] wording
            raise PlanError("RollingUpdatePolicy is not supported for endpoints with multiple "
                            "production variants; use BlueGreenUpdatePolicy.")
        step = _fraction(rolling["MaximumBatchSize"], instance_counts, "MaximumBatchSize",
                         0.05, 0.5)
        count = instance_counts[0]
        batch = max(1, math.ceil(step * count - 1e-9))  # whole instances
        batches = tuple(min(count, batch * (i + 1)) / count
                        for i in range(math.ceil(count / batch)))
        return Plan(ROLLING, LINEAR, batches, float(rolling["WaitIntervalInSeconds"]),
                    0.0, _optional(rolling.get("MaximumExecutionTimeoutInSeconds")), alarms)
    if not blue_green:
        # SageMaker's documented default: blue/green, all at once. [U] Given only an
        # AutoRollbackConfiguration, its alarms are watched through no bake (a wait of 0).
        return Plan(BLUE_GREEN, ALL_AT_ONCE, (1.0,), 0.0, 0.0, None, alarms)
    routing = blue_green["TrafficRoutingConfiguration"]
    kind = routing["Type"]
    canary, linear = routing.get("CanarySize"), routing.get("LinearStepSize")
    if kind != CANARY and canary is not None:  # [U] wording
        raise PlanError(f"CanarySize is only valid with TrafficRoutingConfiguration Type CANARY, "
                        f"not {kind}.")
    if kind != LINEAR and linear is not None:  # [U] wording
        raise PlanError(f"LinearStepSize is only valid with TrafficRoutingConfiguration Type "
                        f"LINEAR, not {kind}.")
    if kind == CANARY:
        if canary is None:
            raise PlanError("CanarySize is required when TrafficRoutingConfiguration Type is "
                            "CANARY.")
        shares: tuple[float, ...] = (_fraction(canary, instance_counts, "CanarySize", None, 0.5),
                                     1.0)
    elif kind == LINEAR:
        if linear is None:
            raise PlanError("LinearStepSize is required when TrafficRoutingConfiguration Type "
                            "is LINEAR.")
        shares = _linear(_fraction(linear, instance_counts, "LinearStepSize", 0.1, 0.5))
    else:
        shares = (1.0,)
    wait = float(routing["WaitIntervalInSeconds"])
    termination = float(blue_green.get("TerminationWaitInSeconds") or 0)
    timeout = _optional(blue_green.get("MaximumExecutionTimeoutInSeconds"))
    if timeout is not None and timeout <= wait + termination:
        # The documented rule, read literally. [U] wording
        raise PlanError(f"MaximumExecutionTimeoutInSeconds ({timeout:.0f}) must be larger than "
                        f"the total waiting time of WaitIntervalInSeconds ({wait:.0f}) and "
                        f"TerminationWaitInSeconds ({termination:.0f}).")
    return Plan(BLUE_GREEN, kind, shares, wait, termination, timeout, alarms)


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)


def _linear(step: float) -> tuple[float, ...]:
    count = math.ceil(1 / step - 1e-9)
    return tuple(min(1.0, round(step * (i + 1), 6)) for i in range(count - 1)) + (1.0,)


def _fraction(size: dict[str, Any], instance_counts: Sequence[int], member: str,
              low: float | None, high: float) -> float:
    """The traffic share a CapacitySize names, checked against SageMaker's bounds for
    ``member`` (a fraction of each variant's instance count)."""
    value = int(size["Value"])
    smallest = min(instance_counts)
    bounds = (f"between {low:.0%} and {high:.0%}" if low is not None
              else f"less than or equal to {high:.0%}")
    if size["Type"] == CAPACITY_PERCENT:
        if value > 100:
            raise PlanError(f"{member} Value {value} is not a percentage: CAPACITY_PERCENT takes "
                            "1 to 100.")
        share = value / 100
        described = f"{value}%"
    else:
        share = value / smallest
        described = f"{value} instance{'s' if value != 1 else ''} of {smallest}"
    if share > high + 1e-9 or (low is not None and share < low - 1e-9):
        raise PlanError(f"{member} ({described}) must be {bounds} of the variant's total "
                        "instance count.")
    return share


def holds_session(endpoint: Endpoint, session_id: str | None) -> bool:
    """Whether one of ``endpoint``'s variants holds that open session (None: no session)."""
    return session_id is not None and any(session_id in v.sessions for v in endpoint.variants)


class SplitEndpoint(Endpoint):
    """An endpoint that, during a deployment, sends ``green_share`` of its calls to a second
    generation (``green``). Nothing changes for a call already on its way: a generation taken
    out of the split keeps serving what it has until it is drained."""

    green: Endpoint | None = None
    green_share: float = 0.0
    draw: random.Random = random.Random()

    def generation(self) -> SplitEndpoint:
        """The generation one call goes to, drawn as ``invoke`` draws it (a call served
        outside ``invoke``: a response stream)."""
        green, share = self.green, self.green_share
        if (green is not None and share > 0 and isinstance(green, SplitEndpoint)
                and (share >= 1 or self.draw.random() < share)):
            return green
        return self

    def invoke(self, request: runtime.InvokeRequest) -> Coroutine[Any, Any, InvokeResult]:
        # The chosen generation's coroutine itself, not awaited in one more frame: every call to
        # every endpoint passes here (mme bench overhead).
        green, share = self.green, self.green_share
        if green is not None and request.session_id is not None and holds_session(
                green, request.session_id):
            return self._invoke_green(green, request)  # a session stays on its fleet
        if green is not None and share > 0 and (share >= 1 or self.draw.random() < share) \
                and not holds_session(self, request.session_id):
            return self._invoke_green(green, request)
        return super().invoke(request)

    @staticmethod
    async def _invoke_green(green: Endpoint, request: runtime.InvokeRequest) -> InvokeResult:
        result = await green.invoke(request)
        return dataclasses.replace(result, generation="green")  # which generation answered
