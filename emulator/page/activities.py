"""What the page's history is told of Application Auto Scaling (each scaling activity as it
starts, in a sentence: which alarm, which policy, from how many to how many, and as figures) and
of the fault rules (the first call each rule broke).

The composition root adds ``scaling_listener(feed)`` to the scaling service's listeners and
``fault_listener(feed)`` to the fault table's; the deployments' steps come from the control plane
(``ControlPlaneService.on_activity``).
"""

from __future__ import annotations

from collections.abc import Callable

from emulator.autoscaling.rules import COMPONENT_RESOURCE, VARIANT_RESOURCE
from emulator.autoscaling.state import ScalingActivity, ScalingPolicy
from emulator.faults.table import FaultListener, Fired
from emulator.page.feed import Feed

ScalingListener = Callable[[ScalingActivity, ScalingPolicy | None], None]


def scaling_listener(feed: Feed) -> ScalingListener:
    def told(activity: ScalingActivity, policy: ScalingPolicy | None) -> None:
        feed.activity(_endpoint_of(activity.resource_id), "scaling",
                      scaling_text(activity, policy), scaling_details(activity, policy))
    return told


def _endpoint_of(resource_id: str) -> str:
    """A variant's endpoint; an inference component's resource names no endpoint."""
    found = VARIANT_RESOURCE.fullmatch(resource_id)
    return found.group(1) if found else ""


def _what(resource_id: str) -> str:
    variant = VARIANT_RESOURCE.fullmatch(resource_id)
    if variant:
        return f"variant {variant.group(2)}: instances"
    component = COMPONENT_RESOURCE.fullmatch(resource_id)
    return f"inference component {component.group(1)}: copies" if component else resource_id


def scaling_text(activity: ScalingActivity, policy: ScalingPolicy | None) -> str:
    """``variant AllTraffic: instances 1 -> 2, alarm ep-busy triggered policy scale-out``."""
    moved = f"{_what(activity.resource_id)} {activity.previous} -> {activity.desired}"
    if activity.alarm and policy is not None:
        return f"{moved}, alarm {activity.alarm} triggered policy {policy.name}"
    return f"{moved}, {activity.cause}"


def scaling_details(activity: ScalingActivity,
                    policy: ScalingPolicy | None) -> dict[str, object]:
    return {"ResourceId": activity.resource_id, "Alarm": activity.alarm,
            "Policy": policy.name if policy is not None else None,
            "From": activity.previous, "To": activity.desired, "Cause": activity.cause}


def fault_listener(feed: Feed) -> FaultListener:
    """A rule's first injected fault, told once: a rule firing on every call must not push a
    deployment's rollback out of the history (``GET /_emulator/faults`` counts every one, and
    the log has each)."""
    told: set[str] = set()

    def fired(fault: Fired) -> None:
        if fault.rule_id in told:
            return
        told.add(fault.rule_id)
        call = fault.call
        where = f"{call.service} {call.operation}" if call is not None else "a call"
        if call is not None and call.target_model:
            where += f" of {call.target_model}"
        feed.activity(call.endpoint or "" if call is not None else "", "fault",
                      f"fault rule {fault.rule_id} injected {fault.describe()} into {where}",
                      {"Rule": fault.rule_id, "Fault": fault.describe()})
    return fired
