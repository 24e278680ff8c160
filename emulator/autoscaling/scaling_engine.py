"""Scaling that really happens: policies run by their CloudWatch alarms' actions, capacity
(a variant's instances, an inference component's copies) changed through SageMaker's API,
every decision logged and listed as a scaling activity.

The alarms (target tracking's AlarmHigh/AlarmLow, the alarms a user points at a step scaling
policy) are evaluated by the ``AlarmStore`` on the emulated clock; an alarm in ALARM calls
``run_actions`` with its policy ARN, at the state change and again at every evaluation while
it stays in ALARM. All the calls of one evaluation round come together: per scalable target the
largest proposed capacity wins (AWS's rule for policies that disagree).

A loop also visits every target each ``TICK_S`` emulated seconds to settle activities and to
bring a capacity outside MinCapacity/MaxCapacity back within them. The rules (thresholds,
datapoints, cooldowns, the [U] choices) are in ``rules.py`` and ``step.py``.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from emulator.autoscaling import rules, step
from emulator.autoscaling.capacity import CapacityError, VariantCapacity
from emulator.autoscaling.service import AutoScalingService
from emulator.autoscaling.state import ScalableTarget, ScalingActivity, ScalingPolicy
from emulator.background import beside
from emulator.clock import Clock
from emulator.cloudwatch.actions import ActionCall
from emulator.cloudwatch.alarm_model import ALARM
from emulator.cloudwatch.series import MetricStore

log = logging.getLogger(__name__)

TICK_S = 10.0  # emulated seconds between two visits of every target (activities, bounds)
POLICY_ARN_PREFIX = "arn:aws:autoscaling:"


@dataclass(frozen=True)
class Proposal:
    capacity: int
    cause: str
    scale_in: bool
    policy_arn: str | None = None
    # The capacity the adjustment was applied to, when not the desired count (a step scale-out
    # within its cooldown counts from before the activity that started it).
    base: int | None = None
    alarm: str | None = None  # the CloudWatch alarm whose action proposed it


class ScalingEngine:
    def __init__(self, service: AutoScalingService, store: MetricStore, clock: Clock) -> None:
        self.service = service
        self.store = store
        self.clock = clock
        if service.alarms is not None:
            service.alarms.add_action_handler(POLICY_ARN_PREFIX, self.run_actions)

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        return beside(self._loop(), "autoscaling")

    async def _loop(self) -> None:
        while True:
            for target in list(self.service.targets.values()):
                try:
                    await self.evaluate(target)
                except Exception:  # one bad evaluation must not stop scaling
                    log.exception("resource=%s evaluation failed", target.resource_id)
            await self.clock.sleep(TICK_S)

    # -----------------------------------------------------------------------------------------
    # The periodic visit: settle activities, keep within Min/Max

    async def evaluate(self, target: ScalableTarget) -> None:
        capacity = await self.service.variants.of(target.resource_id)
        if capacity is None:
            return  # the resource is gone; the target stays registered, as on AWS
        if not self._settle(target, capacity):
            return
        proposal = self._bounds(target, capacity.desired)
        if proposal is not None and proposal.capacity != capacity.desired:
            await self._act(target, proposal, capacity.desired)

    def _settle(self, target: ScalableTarget, capacity: VariantCapacity) -> bool:
        """Finish what is done; True when the target is free for a new activity."""
        now = self.clock.now()
        history = self.service.activities.get(target.resource_id, [])
        changed = False
        for activity in [a for a in history if a.status == "InProgress"]:
            changed |= self._finish(activity, capacity, now, rules.unit_of(target.dimension))
        if changed:
            self.service.save()
        return capacity.status == "InService" and not any(
            a.status == "InProgress" for a in history)

    def _finish(self, activity: ScalingActivity, capacity: VariantCapacity, now: float,
                unit: str) -> bool:
        # Done once the resource has settled: at the count asked for or, when someone else's
        # update came since, at theirs (an activity must not stay InProgress and block the
        # target).
        if capacity.settled:
            activity.status, activity.ended = "Successful", now
            activity.message = (f"Successfully set desired {unit} to {activity.desired}."
                                " Change successfully fulfilled by sagemaker.")
            return True
        if capacity.status == "Failed":
            activity.status, activity.ended = "Failed", now
            what = "inference component" if capacity.component else "endpoint"
            activity.message = (f"Failed to set desired {unit} to {activity.desired}. "
                                f"Reason: the {what} is Failed.")
            return True
        return False

    def _bounds(self, target: ScalableTarget, desired: int) -> Proposal | None:
        if desired < target.min_capacity:
            return Proposal(target.min_capacity,
                            f"minimum capacity was set to {target.min_capacity}", False)  # [U]
        if desired > target.max_capacity:
            return Proposal(target.max_capacity,
                            f"maximum capacity was set to {target.max_capacity}", True)  # [U]
        return None

    # -----------------------------------------------------------------------------------------
    # Alarm actions: the policies

    async def run_actions(self, calls: list[ActionCall]) -> list[str | None]:
        """One evaluation round's calls of policy ARNs; per call None, or why it failed."""
        results: list[str | None] = []
        by_target: dict[str, list[tuple[ScalingPolicy, ActionCall]]] = {}
        for call in calls:
            policy = self.service.policy_by_arn(call.arn)
            if policy is None:
                results.append(f"No scaling policy found for {call.arn}")  # [U] wording
                continue
            results.append(None)
            by_target.setdefault(policy.resource_id, []).append((policy, call))
        for resource, items in by_target.items():
            target = self.service.targets.get(resource)
            if target is None:
                continue
            try:
                await self._decide(target, items)
            except Exception:  # one target's failure must not stop the others
                log.exception("resource=%s scaling failed", resource)
        return results

    async def _decide(self, target: ScalableTarget,
                      items: list[tuple[ScalingPolicy, ActionCall]]) -> None:
        capacity = await self.service.variants.of(target.resource_id)
        if capacity is None or not self._settle(target, capacity):
            return  # not now: the alarm stays in ALARM and calls again next evaluation
        now = self.clock.now()
        proposals = [p for policy, call in items
                     if (p := self._propose(target, policy, call, capacity.desired, now))
                     is not None and p.capacity != capacity.desired]
        if proposals:
            # AWS: "the policy that provides the largest capacity" wins, out and in alike
            await self._act(target, max(proposals, key=lambda p: p.capacity), capacity.desired)

    def _propose(self, target: ScalableTarget, policy: ScalingPolicy, call: ActionCall,
                 desired: int, now: float) -> Proposal | None:
        if policy.tracking:
            # its own two alarms call it in ALARM only; any other alarm pointed at it does
            # nothing ([U]: what AWS does with such an alarm is not published)
            if call.state != ALARM:
                return None
            return self._tracking(target, policy, call, desired, now)
        # a step policy runs in whatever state its alarm's action is for (OKActions too): the
        # step that holds the breach decides, as for EC2 Auto Scaling's step policies
        return self._step(target, policy, call, desired, now)

    @staticmethod
    def _cause(alarm: str, policy: ScalingPolicy, state: str = ALARM) -> str:
        return f"monitor alarm {alarm} in state {state} triggered policy {policy.name}"

    def _tracking(self, target: ScalableTarget, policy: ScalingPolicy, call: ActionCall,
                  desired: int, now: float) -> Proposal | None:
        value = call.value
        if value is None:
            return None
        policies = [p for p in self.service.policies.values()
                    if p.resource_id == target.resource_id and p.tracking]
        if policy.high is not None and call.alarm_name == policy.high.name:
            if target.suspended.get("DynamicScalingOutSuspended"):
                return None
            if now < self._last(target, scale_in=False, ended=False) + self._cooldown(
                    policies, "ScaleOutCooldown"):
                return None
            capacity = rules.scale_out_capacity(desired, value, policy.target_value,
                                                target.max_capacity)
            return Proposal(capacity, self._cause(call.alarm_name, policy), False, policy.arn,
                            alarm=call.alarm_name)
        if target.suspended.get("DynamicScalingInSuspended"):
            return None
        if now < self._last(target, scale_in=True, ended=True) + self._cooldown(
                policies, "ScaleInCooldown"):
            return None
        # [U] scale in only when every target tracking policy of the target would (each one's
        # AlarmLow in ALARM), to the largest of their capacities
        capacities = []
        for each in policies:
            if each.configuration.get("DisableScaleIn") or each.low is None:
                return None
            alarm = self.service.alarms.get(each.low.name) if self.service.alarms else None
            if alarm is None or alarm.state != ALARM or alarm.value is None:
                return None
            capacities.append(rules.scale_in_capacity(desired, alarm.value, each.target_value,
                                                      target.min_capacity))
        if policy.low is None:
            return None
        return Proposal(max(capacities), self._cause(call.alarm_name, policy), True, policy.arn,
                        alarm=call.alarm_name)

    def _step(self, target: ScalableTarget, policy: ScalingPolicy, call: ActionCall,
              desired: int, now: float) -> Proposal | None:
        config = policy.configuration
        threshold = float(call.config.get("Threshold", 0.0))
        # [U] an alarm in ALARM with no datapoint (missing data treated as breaching) is taken
        # as breaching by nothing: the step that holds 0.
        value = call.value if call.value is not None else threshold
        adjustment = step.adjustment(config, value - threshold)
        if adjustment is None:
            return None  # no step holds the breach: nothing to do, as on AWS
        capacity = step.capacity(config, desired, adjustment, target.min_capacity,
                                 target.max_capacity)
        cooldown = self.clock.real_duration(float(config.get("Cooldown",
                                                             step.DEFAULT_COOLDOWN_S)))
        last = self._last_of(target, policy)
        cause = self._cause(call.alarm_name, policy, call.state)
        if capacity > desired:
            if target.suspended.get("DynamicScalingOutSuspended"):
                return None
            if last is not None and not last.scale_in and now < last.started + cooldown:
                # During the cooldown the capacity the last scale-out added counts as part of
                # this one: only a larger scale-out goes through.
                base = last.previous if last.previous is not None else desired
                capacity = step.capacity(config, base, adjustment, target.min_capacity,
                                         target.max_capacity)
                if capacity <= last.desired:
                    return None
                return Proposal(capacity, cause, False, policy.arn, base, call.alarm_name)
            return Proposal(capacity, cause, False, policy.arn, alarm=call.alarm_name)
        if capacity < desired:
            if target.suspended.get("DynamicScalingInSuspended"):
                return None
            if last is not None and last.scale_in and now < (last.ended or last.started) \
                    + cooldown:
                return None
            return Proposal(capacity, cause, True, policy.arn, alarm=call.alarm_name)
        return None

    def _last_of(self, target: ScalableTarget, policy: ScalingPolicy) -> ScalingActivity | None:
        for activity in reversed(self.service.activities.get(target.resource_id, [])):
            if activity.policy_arn == policy.arn and activity.status == "Successful":
                return activity
        return None

    def _cooldown(self, policies: list[ScalingPolicy], name: str) -> float:
        """The longest cooldown of the target's policies, in real seconds."""
        seconds = max((float(p.configuration.get(name, rules.DEFAULT_COOLDOWN_S))
                       for p in policies), default=float(rules.DEFAULT_COOLDOWN_S))
        return self.clock.real_duration(seconds)

    def _last(self, target: ScalableTarget, *, scale_in: bool, ended: bool) -> float:
        for activity in reversed(self.service.activities.get(target.resource_id, [])):
            if activity.scale_in == scale_in and activity.status == "Successful":
                return (activity.ended or activity.started) if ended else activity.started
        return float("-inf")

    async def _act(self, target: ScalableTarget, proposal: Proposal, desired: int) -> None:
        unit = rules.unit_of(target.dimension)
        activity = ScalingActivity(
            resource_id=target.resource_id,
            description=f"Setting desired {unit} to {proposal.capacity}.",
            cause=proposal.cause, started=self.clock.now(), desired=proposal.capacity,
            scale_in=proposal.scale_in, policy_arn=proposal.policy_arn,
            previous=proposal.base if proposal.base is not None else desired,
            alarm=proposal.alarm)
        self.service.record_activity(activity)
        log.info("resource=%s scaling to %d: %s", target.resource_id, proposal.capacity,
                 proposal.cause)
        try:
            await self.service.variants.set_resource_desired(target.resource_id,
                                                             proposal.capacity)
        except CapacityError as exc:
            activity.status, activity.ended = "Failed", self.clock.now()
            activity.message = (f"Failed to set desired {unit} to {proposal.capacity}."
                                f" Reason: {exc}")
            log.warning("resource=%s scaling refused by sagemaker: %s", target.resource_id, exc)
        self.service.save()
