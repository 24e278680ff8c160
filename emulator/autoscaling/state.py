"""Application Auto Scaling's resources: scalable targets, policies, activities (in memory)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


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


@dataclass
class Alarm:
    name: str
    arn: str


@dataclass
class ScalingPolicy:
    name: str
    resource_id: str
    policy_type: str
    configuration: dict[str, Any]  # TargetTrackingScalingPolicyConfiguration as sent
    arn: str
    created: float
    high: Alarm
    low: Alarm

    @property
    def target_value(self) -> float:
        return float(self.configuration["TargetValue"])


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
