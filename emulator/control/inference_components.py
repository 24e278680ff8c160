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
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from emulator import instance_types
from emulator.clock import Clock
from emulator.contract import control_plane as wire
from emulator.contract import inference_components as rules
from emulator.contract.control_plane import KIND_ENDPOINT, KIND_MODEL
from emulator.control import component_updates as updates
from emulator.control.deployments import AlarmStates
from emulator.control.state_db import (
    INFERENCE_COMPONENTS,
    MODELS,
    AlreadyExists,
    ControlStore,
    EndpointRecord,
    Resource,
)
from emulator.hosting import managed_instances, placement
from emulator.hosting.component_copies import CopyTarget
from emulator.hosting.components import ComponentState, RollingTarget
from emulator.hosting.spec import ContainerSpec, VariantSpec

log = logging.getLogger(__name__)

CREATING, IN_SERVICE, UPDATING, FAILED, DELETING = rules.STATUSES
_IN_PROGRESS = (CREATING, UPDATING, DELETING)
# How often a component waiting for its endpoint looks at the endpoint's state again.
_ENDPOINT_POLL_S = 0.1
_MIB = 1024 * 1024


@dataclasses.dataclass
class ComponentRecord:
    """One component as stored (JSON-safe)."""

    name: str
    created: float
    modified: float
    status: str
    endpoint_name: str
    variant_name: str
    specification: dict[str, Any]
    desired_copies: int
    # Copies placed on the variant's instances (bookkeeping: no serving process yet), in all
    # and per instance (``emulator.hosting.placement``); the others are pending.
    current_copies: int = 0
    placement: list[int] = dataclasses.field(default_factory=list)
    failure_reason: str | None = None
    tags: list[dict[str, str]] = dataclasses.field(default_factory=list)
    # Set while an Update is in progress: the specification it moves to (None: unchanged).
    pending_specification: dict[str, Any] | None = None
    # The DeploymentConfig of the latest update that had one (LastDeploymentConfig), and the
    # progress of a rolling update while it runs (``component_updates.Rollout``).
    last_deployment_config: dict[str, Any] | None = None
    rollout: dict[str, Any] | None = None

    def to_resource(self) -> Resource:
        return Resource(self.name, self.created, dataclasses.asdict(self))

    @classmethod
    def from_resource(cls, resource: Resource) -> ComponentRecord:
        return cls(**resource.doc)


class InferenceComponents:
    """The operations; ``handlers()`` plugs them into the control plane's dispatch."""

    def __init__(self, store: ControlStore, arn: Callable[[str, str], str],
                 clock: Callable[[], float]) -> None:
        self.store = store
        self._arn = arn
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # The runtime's hook that starts and stops copies (the endpoint registry's
        # ``apply_copies``); None: copies stay bookkeeping (unit tests without a runtime).
        self.apply_copies: Callable[[str, str, CopyTarget | None], Awaitable[None]] | None = None
        self._copy_changes: set[asyncio.Task[None]] = set()
        # Rolling updates wait on the emulated clock and watch these alarms (the service's).
        self.emulated_clock = Clock()
        self.alarms: AlarmStates | None = None

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
        endpoint = self._endpoint(params["EndpointName"])
        variant = self._variant(endpoint, params.get("VariantName"))
        spec = params["Specification"]
        self._check_specification(spec, variant)
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
        self._spawn(name, self._run_create(name))
        return {"InferenceComponentArn": component_arn}

    async def describe(self, params: dict[str, Any]) -> dict[str, Any]:
        record = self._component(params["InferenceComponentName"])
        return wire.output("DescribeInferenceComponent", self._describe(record))

    async def list_components(self, params: dict[str, Any]) -> dict[str, Any]:
        records = [ComponentRecord.from_resource(r) for r in self.store.all(INFERENCE_COMPONENTS)]
        endpoint, variant = params.get("EndpointNameEquals"), params.get("VariantNameEquals")
        if endpoint:  # endpoint names are unique without regard to case
            records = [r for r in records if r.endpoint_name.lower() == endpoint.lower()]
        if variant:
            records = [r for r in records if r.variant_name == variant]
        page, token = wire.list_page(records, params, name=lambda r: r.name,
                                     created=lambda r: r.created, modified=lambda r: r.modified,
                                     status=lambda r: r.status)
        summaries = [{
            "InferenceComponentName": r.name,
            "InferenceComponentArn": self.component_arn(r.name),
            "EndpointName": r.endpoint_name,
            "EndpointArn": self._arn(KIND_ENDPOINT, r.endpoint_name),
            "VariantName": r.variant_name,
            "InferenceComponentStatus": r.status,
            "CreationTime": r.created,
            "LastModifiedTime": r.modified,
        } for r in page]
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
            endpoint = self._endpoint(record.endpoint_name)
            self._check_specification(spec, self._variant(endpoint, record.variant_name))
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
        return updates.Rollout(plan.to_doc(), started=time.time(), total=record.current_copies,
                               desired_before=record.desired_copies).to_doc()

    async def update_runtime_config(self, params: dict[str, Any]) -> dict[str, Any]:
        record = self._updatable(params["InferenceComponentName"])
        return self._start_update(record, None, params["DesiredRuntimeConfig"]["CopyCount"])

    async def delete(self, params: dict[str, Any]) -> dict[str, Any]:
        record = self._component(params["InferenceComponentName"])
        if record.status == DELETING:
            return {}
        previous = self._tasks.get(record.name.lower())
        if previous is not None:  # a Create or Update still running stops where it is
            previous.cancel()
        record.status, record.modified = DELETING, self._clock()
        self._save(record)
        self._spawn(record.name, self._run_delete(record.name, previous))
        return {}

    # -- what the endpoint operations and the runtime ask of components ----------------------

    def state_of(self, endpoint_name: str, component_name: str) -> ComponentState | None:
        """A component of this endpoint, for a call naming it (``hosting.components``)."""
        record = self._get(component_name)
        if record is None or record.endpoint_name.lower() != endpoint_name.lower():
            return None
        return ComponentState(record.status, record.current_copies, record.variant_name,
                              record.name, record.desired_copies, tuple(record.placement),
                              _reservation(record.specification))

    def on_endpoint(self, endpoint_name: str) -> list[str]:
        """Names of the components on an endpoint, in creation order."""
        records = [ComponentRecord.from_resource(r) for r in self.store.all(INFERENCE_COMPONENTS)]
        return [r.name for r in sorted(records, key=lambda r: r.created)
                if r.endpoint_name.lower() == endpoint_name.lower()]

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
        while True:
            record = self._get(name)
            if record is None or record.status != CREATING:
                return
            endpoint = self.store.get_endpoint(record.endpoint_name)
            if endpoint is None or endpoint.status in (FAILED, DELETING):
                why = ("was deleted" if endpoint is None
                       else f"is {endpoint.status}: {endpoint.failure_reason or 'no reason given'}")
                self._transition(name, CREATING, FAILED,
                                 failure_reason=f"Endpoint {record.endpoint_name} {why}"[:1024])
                return
            if endpoint.status == IN_SERVICE:
                # Creating until its copies are placed and started (as on AWS); copies that
                # cannot start (no model file, a container that exits, a startup timeout) end
                # the Create Failed with the reason, as AWS fails a Create whose copies fail.
                started = self._replace(endpoint, record.variant_name, creating=name).get(name)
                failure: BaseException | None = None
                if started is not None:
                    (failure,) = await asyncio.gather(asyncio.shield(started),
                                                      return_exceptions=True)
                if isinstance(failure, Exception):  # not a cancel (a shutdown)
                    self._transition(name, CREATING, FAILED, current_copies=0, placement=[],
                                     failure_reason=copies_failed(failure))
                else:
                    self._transition(name, CREATING, IN_SERVICE, failure_reason=None)
                endpoint = self.store.get_endpoint(record.endpoint_name)
                if endpoint is not None:
                    self._replace(endpoint, record.variant_name)
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
            failure = await self._start_new_copies(record)
            if failure is not None:
                changes = {"pending_specification": None,
                           "failure_reason": copies_failed(failure, update=True)}
        else:
            await self._apply_copy_count(record)
        self._transition(name, UPDATING, IN_SERVICE, **changes)
        endpoint = self.store.get_endpoint(record.endpoint_name)
        if endpoint is not None:
            self._replace(endpoint, record.variant_name)

    async def _apply_copy_count(self, record: ComponentRecord) -> None:
        """A new copy count (UpdateInferenceComponentRuntimeConfig, an autoscaling action):
        the component stays Updating until its copies have started or stopped, as on AWS, so
        a client that waits for InService (AWS's scale-to-zero notebook after a scale-out from
        zero) finds the copies serving. [U] Copies that fail to start leave it InService with
        those that run (their calls answered with the reason), as a later scale-out does."""
        endpoint = self.store.get_endpoint(record.endpoint_name)
        if endpoint is None:
            return
        change = self._replace(endpoint, record.variant_name, creating=record.name).get(
            record.name)
        if change is not None:
            await asyncio.gather(asyncio.shield(change), return_exceptions=True)

    async def _start_new_copies(self, record: ComponentRecord) -> Exception | None:
        """Start the copies of an update's new specification (as many as are placed); the
        failure, if they cannot start."""
        endpoint = self.store.get_endpoint(record.endpoint_name)
        variant = next((v for v in endpoint.current.variants
                        if v["VariantName"] == record.variant_name), None) if endpoint else None
        spec = record.pending_specification
        if self.apply_copies is None or variant is None or spec is None \
                or not record.current_copies:
            return None
        try:
            target = self._copy_target(dataclasses.replace(record, specification=spec), variant)
            await self.apply_copies(record.endpoint_name, record.name, target)
        except Exception as exc:  # noqa: BLE001 - any start failure fails the update
            return exc
        return None

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
            variant = self._variant(endpoint, current.variant_name)
            outgoing = self._copy_target(current, variant)
            incoming = self._copy_target(
                dataclasses.replace(current, specification=current.pending_specification
                                    or current.specification), variant)
            if self.apply_copies is not None:
                await self.apply_copies(current.endpoint_name, name, RollingTarget.of(
                    incoming, new, outgoing.variant, old))

        rollout = updates.Rollout.from_doc(record.rollout)
        run = updates.RollingUpdate(name, rollout, roll, self.emulated_clock, self.alarms, save)
        try:
            reason = await run.run()
        except Exception as exc:  # noqa: BLE001 - the rollback itself failed [U]: Failed
            log.warning("inference component %s: rollback failed: %s", name, exc)
            self._transition(name, UPDATING, FAILED, pending_specification=None, rollout=None,
                             failure_reason=f"The rollback of the update failed: {exc}"[:1024])
            return
        if reason is None:
            self._transition(name, UPDATING, IN_SERVICE, failure_reason=None, rollout=None,
                             specification=record.pending_specification,
                             pending_specification=None)
        else:  # the old specification stays, and the copy count it had
            self._transition(name, UPDATING, IN_SERVICE, failure_reason=reason, rollout=None,
                             pending_specification=None, desired_copies=rollout.desired_before)
        endpoint = self.store.get_endpoint(record.endpoint_name)
        if endpoint is not None:  # the runtime keeps the side that won, the other stops
            self._replace(endpoint, record.variant_name)

    async def _run_delete(self, name: str, previous: asyncio.Task[None] | None) -> None:
        if previous is not None and not previous.done():
            await asyncio.gather(previous, return_exceptions=True)
        record = self._get(name)
        if record is not None and self.apply_copies is not None:  # every copy drains, stops
            await self.apply_copies(record.endpoint_name, record.name, None)
        self.store.remove(INFERENCE_COMPONENTS, name)
        endpoint = self.store.get_endpoint(record.endpoint_name) if record is not None else None
        if record is not None and endpoint is not None:  # its room goes to pending copies
            self._replace(endpoint, record.variant_name)

    async def restore(self) -> None:
        """After a restart: every stored component as it was; an interrupted Create, Update or
        Delete is carried to its end (call once, after the endpoints are restored)."""
        waited = []
        for resource in self.store.all(INFERENCE_COMPONENTS):
            record = ComponentRecord.from_resource(resource)
            if record.status == CREATING:
                # Waits for its endpoint, which may take a while: not waited for here.
                self._spawn(record.name, self._run_create(record.name))
            elif record.status == UPDATING and record.rollout is not None:
                # A rolling update resumes at its batch; it takes its time: not waited for.
                record.rollout["resumed"] = int(record.rollout.get("resumed") or 0) + 1
                self._save(record)
                self._spawn(record.name, self._run_update(record.name))
            elif record.status == UPDATING:
                waited.append(self._spawn(record.name, self._run_update(record.name)))
            elif record.status == DELETING:
                waited.append(self._spawn(record.name, self._run_delete(record.name, None)))
        await asyncio.gather(*waited, return_exceptions=True)
        # Placement again, as after any change (an endpoint resized when the restart came).
        for endpoint in {r.endpoint_name.lower(): r.endpoint_name for r in map(
                ComponentRecord.from_resource, self.store.all(INFERENCE_COMPONENTS))}.values():
            self.replace_endpoint(endpoint)

    async def aclose(self) -> None:
        tasks = list(self._tasks.values()) + list(self._copy_changes)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- helpers ------------------------------------------------------------------------------

    def replace_endpoint(self, endpoint_name: str) -> None:
        """Place the copies of every variant of an endpoint again (its instances changed)."""
        endpoint = self.store.get_endpoint(endpoint_name)
        if endpoint is not None:
            for variant in endpoint.current.variants:
                self._replace(endpoint, variant["VariantName"])

    def check_endpoint_move(self, endpoint: EndpointRecord,
                            variants: list[dict[str, Any]]) -> None:
        """UpdateEndpoint of an endpoint for components to ``variants``
        (``control.component_endpoint_updates``): refused while a component is in progress, if
        a variant that hosts components is missing, or if a copy no longer fits one instance.
        [U] wording."""
        endpoint_arn = self._arn(KIND_ENDPOINT, endpoint.name)
        by_name = {v["VariantName"]: v for v in variants}
        for resource in self.store.all(INFERENCE_COMPONENTS):
            record = ComponentRecord.from_resource(resource)
            if record.endpoint_name.lower() != endpoint.name.lower():
                continue
            if record.status in _IN_PROGRESS:
                raise wire.validation_error(
                    f'Cannot update endpoint "{endpoint_arn}" while its inference component '
                    f"{record.name} is {record.status}; wait until it is InService.")
            variant = by_name.get(record.variant_name)
            if variant is None:
                raise wire.validation_error(
                    f"The new endpoint config has no production variant {record.variant_name}, "
                    f"which hosts inference component {record.name}; keep the variant or "
                    "delete the component first.")
            self._check_specification(record.specification, variant)

    async def move_copies(self, endpoint_name: str) -> list[str]:
        """Place every component's copies on the endpoint's (new) variants and wait until the
        runtime started and stopped them; returns why a component's copies failed to start."""
        endpoint = self.store.get_endpoint(endpoint_name)
        if endpoint is None:
            return []
        changes: dict[str, asyncio.Task[None]] = {}
        for variant in endpoint.current.variants:
            changes.update({name: task for name, task in self._replace(
                endpoint, variant["VariantName"]).items() if task is not None})
        results = await asyncio.gather(*changes.values(), return_exceptions=True)
        return [f"{name}: {result}" for name, result in zip(changes, results, strict=True)
                if isinstance(result, BaseException)]

    def _replace(self, endpoint: EndpointRecord, variant_name: str,
                 creating: str | None = None) -> dict[str, asyncio.Task[None] | None]:
        """Place the copies of every InService component of a variant again (oldest first),
        and of ``creating`` (a Create's component, whose copies start before it is InService):
        each record gets its copies per instance; what fits nowhere stays pending. Returns the
        runtime's copy changes so started, by component."""
        variant = next((v for v in endpoint.current.variants
                        if v["VariantName"] == variant_name), None)
        if variant is None:
            return {}
        records = sorted(
            (ComponentRecord.from_resource(r) for r in self.store.all(INFERENCE_COMPONENTS)),
            key=lambda r: (r.created, r.name.lower()))
        # A component in a rolling update keeps its room; its copies are the update's.
        records = [r for r in records if (r.status == IN_SERVICE or r.name == creating
                                          or r.rollout is not None)
                   and r.endpoint_name.lower() == endpoint.name.lower()
                   and r.variant_name == variant_name]
        demands = [placement.Demand(r.name, r.desired_copies, _reservation(r.specification),
                                    _strategy(r.specification)) for r in records]
        count = self._managed_instances(endpoint, variant, demands)
        placed = placement.place(variant.get("InstanceType"), count, demands)
        records = [r for r in records if r.rollout is None]
        for record in records:
            counts = placed.get(record.name, [])
            if counts != record.placement or sum(counts) != record.current_copies:
                record.placement, record.current_copies = counts, sum(counts)
                self._save(record)
        return {r.name: self._change_copies(r, variant) for r in records}

    def _change_copies(self, record: ComponentRecord,
                       variant: dict[str, Any]) -> asyncio.Task[None] | None:
        """The runtime starts or stops the component's copies to its placed count, in the
        background (one change at a time per component, in order). [U] A copy that fails to
        start leaves the component's status as it is: calls are answered with the reason."""
        if self.apply_copies is None:
            return None
        try:
            target = self._copy_target(record, variant)
        except LookupError as exc:  # its model deleted since: no new copy can start
            log.warning("inference component %s: %s", record.name, exc)
            return None
        task = asyncio.ensure_future(self.apply_copies(record.endpoint_name, record.name, target))
        self._copy_changes.add(task)
        task.add_done_callback(self._copy_changed)
        return task

    def _copy_changed(self, task: asyncio.Task[None]) -> None:
        self._copy_changes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("inference component copies: %s", task.exception())

    def _copy_target(self, record: ComponentRecord, variant: dict[str, Any]) -> CopyTarget:
        """What each copy serves: the named Model's container, or the component's own
        Container; a copy is a one-instance variant of the component's instance type."""
        spec = record.specification
        if spec.get("ModelName"):
            model = self.store.get(MODELS, spec["ModelName"])
            if model is None:
                raise LookupError(f"model {spec['ModelName']} of inference component "
                                  f"{record.name} no longer exists")
            container = model.doc.get("PrimaryContainer") or (
                model.doc.get("Containers") or [{}])[0]
            model_data = container.get("ModelDataUrl") or (
                (container.get("ModelDataSource") or {}).get("S3DataSource") or {}).get("S3Uri")
        else:
            container = spec.get("Container") or {}
            model_data = container.get("ArtifactUrl")
        startup = spec.get("StartupParameters") or {}
        return CopyTarget(
            VariantSpec(
                name=record.variant_name,
                container=ContainerSpec(
                    model_data=model_data or "", mode="SingleModel",
                    environment=dict(container.get("Environment") or {}),
                    image=container.get("Image")),
                instance_type=variant.get("InstanceType"),
                startup_timeout_s=startup.get("ContainerStartupHealthCheckTimeoutInSeconds")),
            record.current_copies,
            str((variant.get("RoutingConfig") or {}).get("RoutingStrategy")
                or "LEAST_OUTSTANDING_REQUESTS"),
            download_timeout_s=startup.get("ModelDataDownloadTimeoutInSeconds"))

    def _managed_instances(self, endpoint: EndpointRecord, variant: dict[str, Any],
                           demands: list[placement.Demand]) -> int:
        """The variant's instance count; ManagedInstanceScaling adds instances for pending
        copies and releases the ones no copy needs (``hosting.managed_instances``)."""

        count = int(variant.get("InitialInstanceCount") or 0)
        managed = managed_instances.instance_count(variant, demands,
                                                   instance_types.MAX_INSTANCES_PER_ENDPOINT)
        if managed is None or managed == count:
            return count
        log.info("endpoint=%s variant=%s ManagedInstanceScaling: %d -> %d instances",
                 endpoint.name, variant["VariantName"], count, managed)
        variants = [{**v, "InitialInstanceCount": managed}
                    if v["VariantName"] == variant["VariantName"] else v
                    for v in endpoint.current.variants]
        endpoint.current = dataclasses.replace(endpoint.current, variants=variants)
        self.store.save_endpoint(endpoint)
        return managed

    def _start_update(self, record: ComponentRecord, spec: dict[str, Any] | None,
                      copies: int | None) -> dict[str, Any]:
        record.status, record.modified = UPDATING, self._clock()
        record.failure_reason = None
        record.pending_specification = spec
        if copies is not None:
            record.desired_copies = int(copies)
        self._save(record)
        self._spawn(record.name, self._run_update(record.name))
        return {"InferenceComponentArn": self.component_arn(record.name)}

    def _updatable(self, name: str) -> ComponentRecord:
        record = self._component(name)
        if record.status in _IN_PROGRESS:
            raise rules.in_progress(self.component_arn(record.name), record.status)
        if record.status != IN_SERVICE:  # [U] wording
            raise wire.validation_error(
                f'Cannot update inference component "{self.component_arn(record.name)}" in '
                f"status {record.status}: delete it (DeleteInferenceComponent) and create it "
                "again.")
        return record

    def _endpoint(self, name: str) -> EndpointRecord:
        endpoint = self.store.get_endpoint(name)
        if endpoint is None:
            raise wire.not_found(KIND_ENDPOINT, self._arn(KIND_ENDPOINT, name))
        if not endpoint.current.variants or not all(
                rules.is_component_variant(v) for v in endpoint.current.variants):
            raise rules.endpoint_not_for_components()
        if endpoint.status in (FAILED, DELETING):  # [U] wording
            raise wire.validation_error(
                f'Cannot deploy an inference component on endpoint '
                f'"{self._arn(KIND_ENDPOINT, endpoint.name)}" in status {endpoint.status}.')
        return endpoint

    def _variant(self, endpoint: EndpointRecord, name: str | None) -> dict[str, Any]:
        variants = endpoint.current.variants
        if name is None:
            if len(variants) == 1:
                return variants[0]
            raise wire.validation_error(  # [U] wording
                f"Endpoint {endpoint.name} has {len(variants)} production variants "
                f"({', '.join(v['VariantName'] for v in variants)}): name one in VariantName.")
        for variant in variants:
            if variant["VariantName"] == name:
                return variant
        raise wire.validation_error(  # [U] wording
            f'The variant "{name}" does not exist in endpoint '
            f'"{self._arn(KIND_ENDPOINT, endpoint.name)}"; its variants are '
            f"{', '.join(v['VariantName'] for v in variants)}.")

    def _check_specification(self, spec: dict[str, Any], variant: dict[str, Any]) -> None:
        """What needs state: the model exists; one copy fits one instance of the variant's
        type (a copy never spans instances), by the instance-type table's figures."""
        if spec.get("ModelName") and self.store.get(MODELS, spec["ModelName"]) is None:
            raise wire.not_found(KIND_MODEL, self._arn(KIND_MODEL, spec["ModelName"]))
        named = spec.get("InstanceType")
        if named is not None and named != variant.get("InstanceType"):
            # The member "specifies which instance type this specification applies to" (one of
            # the variant's); a variant here has one InstanceType (InstancePools are refused).
            raise wire.validation_error(  # [U] wording
                f"Specification.InstanceType {named} is not the instance type of variant "
                f"{variant['VariantName']} ({variant.get('InstanceType')}); name that one, or "
                "leave InstanceType out.")
        known = instance_types.lookup(variant.get("InstanceType") or "")
        if known is None:  # a type the table does not know: nothing to check it against
            return
        needs = spec["ComputeResourceRequirements"]
        problems = []
        cores = needs.get("NumberOfCpuCoresRequired")
        if cores is not None and cores > known.vcpus:
            problems.append(f"NumberOfCpuCoresRequired {cores:g} > its {known.vcpus} vCPUs")
        devices = needs.get("NumberOfAcceleratorDevicesRequired")
        if devices is not None and devices > known.accelerators:
            problems.append(f"NumberOfAcceleratorDevicesRequired {devices:g} > its "
                            f"{known.accelerators} accelerator devices")
        memory_mib = known.memory_bytes // _MIB
        if needs["MinMemoryRequiredInMb"] > memory_mib:
            problems.append(f"MinMemoryRequiredInMb {needs['MinMemoryRequiredInMb']} > its "
                            f"{memory_mib} MiB of memory")
        if problems:  # [U] wording; the figures are the instance-type table's
            raise wire.validation_error(
                f"One copy of the inference component does not fit on one "
                f"{known.name} instance of variant {variant['VariantName']}: "
                f"{'; '.join(problems)}. Ask for less, or use a larger instance type.")

    def _describe(self, record: ComponentRecord) -> dict[str, Any]:
        spec = record.specification
        summary: dict[str, Any] = {
            key: spec[key] for key in ("ModelName", "StartupParameters",
                                       "ComputeResourceRequirements", "InstanceType",
                                       "DataCacheConfig", "SchedulingConfig") if key in spec}
        container = spec.get("Container")
        if container:
            summary["Container"] = {
                "ArtifactUrl": container.get("ArtifactUrl"),
                "Environment": container.get("Environment"),
                "DeployedImage": {"SpecifiedImage": container["Image"],
                                  "ResolvedImage": container["Image"],
                                  "ResolutionTime": record.created} if container.get("Image")
                else None,
            }
        return {
            "InferenceComponentName": record.name,
            "InferenceComponentArn": self.component_arn(record.name),
            "EndpointName": record.endpoint_name,
            "EndpointArn": self._arn(KIND_ENDPOINT, record.endpoint_name),
            "VariantName": record.variant_name,
            "FailureReason": record.failure_reason,
            "Specification": summary,
            "RuntimeConfig": {"DesiredCopyCount": record.desired_copies,
                              "CurrentCopyCount": record.current_copies,
                              "PlacementStatus": self._placement_status(record)},
            "CreationTime": record.created,
            "LastModifiedTime": record.modified,
            "InferenceComponentStatus": record.status,
            "LastDeploymentConfig": record.last_deployment_config,
        }

    def _placement_status(self, record: ComponentRecord) -> list[dict[str, Any]] | None:
        """The placed copies by instance type (a variant has one); None when none is placed."""
        endpoint = self.store.get_endpoint(record.endpoint_name)
        variant = next((v for v in endpoint.current.variants
                        if v["VariantName"] == record.variant_name), None) if endpoint else None
        if not record.current_copies or variant is None or not variant.get("InstanceType"):
            return None
        return [{"InstanceType": variant["InstanceType"],
                 "CurrentCopyCount": record.current_copies}]

    def _component(self, name: str) -> ComponentRecord:
        record = self._get(name)
        if record is None:
            raise rules.not_found(self.component_arn(name))
        return record

    def _get(self, name: str) -> ComponentRecord | None:
        resource = self.store.get(INFERENCE_COMPONENTS, name)
        return ComponentRecord.from_resource(resource) if resource is not None else None

    def _save(self, record: ComponentRecord) -> None:
        self.store.save(INFERENCE_COMPONENTS, record.to_resource())

    def _transition(self, name: str, expected: str, status: str, **changes: Any) -> None:
        """Move a component to ``status`` unless something (a delete) overtook the task."""
        record = self._get(name)
        if record is None or record.status != expected:
            return
        record.status, record.modified = status, self._clock()
        for key, value in changes.items():
            setattr(record, key, value)
        self._save(record)

    def _spawn(self, name: str, work: Awaitable[None]) -> asyncio.Task[None]:
        key = name.lower()
        task = asyncio.ensure_future(work)
        self._tasks[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._tasks.get(key) is done:
                del self._tasks[key]

        task.add_done_callback(forget)
        return task


def copies_failed(exc: BaseException, update: bool = False) -> str:
    """FailureReason of a Create (or an update) whose copies could not start [U wording: AWS
    does not publish it]; the runtime's reason says what failed (the model file, the
    container, a timeout)."""
    if update:
        return (f"The update failed: the new specification's copies failed to start: {exc}. "
                "The inference component keeps its previous specification.")[:1024]
    return f"The inference component's copies failed to start: {exc}"[:1024]


def _reservation(spec: dict[str, Any]) -> placement.Reservation:
    needs = spec.get("ComputeResourceRequirements") or {}
    return placement.Reservation(
        cpus=float(needs.get("NumberOfCpuCoresRequired") or 0.0),
        accelerators=float(needs.get("NumberOfAcceleratorDevicesRequired") or 0.0),
        memory_mib=int(needs.get("MinMemoryRequiredInMb") or 0))


def _strategy(spec: dict[str, Any]) -> str:
    return str((spec.get("SchedulingConfig") or {}).get("PlacementStrategy") or placement.SPREAD)


def variant_summaries(variants: list[dict[str, Any]], in_service: bool) -> list[dict[str, Any]]:
    """DescribeEndpoint's ProductionVariants of an endpoint for components. Its instances are
    bookkeeping (resources copies will be placed on): counted once the endpoint is InService."""
    summaries = []
    for variant in variants:
        count = int(variant.get("InitialInstanceCount") or 0)
        weight = float(variant.get("InitialVariantWeight", 1.0))
        summary: dict[str, Any] = {
            "VariantName": variant["VariantName"],
            "CurrentWeight": weight,
            "DesiredWeight": weight,
            "CurrentInstanceCount": count if in_service else 0,
            "DesiredInstanceCount": count,
        }
        for member in ("ManagedInstanceScaling", "RoutingConfig"):
            if variant.get(member) is not None:
                summary[member] = variant[member]
        summaries.append(summary)
    return summaries


def resized(endpoint: EndpointRecord, changes: list[dict[str, Any]], max_instances: int,
            endpoint_arn: str) -> list[dict[str, Any]]:
    """The variants of an endpoint for components after UpdateEndpointWeightsAndCapacities
    (their DesiredWeight and DesiredInstanceCount become the variants' own)."""
    variants = [dict(v) for v in endpoint.current.variants]
    by_name = {v["VariantName"]: v for v in variants}
    for change in changes:
        variant = by_name.get(change["VariantName"])
        if variant is None:
            raise wire.validation_error(  # [U] wording, as for endpoints of models
                f'The variant "{change["VariantName"]}" does not exist in endpoint '
                f'"{endpoint_arn}"; its variants are {", ".join(by_name)}.')
        if change.get("DesiredWeight") is not None:
            variant["InitialVariantWeight"] = float(change["DesiredWeight"])
        if change.get("DesiredInstanceCount") is not None:
            count = int(change["DesiredInstanceCount"])
            scaling = variant.get("ManagedInstanceScaling") or {}
            low, high = scaling.get("MinInstanceCount"), scaling.get("MaxInstanceCount")
            if (low is not None and count < low) or (high is not None and count > high):
                raise wire.validation_error(  # [U] wording, the config's rule kept
                    f"DesiredInstanceCount {count} of variant {variant['VariantName']} is "
                    f"outside its ManagedInstanceScaling range ({low if low is not None else 0}"
                    f" to {high if high is not None else 'any'}).")
            variant["InitialInstanceCount"] = count
    if sum(float(v.get("InitialVariantWeight", 1.0)) for v in variants) <= 0:
        raise wire.validation_error(  # [U] wording
            "The sum of the variants' weights must be greater than 0; the endpoint would "
            "receive no traffic.")
    total = sum(int(v.get("InitialInstanceCount") or 0) for v in variants)
    if total > max_instances:
        raise wire.resource_limit_exceeded(
            f"Endpoint {endpoint.name} would have {total} instances; the emulator runs at most "
            f"{max_instances} per endpoint.")
    return variants


def is_component_deployment(variants: list[dict[str, Any]]) -> bool:
    """An endpoint deployment (its config's variants) that hosts inference components."""
    return bool(variants) and all(rules.is_component_variant(v) for v in variants)
