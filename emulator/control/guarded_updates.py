"""UpdateEndpoint with a DeploymentConfig: the guarded deployment of an endpoint of models.

What UpdateEndpoint checks before anything changes (``plan``: the same variant names, a plan
SageMaker accepts, alarms that exist), then the deployment as the endpoint's lifecycle task: a
green generation beside the running one, traffic shifted step by step on the emulated clock
(``emulator.control.deployments.DeploymentRun``), rolled back when an AutoRollbackConfiguration
alarm goes into ALARM or the new fleet fails. After a restart a deployment resumes at its step
(``resume``); one that was rolling back finishes its rollback (``restore_rollback``). Each
start, rollback and end is told to the live page's history (``on_activity``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from emulator.clock import Clock
from emulator.contract import control_plane as wire
from emulator.control.deployments import (
    TERMINATING,
    AlarmStates,
    DeploymentRun,
    Generations,
    Progress,
    RolledBack,
)
from emulator.control.lifecycle import Lifecycle, failure_reason
from emulator.control.runtimes import EndpointRuntimes
from emulator.control.state_db import Deployment, EndpointRecord
from emulator.hosting import deployment as guardrails
from emulator.hosting.spec import EndpointSpec

log = logging.getLogger(__name__)

class Fleet(NamedTuple):
    """What a guarded update's plan reads of one of the new config's variants."""

    variant: str
    instance_count: int
    instance_type: str | None


# Told of each step of a guarded deployment that the live page keeps in its history:
# (endpoint, kind, text, details), kind one of deployment, rollback, rolled-back, deployed.
ActivityListener = Callable[[str, str, str, dict[str, Any]], None]


def _no_listener(_endpoint: str, _kind: str, _text: str, _details: dict[str, Any]) -> None:
    return None


def deployment_config(record: EndpointRecord, params: dict[str, Any]) -> dict[str, Any] | None:
    """The DeploymentConfig an UpdateEndpoint runs under: the one given, or with
    RetainDeploymentConfig the endpoint's latest one; None for the default update."""
    given: dict[str, Any] | None = params.get("DeploymentConfig")
    if params.get("RetainDeploymentConfig"):
        if given is not None:  # [U] wording
            raise wire.validation_error(
                "Specify either DeploymentConfig or RetainDeploymentConfig, not both.")
        # [U] No earlier DeploymentConfig: the default update (blue/green, all at once).
        return record.last_deployment_config
    return given


class GuardedUpdates:
    """Guarded deployments of the endpoints of one control plane."""

    def __init__(self, lifecycle: Lifecycle[EndpointRecord],
                 save: Callable[[EndpointRecord], None], generations: EndpointRuntimes,
                 emulated_clock: Clock, alarms: AlarmStates | None, region: str,
                 clock: Callable[[], float]) -> None:
        self._lifecycle = lifecycle
        self._save = save
        self._generations = generations
        self._emulated_clock = emulated_clock
        self._alarms = alarms
        self._region = region
        self._clock = clock
        # The live page's history of deployments (the composition root sets it).
        self.on_activity: ActivityListener = _no_listener

    def _get(self, name: str) -> EndpointRecord | None:
        return self._lifecycle.get(name)

    def plan(self, running: EndpointSpec, new: EndpointSpec, config_name: str,
             config: dict[str, Any]) -> Progress:
        """The plan of a guarded update from ``running`` to ``new`` (endpoint config
        ``config_name``), or SageMaker's error for what it refuses."""
        return self.plan_fleets([v.name for v in running.variants],
                                [Fleet(v.name, v.instance_count, v.instance_type)
                                 for v in new.variants], config_name, config)

    def plan_fleets(self, running: list[str], new: list[Fleet], config_name: str,
                    config: dict[str, Any]) -> Progress:
        """``plan`` from the running variants' names and the new config's fleets."""
        old_names, new_names = sorted(running), sorted(f.variant for f in new)
        if old_names != new_names:  # documented exclusion; [U] wording
            raise wire.validation_error(
                f"A deployment with DeploymentConfig needs the new endpoint configuration to "
                f"have the same variant names as the running one ({', '.join(old_names)}); "
                f"{config_name} has {', '.join(new_names)}.")
        try:
            plan = guardrails.plan(config, [f.instance_count for f in new])
        except guardrails.PlanError as exc:
            raise wire.validation_error(str(exc)) from None
        missing = [a for a in plan.alarms if self._alarms is None or not self._alarms.exists(a)]
        if missing:  # [U] wording
            raise wire.validation_error(
                f"AutoRollbackConfiguration names CloudWatch alarm(s) that do not exist in "
                f"{self._region}: {', '.join(missing)}. Create them with PutMetricAlarm first.")
        if any((f.instance_type or "").startswith("ml.inf1.") for f in new):
            # Documented exclusion: Inf1 endpoints fall back to blue/green all at once with no
            # final baking period.
            plan = dataclasses.replace(plan, kind=guardrails.BLUE_GREEN,
                                       routing=guardrails.ALL_AT_ONCE, shares=(1.0,),
                                       bake_s=0.0, termination_wait_s=0.0)
        return Progress(plan=plan.to_doc(), started=self._emulated_clock.now())

    async def run(self, name: str, deployment: Deployment, progress: Progress,
                  spec: EndpointSpec | None = None, running: EndpointSpec | None = None,
                  generations: Generations | None = None,
                  on_promoted: Callable[[], None] | None = None) -> None:
        """The deployment to its end: InService on the new config, or rolled back. ``spec``
        is the deployment's, ``running`` the blue fleet's, when the caller has them already
        (read from their stored form otherwise: a deployment resumed after a restart).
        ``generations`` starts the new fleet (the registry's own endpoints by default; an
        endpoint for components brings its components' copies); ``on_promoted`` is told once
        the new config is the endpoint's."""
        def save(now: Progress) -> None:
            record = self._get(name)
            if record is not None and record.status == "Updating":
                record.deployment = now.to_doc()
                self._save(record)

        def promoted() -> None:  # green is the endpoint; blue waits out TerminationWait
            record = self._get(name)
            if record is not None and record.status == "Updating":
                record.current = dataclasses.replace(deployment, started=self._clock())
                record.pending = None
                self._save(record)
                if on_promoted is not None:
                    on_promoted()

        if running is None:
            record = self._get(name)
            running = (EndpointSpec.from_doc(record.current.spec)
                       if record is not None and record.current.spec else None)
        blue_count = running.variants[0].instance_count if running and running.variants else 1
        spec = spec or EndpointSpec.from_doc(deployment.spec)
        run = DeploymentRun(name, spec, progress, generations or self._generations,
                            self._emulated_clock, self._alarms, save, promoted,
                            config_name=deployment.config_name, blue_count=blue_count)
        rolling = run.plan.rolling
        new = deployment.config_name
        plan = {"NewConfig": new, "Kind": run.plan.kind, "Routing": run.plan.routing,
                "Steps": run.plan.steps}
        self.on_activity(name, "deployment", (
            f"deployment to {new} {'resumed' if progress.resumed else 'started'}: "
            f"{run.plan.routing.lower().replace('_', ' ')}, {run.plan.steps} step(s)"), plan)
        transition = self._lifecycle.transition
        try:
            await run.run()
        except RolledBack as exc:
            await self._roll_back(name, str(exc), rolling, new, progress.alarm)
            return
        except Exception as exc:  # noqa: BLE001 - green never took traffic, or blue is gone
            log.warning("endpoint %s: deployment failed: %s", name, exc)
            if progress.phase == TERMINATING:  # green serves already: the update is done
                transition(name, ("Updating",), "InService", failure_reason=None,
                           pending=None, deployment=None)
                self.on_activity(name, "deployed", f"deployment to {new} ended: {new} serves",
                                 plan)
            else:
                await self._roll_back(name, failure_reason(exc), rolling, new)
            return
        transition(name, ("Updating",), "InService", failure_reason=None, pending=None,
                   deployment=None)
        self.on_activity(name, "deployed", f"deployment to {new} ended: {new} serves", plan)

    async def _roll_back(self, name: str, reason: str, rolling: bool = False,
                         new_config: str = "", alarm: str | None = None) -> None:
        """Every new call back to blue at once, then green drained and stopped. A rolling
        update first brings blue back to its size (it gave up instances batch by batch)."""
        log.warning("endpoint %s: rolling back: %s", name, reason)
        transition = self._lifecycle.transition
        transition(name, ("Updating",), "RollingBack", failure_reason=reason)
        record = self._get(name)
        old = record.current.config_name if record is not None else ""
        details = {"NewConfig": new_config, "OldConfig": old, "Alarm": alarm, "Reason": reason}
        self.on_activity(name, "rollback", f"rolling back the deployment to {new_config}: "
                         f"{reason}", details)
        try:
            if rolling and record is not None and self._generations.get(name) is not None:
                await self._generations.resize(EndpointSpec.from_doc(record.current.spec))
            await self._generations.drop_green(name)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the endpoint says so
            transition(name, ("RollingBack",), "UpdateRollbackFailed",
                       failure_reason=failure_reason(exc))
            self.on_activity(name, "rollback-failed", f"the rollback to {old} failed: {exc}",
                             details)
            return
        transition(name, ("RollingBack",), "InService", failure_reason=reason,
                   pending=None, deployment=None)
        self.on_activity(name, "rolled-back", f"rolled back: {old} serves again, the "
                         f"deployment to {new_config} ended", details)

    async def resume(self, name: str, blue: Deployment, green: Deployment,
                     progress: Progress) -> None:
        """After a restart: blue comes back, then the deployment goes on from its step."""
        try:
            await self._generations.create(EndpointSpec.from_doc(blue.spec))
        except Exception as exc:  # noqa: BLE001 - any failure of the runtime ends in Failed
            log.warning("endpoint %s could not be restored: %s", name, exc)
            self._lifecycle.transition(name, None, "Failed", failure_reason=failure_reason(exc),
                                       pending=None, deployment=None)
            return
        log.warning("endpoint %s: the deployment to %s was interrupted by a restart in step "
                    "%d of %d; it resumes there (the new fleet starts again; the step's bake "
                    "starts again in full)", name, green.config_name, progress.step + 1,
                    len(progress.plan["shares"]))
        self._lifecycle.spawn(name, self.run(name, green, progress))

    async def restore_rollback(self, name: str, blue: Deployment) -> None:
        """After a restart during a rollback: blue comes back, the rollback is done."""
        try:
            await self._generations.create(EndpointSpec.from_doc(blue.spec))
        except Exception as exc:  # noqa: BLE001 - any failure of the runtime is reported
            self._lifecycle.transition(name, None, "UpdateRollbackFailed",
                                       failure_reason=failure_reason(exc))
        else:
            self._lifecycle.transition(name, None, "InService")
