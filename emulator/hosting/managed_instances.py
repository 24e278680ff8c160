"""ManagedInstanceScaling of a variant for inference components, as bookkeeping.

AWS: with ``Status`` ENABLED, SageMaker "scales the number of instances" of the variant "based on
the inference components' copies": it adds instances when copies do not fit (up to
``MaxInstanceCount``) and releases instances that no copy needs (down to ``MinInstanceCount``,
which may be 0: an endpoint scaled to zero instances, SageMaker's "Scale an endpoint to zero
instances"). Instances here are bookkeeping (``emulator.hosting.placement``), so adding one
or releasing one is a change of the variant's count, placed again at once.

Choices, each [U]:
- the count is the fewest instances, within Min..Max, that hold every copy the variant could
  hold with Max instances: so a pending copy gets an instance when Max allows one, and an
  instance no copy needs is released;
- it is recomputed whenever the variant's copies are placed again (a component created,
  updated, scaled or deleted; the endpoint resized or restarted), and takes effect at once:
  AWS takes minutes to provision an instance and waits before releasing one
  (``ScaleInPolicy.CooldownInMinutes``, default 20); the emulator has no instance to wait for;
- ``ScaleInPolicy.Strategy`` as AWS documents it (ProductionVariantManagedInstanceScaling-
  ScaleInPolicy): IDLE_RELEASE "releases instances that have no hosted inference component
  copies" -- an instance is released only when the copies, placed on the current instances,
  leave it empty; CONSOLIDATION "consolidates inference component copies onto fewer instances"
  -- empty instances are released, and at most ``MaximumStepSize`` (default 1) more per
  placement, their copies moved onto the others. Without a ScaleInPolicy the count goes to the
  fewest instances at once [U: AWS does not say what it does then].
  ``CooldownInMinutes`` is not waited for [U]: the next consolidation step comes with the next
  placement (the next change of the variant's components or instances), not on a timer;
- an endpoint is not resized before it hosts a component (its InitialInstanceCount stands);
- the emulator's bound on instances per endpoint caps ``MaxInstanceCount``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emulator.hosting import placement

ENABLED = "ENABLED"
IDLE_RELEASE, CONSOLIDATION = "IDLE_RELEASE", "CONSOLIDATION"
# ScaleInPolicy.MaximumStepSize when not given: AWS's documented default.
DEFAULT_MAXIMUM_STEP_SIZE = 1


def enabled(variant: dict[str, Any]) -> bool:
    return (variant.get("ManagedInstanceScaling") or {}).get("Status") == ENABLED


def instance_count(variant: dict[str, Any], demands: Sequence[placement.Demand],
                   max_instances: int) -> int | None:
    """The instance count ManagedInstanceScaling gives the variant for these copies; None when
    it is not enabled (the count is the user's: InitialInstanceCount, or
    UpdateEndpointWeightsAndCapacities)."""
    if not enabled(variant):
        return None
    scaling = variant["ManagedInstanceScaling"]
    current = int(variant.get("InitialInstanceCount") or 0)
    low = int(scaling.get("MinInstanceCount", current))
    high = max(low, min(int(scaling.get("MaxInstanceCount", current)), max_instances))
    instance_type = variant.get("InstanceType")

    def placed(count: int) -> int:
        return sum(sum(per_instance) for per_instance in
                   placement.place(instance_type, count, demands).values())

    most = placed(high)
    fewest = next(count for count in range(low, high + 1) if placed(count) >= most)
    policy = scaling.get("ScaleInPolicy") or {}
    strategy = policy.get("Strategy")
    if fewest >= current or strategy not in (IDLE_RELEASE, CONSOLIDATION):
        return fewest
    # Scale-in: the instances the copies leave empty when placed on the current ones go.
    occupied = _occupied(placement.place(instance_type, current, demands), current)
    if strategy == IDLE_RELEASE:
        return max(fewest, occupied)
    step = int(policy.get("MaximumStepSize") or DEFAULT_MAXIMUM_STEP_SIZE)
    return max(fewest, min(occupied, current - step))


def _occupied(placed: dict[str, list[int]], instances: int) -> int:
    """How many of the instances hold at least one copy."""
    return sum(1 for i in range(instances)
               if any(i < len(counts) and counts[i] for counts in placed.values()))
