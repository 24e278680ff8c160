"""Step scaling as Application Auto Scaling documents it (StepScalingPolicyConfiguration).

- A step's bounds are relative to the alarm's threshold: the breach is ``value - threshold``.
  Above the threshold a step's lower bound is inclusive and its upper bound exclusive; below it,
  the lower bound is exclusive and the upper bound inclusive. A null lower bound is -infinity,
  a null upper bound +infinity. Steps must not overlap nor leave a gap; at most one has a null
  lower bound and at most one a null upper bound.
- ``ChangeInCapacity`` adds the adjustment, ``ExactCapacity`` sets it, ``PercentChangeInCapacity``
  adds that percent of the current capacity: a result above 1 is rounded down, below -1 rounded
  up, between 0 and 1 becomes 1, between -1 and 0 becomes -1; ``MinAdjustmentMagnitude`` (percent
  only) is the least change. The result stays within MinCapacity and MaxCapacity.
- ``Cooldown`` (default 300 s for SageMaker variants): after a scale-out the policy scales out
  again only to more than that activity asked for (the capacity it added counts as part of the
  next one); after a scale-in, the policy does not scale in again until the cooldown ends.
- ``MetricAggregationType`` is kept and shown; the alarm's own statistic is what is evaluated
  (the same on AWS: the alarm, not the policy, reads the metric).
"""

from __future__ import annotations

import math
from typing import Any

from emulator.autoscaling.wire import ScalingError

DEFAULT_COOLDOWN_S = 300
MAX_STEPS = 20  # [U] AWS documents no number for Application Auto Scaling; EC2's is 20


def check(config: dict[str, Any] | None) -> None:
    """ValidationException for a configuration AWS would refuse; nothing is stored before."""
    if not config:
        raise ScalingError("StepScalingPolicyConfiguration is required for a StepScaling "
                           "policy.")
    kind = config.get("AdjustmentType")
    if kind is None:
        raise ScalingError("AdjustmentType is required for a StepScaling policy.")  # [U]
    steps = config.get("StepAdjustments") or []
    if not steps:
        raise ScalingError("StepAdjustments must contain at least one step adjustment.")  # [U]
    if len(steps) > MAX_STEPS:
        raise ScalingError(f"A policy can have at most {MAX_STEPS} step adjustments.")  # [U]
    magnitude = config.get("MinAdjustmentMagnitude")
    if magnitude is not None:
        if kind != "PercentChangeInCapacity":
            raise ScalingError("MinAdjustmentMagnitude is only supported with the "
                               "PercentChangeInCapacity adjustment type.")
        if magnitude < 1:
            raise ScalingError("MinAdjustmentMagnitude must be at least 1.")  # [U]
    cooldown = config.get("Cooldown")
    if cooldown is not None and cooldown < 0:
        raise ScalingError(f"Cooldown must be 0 or more seconds; {cooldown} was given.")
    intervals = []
    for step in steps:
        lower = step.get("MetricIntervalLowerBound")
        upper = step.get("MetricIntervalUpperBound")
        if step.get("ScalingAdjustment") is None:
            raise ScalingError("Every step adjustment needs a ScalingAdjustment.")
        if kind == "ExactCapacity" and step["ScalingAdjustment"] < 0:
            raise ScalingError("ScalingAdjustment must not be negative with the ExactCapacity "
                               "adjustment type.")  # [U] wording
        low = -math.inf if lower is None else float(lower)
        high = math.inf if upper is None else float(upper)
        if not low < high:
            raise ScalingError("The upper bound of a step adjustment must be greater than its "
                               "lower bound.")
        intervals.append((low, high))
    if sum(1 for low, _ in intervals if low == -math.inf) > 1:
        raise ScalingError("There can be at most one step adjustment with a null lower bound.")
    if sum(1 for _, high in intervals if high == math.inf) > 1:
        raise ScalingError("There can be at most one step adjustment with a null upper bound.")
    intervals.sort()
    for (_, high), (low, _) in zip(intervals, intervals[1:], strict=False):
        if low < high:
            raise ScalingError("Step adjustments must not overlap.")
        if low > high:
            raise ScalingError("There must be no gap between step adjustments.")


def adjustment(config: dict[str, Any], breach: float) -> int | None:
    """The ScalingAdjustment of the step that holds ``breach`` (value - threshold), or None."""
    for step in config["StepAdjustments"]:
        lower = step.get("MetricIntervalLowerBound")
        upper = step.get("MetricIntervalUpperBound")
        low = -math.inf if lower is None else float(lower)
        high = math.inf if upper is None else float(upper)
        inside = (low <= breach < high) if breach >= 0 else (low < breach <= high)
        if inside:
            return int(step["ScalingAdjustment"])
    return None


def capacity(config: dict[str, Any], current: int, step: int, minimum: int,
             maximum: int) -> int:
    kind = config["AdjustmentType"]
    if kind == "ExactCapacity":
        wanted = step
    elif kind == "ChangeInCapacity":
        wanted = current + step
    else:
        change = current * step / 100.0
        if change > 1:
            delta = math.floor(change)
        elif change < -1:
            delta = math.ceil(change)
        elif change > 0:
            delta = 1
        elif change < 0:
            delta = -1
        else:
            delta = 0
        least = config.get("MinAdjustmentMagnitude")
        if least is not None and delta and abs(delta) < least:
            delta = int(math.copysign(least, delta))
        wanted = current + delta
    return max(minimum, min(maximum, wanted))
