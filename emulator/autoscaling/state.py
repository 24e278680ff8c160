"""Application Auto Scaling's resources: scalable targets, policies, activities; kept in a JSON
file in the cache folder (``AutoScalingService.save``) so that they survive a restart."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from emulator.autoscaling import rules


@dataclass
class ScalableTarget:
    resource_id: str
    min_capacity: int
    max_capacity: int
    role_arn: str
    arn: str
    created: float
    suspended: dict[str, bool] = field(default_factory=dict)

    @property
    def endpoint_and_variant(self) -> tuple[str, str]:
        _, endpoint, _, variant = self.resource_id.split("/", 3)
        return endpoint, variant

    @property
    def dimension(self) -> str:
        """Its ScalableDimension, which its ResourceId implies (one dimension per resource)."""
        return rules.dimension_of(self.resource_id) or rules.DIMENSION


@dataclass
class Alarm:
    name: str
    arn: str


@dataclass
class ScalingPolicy:
    name: str
    resource_id: str
    policy_type: str  # TargetTrackingScaling | StepScaling
    # TargetTrackingScalingPolicyConfiguration or StepScalingPolicyConfiguration, as sent
    configuration: dict[str, Any]
    arn: str
    created: float
    high: Alarm | None = None  # target tracking only: the alarms it created
    low: Alarm | None = None

    @property
    def target_value(self) -> float:
        return float(self.configuration["TargetValue"])

    @property
    def tracking(self) -> bool:
        return self.policy_type == "TargetTrackingScaling"


@dataclass
class ScalingActivity:
    resource_id: str
    description: str
    cause: str
    started: float
    desired: int
    scale_in: bool
    activity_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    ended: float | None = None
    status: str = "InProgress"
    message: str | None = None
    # The count it was computed from (step scaling's cooldown counts from there)
    previous: int | None = None
    policy_arn: str | None = None
    alarm: str | None = None  # the alarm whose action started it (None: Min/Max capacity)


def policy_from(saved: dict[str, Any]) -> ScalingPolicy:
    high, low = saved.pop("high", None), saved.pop("low", None)
    return ScalingPolicy(**saved, high=Alarm(**high) if high else None,
                         low=Alarm(**low) if low else None)
