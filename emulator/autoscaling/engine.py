"""Target tracking that really happens: alarms evaluated over the metric store, capacity changed
through SageMaker's API, every decision logged and listed as a scaling activity.

One asyncio task evaluates every registered target each ``TICK_S`` emulated seconds (so, with
``--clock-scale 60``, six times per real second). The rules (thresholds, datapoints, cooldowns,
the [U] choices) are in ``emulator/autoscaling/rules.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from emulator.autoscaling import rules
from emulator.autoscaling.capacity import CapacityError, VariantCapacity
from emulator.autoscaling.service import AutoScalingService, metric_query
from emulator.autoscaling.state import ScalableTarget, ScalingActivity, ScalingPolicy
from emulator.clock import Clock
from emulator.cloudwatch import statistics
from emulator.cloudwatch.series import MetricStore, SeriesKey

log = logging.getLogger(__name__)

# [U] Alarms are re-evaluated over sliding one-minute windows every 10 emulated seconds (AWS
#     evaluates once a minute): a breach is seen at most 10 s after it is complete.
TICK_S = 10.0


@dataclass(frozen=True)
class Proposal:
    capacity: int
    cause: str
    scale_in: bool


class ScalingEngine:
    def __init__(self, service: AutoScalingService, store: MetricStore, clock: Clock) -> None:
        self.service = service
        self.store = store
        self.clock = clock

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        task = asyncio.create_task(self._loop(), name="autoscaling")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            for target in list(self.service.targets.values()):
                try:
                    await self.evaluate(target)
                except Exception:  # noqa: BLE001 - one bad evaluation must not stop scaling
                    log.exception("resource=%s evaluation failed", target.resource_id)
            await self.clock.sleep(TICK_S)

    # -----------------------------------------------------------------------------------------

    async def evaluate(self, target: ScalableTarget) -> None:
        endpoint, variant = target.endpoint_and_variant
        capacity = await self.service.variants.capacity(endpoint, variant)
        if capacity is None:
            return  # the endpoint is gone; the target stays registered, as on AWS
        now = self.clock.now()
        history = self.service.activities.get(target.resource_id, [])
        in_progress = [a for a in history if a.status == "InProgress"]
        for activity in in_progress:
            self._finish(activity, capacity, now)
        if capacity.status != "InService" or any(a.status == "InProgress" for a in history):
            return
        proposal = self._bounds(target, capacity.desired) or self._track(target, capacity, now)
        if proposal is not None and proposal.capacity != capacity.desired:
            await self._act(target, proposal, now)

    def _finish(self, activity: ScalingActivity, capacity: VariantCapacity, now: float) -> None:
        # Done once the endpoint has settled: at the count asked for or, when someone else's update
        # came since, at theirs (an activity must not stay InProgress and block the target).
        if capacity.status == "InService" and capacity.current == capacity.desired:
            activity.status, activity.ended = "Successful", now
            activity.message = (f"Successfully set desired instance count to {activity.desired}."
                                " Change successfully fulfilled by sagemaker.")
        elif capacity.status == "Failed":
            activity.status, activity.ended = "Failed", now
            activity.message = (f"Failed to set desired instance count to {activity.desired}. "
                                "Reason: the endpoint is Failed.")

    def _bounds(self, target: ScalableTarget, desired: int) -> Proposal | None:
        if desired < target.min_capacity:
            return Proposal(target.min_capacity,
                            f"minimum capacity was set to {target.min_capacity}", False)  # [U]
        if desired > target.max_capacity:
            return Proposal(target.max_capacity,
                            f"maximum capacity was set to {target.max_capacity}", True)  # [U]
        return None

    def _track(self, target: ScalableTarget, capacity: VariantCapacity,
               now: float) -> Proposal | None:
        policies = [p for p in self.service.policies.values()
                    if p.resource_id == target.resource_id]
        if not policies:
            return None
        outs: list[Proposal] = []
        ins: list[Proposal | None] = []
        for policy in policies:
            out, scale_in = self._policy(policy, target, capacity.desired, now)
            if out is not None:
                outs.append(out)
            ins.append(scale_in)
        if outs and not target.suspended.get("DynamicScalingOutSuspended"):
            if now >= self._last(target, scale_in=False, ended=False) + self._cooldown(
                    policies, "ScaleOutCooldown"):
                return max(outs, key=lambda p: p.capacity)
            return None
        if ins and all(p is not None for p in ins) and not target.suspended.get(
                "DynamicScalingInSuspended"):
            if now >= self._last(target, scale_in=True, ended=True) + self._cooldown(
                    policies, "ScaleInCooldown"):
                return max((p for p in ins if p is not None), key=lambda p: p.capacity)
        return None

    def _policy(self, policy: ScalingPolicy, target: ScalableTarget, desired: int,
                now: float) -> tuple[Proposal | None, Proposal | None]:
        """(scale-out proposal, scale-in proposal) of one target tracking policy."""
        query = metric_query(policy.configuration)
        endpoint, variant = target.endpoint_and_variant
        dims = query.dimensions or (("EndpointName", endpoint), ("VariantName", variant))
        points = self._datapoints(SeriesKey(query.namespace, query.metric_name, dims),
                                  query, rules.LOW_DATAPOINTS, now)
        value = policy.target_value
        out = scale_in = None
        high = [p for p in points[: rules.HIGH_DATAPOINTS] if p is not None and p > value]
        if high and len(high) == len(points[: rules.HIGH_DATAPOINTS]):
            latest = high[0]
            capacity = rules.scale_out_capacity(desired, latest, value, target.max_capacity)
            if capacity > desired:
                out = Proposal(capacity, self._cause(policy, policy.high.name), False)
        low_threshold = value * rules.LOW_THRESHOLD_FACTOR
        low = [p for p in points if p is not None and p < low_threshold]
        if not policy.configuration.get("DisableScaleIn") and low and len(low) == len(points):
            latest = low[0]
            capacity = rules.scale_in_capacity(desired, latest, value, target.min_capacity)
            if capacity < desired:
                scale_in = Proposal(capacity, self._cause(policy, policy.low.name), True)
        return out, scale_in

    def _datapoints(self, key: SeriesKey, query: rules.MetricQuery, count: int,
                    now: float) -> list[float | None]:
        """The last ``count`` one-minute datapoints, most recent first (None: no data)."""
        width = self.clock.real_duration(rules.PERIOD_S)
        times, values = self.store.samples(key, now - count * width, now, query.unit)
        index = np.floor((now - times) / width).astype(np.int64)
        points: list[float | None] = []
        for k in range(count):
            selected = values[index == k]
            points.append(statistics.compute(query.statistic, selected) if selected.size
                          else None)
        return points

    @staticmethod
    def _cause(policy: ScalingPolicy, alarm: str) -> str:
        return f"monitor alarm {alarm} in state ALARM triggered policy {policy.name}"

    def _cooldown(self, policies: list[ScalingPolicy], name: str) -> float:
        """The longest cooldown of the target's policies, in real seconds."""
        seconds = max(float(p.configuration.get(name, rules.DEFAULT_COOLDOWN_S))
                      for p in policies)
        return self.clock.real_duration(seconds)

    def _last(self, target: ScalableTarget, *, scale_in: bool, ended: bool) -> float:
        for activity in reversed(self.service.activities.get(target.resource_id, [])):
            if activity.scale_in == scale_in and activity.status == "Successful":
                return (activity.ended or activity.started) if ended else activity.started
        return float("-inf")

    async def _act(self, target: ScalableTarget, proposal: Proposal, now: float) -> None:
        endpoint, variant = target.endpoint_and_variant
        activity = ScalingActivity(
            resource_id=target.resource_id,
            description=f"Setting desired instance count to {proposal.capacity}.",
            cause=proposal.cause, started=now, desired=proposal.capacity,
            scale_in=proposal.scale_in)
        self.service.record_activity(activity)
        log.info("resource=%s scaling to %d instances: %s", target.resource_id,
                 proposal.capacity, proposal.cause)
        try:
            await self.service.variants.set_desired(endpoint, variant, proposal.capacity)
        except CapacityError as exc:
            activity.status, activity.ended = "Failed", self.clock.now()
            activity.message = (f"Failed to set desired instance count to {proposal.capacity}."
                                f" Reason: {exc}")
            log.warning("resource=%s scaling refused by sagemaker: %s", target.resource_id, exc)
