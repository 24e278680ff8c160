"""Inference components: the six operations, their lifecycle and their state.

A component lives on a variant of an endpoint whose config names no model (an endpoint for
inference components, ``emulator.contract.inference_components``). Its lifecycle is AWS's:
``Creating`` -> ``InService`` (or ``Failed`` with a ``FailureReason``), ``Updating`` ->
``InService``, ``Deleting`` -> gone. Every change is one transaction in the control plane's
SQLite file, so a restart finds each component as it was and carries an interrupted Create,
Update or Delete to its end (``restore``).

What is built, and what is not (docs/inference-components.md): the control plane. Copies are
bookkeeping: an ``InService`` component's copies are placed on its variant's instances by
resources (``emulator.hosting.placement``; ``CurrentCopyCount`` counts the placed ones, the
others are pending), but no serving process runs for a copy yet.

A component waits in ``Creating`` while its endpoint is still ``Creating`` [U: AWS does not say
whether it refuses or waits]; it fails, with the endpoint's reason, if the endpoint fails.

The parts beside it: the record and its table (``component_records``), the checks against
state (``component_checks``), where copies go (``component_placement``), the rendering
(``component_views``), rolling updates (``component_updates``); the tasks and transitions are
``emulator.control.lifecycle``'s, as the endpoints' are.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from emulator.clock import Clock
from emulator.contract import control_plane as wire
from emulator.contract import inference_components as rules
from emulator.control import component_updates as updates
from emulator.control import component_views as views
from emulator.control.component_checks import IN_PROGRESS, ComponentChecks
from emulator.control.component_placement import ApplyCopies, CopyPlacement
from emulator.control.component_records import ComponentRecord, ComponentTable, reservation
from emulator.control.deployments import AlarmStates
from emulator.control.lifecycle import Lifecycle, Resumed
from emulator.control.state_db import (
    INFERENCE_COMPONENTS,
    AlreadyExists,
    ControlStore,
    EndpointRecord,
)
from emulator.hosting.component_copies import CopyTarget
from emulator.hosting.components import ComponentState, RollingTarget
from emulator.transitions import TransitionTable

log = logging.getLogger(__name__)

CREATING, IN_SERVICE, UPDATING, FAILED, DELETING = rules.STATUSES
# How often a component waiting for its endpoint looks at the endpoint's state again.
_ENDPOINT_POLL_S = 0.1


class InferenceComponents:
    """The operations; ``handlers()`` plugs them into the control plane's dispatch."""

    def __init__(self, store: ControlStore, arn: Callable[[str, str], str],
                 clock: Callable[[], float], transitions: TransitionTable | None = None) -> None:
        self.store = store
        self._arn = arn
        self._clock = clock
        self._table = ComponentTable(store)
        self.lifecycle = Lifecycle(self._table.get, self._table.save, clock,
                                   "inference-component", transitions)
        self.placement = CopyPlacement(self._table)
        self.checks = ComponentChecks(self._table, arn)
        # Rolling updates wait on the emulated clock and watch these alarms (the service's).
        self.emulated_clock = Clock()
        self.alarms: AlarmStates | None = None

    @property
    def apply_copies(self) -> ApplyCopies | None:
        """The runtime's hook that starts and stops copies (the endpoint registry's
        ``apply_copies``); None: copies stay bookkeeping (unit tests without a runtime)."""
        return self.placement.apply_copies

    @apply_copies.setter
    def apply_copies(self, hook: ApplyCopies | None) -> None:
        self.placement.apply_copies = hook

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]]:
        return {
            "CreateInferenceComponent": self.create,
            "DescribeInferenceComponent": self.describe,
            "ListInferenceComponents": self.list_components,
            "UpdateInferenceComponent": self.update,
            "UpdateInferenceComponentRuntimeConfig": self.update_runtime_config,
            "DeleteInferenceComponent": self.delete,
        }

    def component_arn(self, name: str) -> str:
        return self._arn(rules.KIND, name)

    # -- operations ---------------------------------------------------------------------------

    async def create(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["InferenceComponentName"]
        component_arn = self.component_arn(name)
        if self.store.get(INFERENCE_COMPONENTS, name) is not None:  # named before anything else
            raise rules.already_exists(component_arn)
        endpoint = self.checks.endpoint(params["EndpointName"])
        variant = self.checks.variant(endpoint, params.get("VariantName"))
        spec = params["Specification"]
        self.checks.specification(spec, variant)
        now = self._clock()
        record = ComponentRecord(
            name=name, created=now, modified=now, status=CREATING,
            endpoint_name=endpoint.name, variant_name=variant["VariantName"],
            specification=spec, desired_copies=int(params["RuntimeConfig"]["CopyCount"]),
            tags=list(params.get("Tags") or []))
        try:
            self.store.add(INFERENCE_COMPONENTS, record.to_resource())
        except AlreadyExists:
            raise rules.already_exists(component_arn) from None
        self.lifecycle.spawn(name, self._run_create(name))
        return {"InferenceComponentArn": component_arn}

    async def describe(self, params: dict[str, Any]) -> dict[str, Any]:
        record = self._component(params["InferenceComponentName"])
        return wire.output("DescribeInferenceComponent", views.describe(
            record, self._arn, self.store.get_endpoint(record.endpoint_name)))

    async def list_components(self, params: dict[str, Any]) -> dict[str, Any]:
        records = self._table.all()
        endpoint, variant = params.get("EndpointNameEquals"), params.get("VariantNameEquals")
        if endpoint:  # endpoint names are unique without regard to case
            records = [r for r in records if r.endpoint_name.lower() == endpoint.lower()]
        if variant:
            records = [r for r in records if r.variant_name == variant]
        page, token = wire.list_page(records, params, name=lambda r: r.name,
                                     created=lambda r: r.created, modified=lambda r: r.modified,
                                     status=lambda r: r.status)
        summaries = [views.summary(r, self._arn) for r in page]
        body: dict[str, Any] = {"InferenceComponents": summaries}
        if token:
            body["NextToken"] = token
        return body

    async def update(self, params: dict[str, Any]) -> dict[str, Any]:
        record = self._updatable(params["InferenceComponentName"])
        spec = params.get("Specification")
        if spec is not None and not spec.get("ModelName") and not spec.get("Container"):
            # [U] A new Specification that names no model keeps the component's (the SDK's
            # Predictor.update_predictor(resources=...) sends only the new resources).
            spec = {**{key: record.specification[key] for key in ("ModelName", "Container")
                       if key in record.specification}, **spec}
        if spec is not None:
            endpoint = self.checks.endpoint(record.endpoint_name)
            self.checks.specification(spec, self.checks.variant(endpoint, record.variant_name))
        copies = (params.get("RuntimeConfig") or {}).get("CopyCount")
        config = params.get("DeploymentConfig")
        if config is not None:
            # [U] Without a new Specification there is nothing to roll: the config is kept.
            rollout = self._rollout(record, config) if spec is not None else None
            record.last_deployment_config, record.rollout = config, rollout
        return self._start_update(record, spec, copies)

    def _rollout(self, record: ComponentRecord, config: dict[str, Any]) -> dict[str, Any]:
        """A rolling update's plan and start (``component_updates``), or SageMaker's error."""
        try:
            plan = updates.plan(config, record.current_copies)
        except updates.PlanError as exc:
            raise wire.validation_error(str(exc)) from None
        missing = [a for a in plan.alarms if self.alarms is None or not self.alarms.exists(a)]
        if missing:  # [U] wording, as for UpdateEndpoint
            raise wire.validation_error(
                f"AutoRollbackConfiguration names CloudWatch alarm(s) that do not exist: "
                f"{', '.join(missing)}. Create them with PutMetricAlarm first.")
        return updates.Rollout(plan.to_doc(), started=self.emulated_clock.now(),
                               total=record.current_copies,
                               desired_before=record.desired_copies).to_doc()

    async def update_runtime_config(self, params: dict[str, Any]) -> dict[str, Any]:
        record = self._updatable(params["InferenceComponentName"])
        return self._start_update(record, None, params["DesiredRuntimeConfig"]["CopyCount"])

    async def delete(self, params: dict[str, Any]) -> dict[str, Any]:
        record = self._component(params["InferenceComponentName"])
        if record.status == DELETING:
            return {}
        previous = self.lifecycle.running(record.name)
        if previous is not None:  # a Create or Update still running stops where it is
            previous.cancel()
        record.status, record.modified = DELETING, self._clock()
        self._save(record)
        self.lifecycle.spawn(record.name, self._run_delete(record.name, previous))
        return {}

    # -- what the endpoint operations and the runtime ask of components ----------------------

    def state_of(self, endpoint_name: str, component_name: str) -> ComponentState | None:
        """A component of this endpoint, for a call naming it (``hosting.components``)."""
        record = self._get(component_name)
        if record is None or record.endpoint_name.lower() != endpoint_name.lower():
            return None
        return ComponentState(record.status, record.current_copies, record.variant_name,
                              record.name, record.desired_copies, tuple(record.placement),
                              reservation(record.specification))

    def on_endpoint(self, endpoint_name: str) -> list[str]:
        """Names of the components on an endpoint, in creation order."""
        return [r.name for r in sorted(self._table.on_endpoint(endpoint_name),
                                       key=lambda r: r.created)]

    def check_endpoint_deletable(self, endpoint_name: str, endpoint_arn: str) -> None:
        """[U] DeleteEndpoint while components remain is refused: AWS documents that its
        console deletes an endpoint's inference components first, then the endpoint; the API
        does not say it does the same, so the emulator asks for it rather than guess."""
        names = self.on_endpoint(endpoint_name)
        if names:
            raise wire.validation_error(
                f'Cannot delete endpoint "{endpoint_arn}": inference components '
                f"{', '.join(names)} are deployed on it. Delete them first "
                "(DeleteInferenceComponent), then the endpoint.")

    # -- lifecycle tasks ----------------------------------------------------------------------

    async def _run_create(self, name: str) -> None:
        """Wait for the endpoint to be InService, then the copies (bookkeeping) are there."""
        transition = self.lifecycle.transition
        while True:
            record = self._get(name)
            if record is None or record.status != CREATING:
                return
            endpoint = self.store.get_endpoint(record.endpoint_name)
            if endpoint is None or endpoint.status in (FAILED, DELETING):
                why = ("was deleted" if endpoint is None
                       else f"is {endpoint.status}: {endpoint.failure_reason or 'no reason given'}")
                transition(name, (CREATING,), FAILED,
                           failure_reason=f"Endpoint {record.endpoint_name} {why}"[:1024])
                return
            if endpoint.status == IN_SERVICE:
                # Creating until its copies are placed and started (as on AWS); copies that
                # cannot start (no model file, a container that exits, a startup timeout) end
                # the Create Failed with the reason, as AWS fails a Create whose copies fail.
                started = self._place(record, creating=name).get(name)
                failure: BaseException | None = None
                if started is not None:
                    (failure,) = await asyncio.gather(asyncio.shield(started),
                                                      return_exceptions=True)
                if isinstance(failure, Exception):  # not a cancel (a shutdown)
                    transition(name, (CREATING,), FAILED, current_copies=0, placement=[],
                               failure_reason=copies_failed(failure))
                else:
                    transition(name, (CREATING,), IN_SERVICE, failure_reason=None)
                self._place(record)
                return
            await asyncio.sleep(_ENDPOINT_POLL_S)

    async def _run_update(self, name: str) -> None:
        record = self._get(name)
        if record is None or record.status != UPDATING:
            return
        if record.rollout is not None:
            await self._run_rollout(record)
            return
        changes: dict[str, Any] = {"pending_specification": None, "failure_reason": None}
        if record.pending_specification is not None:
            changes["specification"] = record.pending_specification
            # The new specification's copies start beside the old ones, which serve until they
            # are ready [U]; if they cannot start, the update fails: the component stays
            # InService on its old specification, the reason as FailureReason.
            failure = await self.placement.start_new_copies(record)
            if failure is not None:
                changes = {"pending_specification": None,
                           "failure_reason": copies_failed(failure, update=True)}
        else:
            await self._apply_copy_count(record)
        self.lifecycle.transition(name, (UPDATING,), IN_SERVICE, **changes)
        self._place(record)

    async def _apply_copy_count(self, record: ComponentRecord) -> None:
        """A new copy count (UpdateInferenceComponentRuntimeConfig, an autoscaling action):
        the component stays Updating until its copies have started or stopped, as on AWS, so
        a client that waits for InService (AWS's scale-to-zero notebook after a scale-out from
        zero) finds the copies serving. [U] Copies that fail to start leave it InService with
        those that run (their calls answered with the reason), as a later scale-out does."""
        change = self._place(record, creating=record.name).get(record.name)
        if change is not None:
            await asyncio.gather(asyncio.shield(change), return_exceptions=True)

    async def _run_rollout(self, record: ComponentRecord) -> None:
        """A rolling update to its end: InService on the new specification, or rolled back to
        the old one with the reason as FailureReason (``component_updates``)."""
        name = record.name
        assert record.rollout is not None

        def save(progress: updates.Rollout) -> None:
            current = self._get(name)
            if current is not None and current.status == UPDATING:
                current.rollout = progress.to_doc()
                self._save(current)

        async def roll(old: int, new: int) -> None:
            current = self._component(name)
            endpoint = self.store.get_endpoint(current.endpoint_name)
            if endpoint is None:
                raise LookupError(f"endpoint {current.endpoint_name} no longer exists")
            variant = self.checks.variant(endpoint, current.variant_name)
            outgoing = self.placement.copy_target(current, variant)
            incoming = self.placement.copy_target(
                dataclasses.replace(current, specification=current.pending_specification
                                    or current.specification), variant)
            if self.apply_copies is not None:
                await self.apply_copies(current.endpoint_name, name, RollingTarget.of(
                    incoming, new, outgoing.variant, old))

        rollout = updates.Rollout.from_doc(record.rollout)
        run = updates.RollingUpdate(name, rollout, roll, self.emulated_clock, self.alarms, save)
        transition = self.lifecycle.transition
        try:
            reason = await run.run()
        except Exception as exc:  # noqa: BLE001 - the rollback itself failed [U]: Failed
            log.warning("inference component %s: rollback failed: %s", name, exc)
            transition(name, (UPDATING,), FAILED, pending_specification=None, rollout=None,
                       failure_reason=f"The rollback of the update failed: {exc}"[:1024])
            return
        if reason is None:
            transition(name, (UPDATING,), IN_SERVICE, failure_reason=None, rollout=None,
                       specification=record.pending_specification, pending_specification=None)
        else:  # the old specification stays, and the copy count it had
            transition(name, (UPDATING,), IN_SERVICE, failure_reason=reason, rollout=None,
                       pending_specification=None, desired_copies=rollout.desired_before)
        self._place(record)  # the runtime keeps the side that won, the other stops

    async def _run_delete(self, name: str, previous: asyncio.Task[None] | None) -> None:
        if previous is not None and not previous.done():
            await asyncio.gather(previous, return_exceptions=True)
        record = self._get(name)
        if record is not None:  # every copy drains, stops
            await self.placement.stop_copies(record)
        self._table.remove(name)
        if record is not None:  # its room goes to pending copies
            self._place(record)

    async def restore(self) -> None:
        """After a restart: every stored component as it was; an interrupted Create, Update or
        Delete is carried to its end (call once, after the endpoints are restored)."""
        await self.lifecycle.restore(self._table.all(), self._resumed)
        # Placement again, as after any change (an endpoint resized when the restart came).
        for endpoint in {r.endpoint_name.lower(): r.endpoint_name
                         for r in self._table.all()}.values():
            self.replace_endpoint(endpoint)

    def _resumed(self, record: ComponentRecord) -> Resumed | None:
        """What a restart does with one stored component."""
        if record.status == CREATING:
            # Waits for its endpoint, which may take a while: not waited for here.
            return Resumed(self._run_create(record.name), waited=False)
        if record.status == UPDATING and record.rollout is not None:
            # A rolling update resumes at its batch; it takes its time: not waited for.
            record.rollout["resumed"] = int(record.rollout.get("resumed") or 0) + 1
            self._save(record)
            return Resumed(self._run_update(record.name), waited=False)
        if record.status == UPDATING:
            return Resumed(self._run_update(record.name))
        if record.status == DELETING:
            return Resumed(self._run_delete(record.name, None))
        return None

    async def aclose(self) -> None:
        await self.lifecycle.aclose(*self.placement.changes)

    # -- what the endpoint operations ask of components' placement ----------------------------

    def targets_on(self, endpoint_name: str, variants: list[dict[str, Any]]
                   ) -> dict[str, CopyTarget]:
        """The components' copies on another config's variants (``CopyPlacement.targets_on``)."""
        return self.placement.targets_on(endpoint_name, variants)

    def replace_endpoint(self, endpoint_name: str) -> None:
        """Place the copies of every variant of an endpoint again (its instances changed)."""
        self.placement.replace_endpoint(endpoint_name)

    def check_endpoint_move(self, endpoint: EndpointRecord,
                            variants: list[dict[str, Any]]) -> None:
        """UpdateEndpoint of an endpoint for components to ``variants``: what it would break
        (``ComponentChecks.endpoint_move``)."""
        self.checks.endpoint_move(endpoint, variants)

    async def move_copies(self, endpoint_name: str) -> list[str]:
        """Every component's copies onto the endpoint's (new) variants; why any failed."""
        return await self.placement.move_copies(endpoint_name)

    # -- helpers ------------------------------------------------------------------------------

    def _start_update(self, record: ComponentRecord, spec: dict[str, Any] | None,
                      copies: int | None) -> dict[str, Any]:
        record.status, record.modified = UPDATING, self._clock()
        record.failure_reason = None
        record.pending_specification = spec
        if copies is not None:
            record.desired_copies = int(copies)
        self._save(record)
        self.lifecycle.spawn(record.name, self._run_update(record.name))
        return {"InferenceComponentArn": self.component_arn(record.name)}

    def _updatable(self, name: str) -> ComponentRecord:
        record = self._component(name)
        if record.status in IN_PROGRESS:
            raise rules.in_progress(self.component_arn(record.name), record.status)
        if record.status != IN_SERVICE:  # [U] wording
            raise wire.validation_error(
                f'Cannot update inference component "{self.component_arn(record.name)}" in '
                f"status {record.status}: delete it (DeleteInferenceComponent) and create it "
                "again.")
        return record

    def _component(self, name: str) -> ComponentRecord:
        record = self._get(name)
        if record is None:
            raise rules.not_found(self.component_arn(name))
        return record

    def _get(self, name: str) -> ComponentRecord | None:
        return self._table.get(name)

    def _save(self, record: ComponentRecord) -> None:
        self._table.save(record)

    def _place(self, record: ComponentRecord,
               creating: str | None = None) -> dict[str, asyncio.Task[None] | None]:
        """Place the copies of the component's variant again, if its endpoint still exists."""
        endpoint = self.store.get_endpoint(record.endpoint_name)
        if endpoint is None:
            return {}
        return self.placement.place(endpoint, record.variant_name, creating=creating)


def copies_failed(exc: BaseException, update: bool = False) -> str:
    """FailureReason of a Create (or an update) whose copies could not start [U wording: AWS
    does not publish it]; the runtime's reason says what failed (the model file, the
    container, a timeout)."""
    if update:
        return (f"The update failed: the new specification's copies failed to start: {exc}. "
                "The inference component keeps its previous specification.")[:1024]
    return f"The inference component's copies failed to start: {exc}"[:1024]
