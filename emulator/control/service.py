"""Control-plane behaviour: the endpoint operations and the endpoint lifecycle.

CreateEndpoint answers at once with ``Creating`` and starts the endpoint's runtime (its own
Triton and model manager) in a background task, which ends in ``InService`` or in ``Failed`` with
a ``FailureReason``. UpdateEndpoint goes ``Updating`` -> ``InService`` through the runtime's
``replace`` (start new, swap, stop old), so traffic is never dropped; a failed update rolls back
to the running deployment and reports why in ``FailureReason``, as SageMaker does. DeleteEndpoint
goes ``Deleting`` -> gone. After a restart, ``restore()`` brings recorded endpoints back. The
tasks and their transitions are ``emulator.control.lifecycle``'s, as inference components' are.

The parts beside it: models and endpoint configs (``stored_resources``), an endpoint config
turned into what the runtime runs (``specs``), DescribeEndpoint's rendering
(``endpoint_views``), UpdateEndpoint with a ``DeploymentConfig`` (``guarded_updates``: a green
generation beside the running one, traffic shifted step by step on the emulated clock, rolled
back when an alarm goes into ALARM), inference components (``inference_components``) and
UpdateEndpoint of an endpoint for them (``component_endpoint_updates``).

Wire concerns (validation, shapes, messages) live in ``emulator.contract.control_plane``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from botocore import xform_name

from emulator.clock import Clock
from emulator.contract import control_plane as wire
from emulator.contract import sagemaker_rules
from emulator.contract.control_plane import KIND_ENDPOINT
from emulator.control import component_endpoint_updates as endpoint_updates
from emulator.control import endpoint_views, specs
from emulator.control import inference_components as components
from emulator.control.component_checks import resized
from emulator.control.deployments import TERMINATING, AlarmStates, Progress
from emulator.control.guarded_updates import ActivityListener, GuardedUpdates, deployment_config
from emulator.control.lifecycle import Lifecycle, Resumed, failure_reason
from emulator.control.runtimes import EndpointRuntimes
from emulator.control.state_db import AlreadyExists, ControlStore, Deployment, EndpointRecord
from emulator.control.stored_resources import StoredResources, with_token
from emulator.control.tags import Tags
from emulator.hosting.spec import EndpointSpec
from emulator.instance_types import MAX_INSTANCES_PER_ENDPOINT
from emulator.transitions import TransitionTable

log = logging.getLogger(__name__)

IN_PROGRESS = ("Creating", "Updating", "Deleting", "SystemUpdating", "RollingBack")

class ControlPlaneService:
    def __init__(
        self,
        store: ControlStore,
        registry: EndpointRuntimes,
        region: str = "us-east-1",
        account: str = wire.DEFAULT_ACCOUNT,
        clock: Callable[[], float] = time.time,
        image_problem: Callable[[dict[str, Any]], str | None] | None = None,
        emulated_clock: Clock | None = None,
        alarms: AlarmStates | None = None,
        transitions: TransitionTable | None = None,
    ):
        # Bakes and waits of guarded deployments run on the emulated clock (--clock-scale).
        self.emulated_clock = emulated_clock or Clock()
        # How long Creating, Updating and Deleting take, as a test sets (/_emulator/transitions).
        self.transitions = transitions or TransitionTable(self.emulated_clock)
        # CloudWatch alarms, for AutoRollbackConfiguration (None: no alarm exists).
        self.alarms = alarms
        self.store = store
        self.registry = registry
        self.region = region
        self.account = account
        self._clock = clock
        self._started = clock()
        # Records of endpoints the control plane did not create (--model-data), never stored.
        self._volatile: dict[str, EndpointRecord] = {}
        # Told of each DeleteEndpoint as it is accepted, while the endpoint's runtime still
        # runs (asynchronous inference fails the requests still queued for it).
        self.endpoint_deleted: list[Callable[[str], None]] = []
        self.lifecycle = Lifecycle(self._get, self._save, clock, "endpoint", self.transitions)
        self.resources = StoredResources(store, self.arn, clock, image_problem)
        self.guarded = GuardedUpdates(self.lifecycle, self._save, registry, self.emulated_clock,
                                      alarms, region, clock)
        stored = {**self.resources.handlers(),  # models and endpoint configs
                  **Tags(store, region, account,
                       lambda name: self._unmanaged(name) is not None).handlers()}
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            **stored,
            **{op: getattr(self, xform_name(op)) for op in wire.OPERATIONS - stored.keys()},
        }
        # Inference components: their operations and state live in their module.
        self.components = components.InferenceComponents(store, self.arn, clock,
                                                         self.transitions)
        # Their copies are started and stopped by the runtime (a test double may have none).
        self.components.apply_copies = getattr(registry, "apply_copies", None)
        self.components.emulated_clock, self.components.alarms = self.emulated_clock, alarms
        self._handlers.update(self.components.handlers())

    @property
    def on_activity(self) -> ActivityListener:
        """Told of each step of a guarded deployment (the live page's history)."""
        return self.guarded.on_activity

    @on_activity.setter
    def on_activity(self, listener: ActivityListener) -> None:
        self.guarded.on_activity = listener

    # -- entry point -------------------------------------------------------------------------

    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run one validated operation; raises ``ControlPlaneError`` for the client's mistakes."""
        return await self._handlers[operation](params)

    def arn(self, kind: str, name: str) -> str:
        return wire.arn(kind, name, self.region, self.account)

    # -- endpoints ---------------------------------------------------------------------------

    async def create_endpoint(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointName"]
        endpoint_arn = self.arn(KIND_ENDPOINT, name)
        if self.store.get_endpoint(name) is not None or self._unmanaged(name):
            raise wire.already_exists(KIND_ENDPOINT, endpoint_arn)
        deployment = specs.deployment(self.resources, name, params["EndpointConfigName"],
                                      self._clock).deployment
        now = self._clock()
        record = EndpointRecord(
            name=name,
            created=now,
            modified=now,
            status="Creating",
            current=deployment,
            tags=list(params.get("Tags") or []),
        )
        try:
            self.store.add_endpoint(record)
        except AlreadyExists:
            raise wire.already_exists(KIND_ENDPOINT, endpoint_arn) from None
        self.lifecycle.spawn(name, self._run_create(name, deployment))
        return {"EndpointArn": endpoint_arn}

    async def describe_endpoint(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointName"]
        record = self.store.get_endpoint(name)
        if record is None:
            record = self._unmanaged(name)
        if record is None:
            raise wire.not_found(KIND_ENDPOINT, self.arn(KIND_ENDPOINT, name))
        return wire.output("DescribeEndpoint", endpoint_views.describe(
            record, self.arn(KIND_ENDPOINT, record.name), self.registry))

    async def list_endpoints(self, params: dict[str, Any]) -> dict[str, Any]:
        records = self.store.endpoints()
        known = {r.name.lower() for r in records}
        records += [r for r in self._all_unmanaged() if r.name.lower() not in known]
        page, token = wire.list_page(
            records,
            params,
            name=lambda r: r.name,
            created=lambda r: r.created,
            modified=lambda r: r.modified,
            status=lambda r: r.status,
        )
        summaries = [endpoint_views.summary(r, self.arn(KIND_ENDPOINT, r.name)) for r in page]
        return with_token({"Endpoints": summaries}, token)

    async def update_endpoint(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointName"]
        endpoint_arn = self.arn(KIND_ENDPOINT, name)
        record = self._updatable(self.store.get_endpoint(name), endpoint_arn)
        new, new_spec = specs.deployment(self.resources, record.name,
                                         params["EndpointConfigName"], self._clock)
        endpoint_updates.check_same_kind(record.current, new, endpoint_arn)
        if endpoint_updates.is_for_components(record.current):
            # Components' copies move onto the new config's instances (their own module).
            pending = endpoint_updates.prepare(record, new, params, self.components)
            config = deployment_config(record, params)
            progress = (None if config is None
                        else endpoint_updates.plan(self.guarded, record, pending, config))
            self._start_update(record, pending, config, progress)
            if progress is None:
                self.lifecycle.spawn(name, endpoint_updates.run(
                    record.name, self._get, self.lifecycle.transition, self.components,
                    self._configure_component_metrics))
            else:
                self.lifecycle.spawn(name, endpoint_updates.run_guarded(
                    self.guarded, self.registry, self.components, record.name, pending,
                    progress, specs.metrics_options(pending.metrics_config)))
            return {"EndpointArn": endpoint_arn}
        # An endpoint of models: its running spec read once, the new one built once.
        assert new_spec is not None
        running = EndpointSpec.from_doc(record.current.spec)
        deployment, spec = specs.retained(record, running, new_spec, new, params)
        assert spec is not None
        config = deployment_config(record, params)
        progress = (None if config is None
                    else self.guarded.plan(running, spec, deployment.config_name, config))
        self._start_update(record, deployment, config, progress)
        if progress is None:
            self.lifecycle.spawn(name, self._run_update(name, deployment, spec))
        else:
            self.lifecycle.spawn(name, self.guarded.run(record.name, deployment, progress,
                                                        spec, running))
        return {"EndpointArn": endpoint_arn}

    def _start_update(self, record: EndpointRecord, pending: Deployment,
                      config: dict[str, Any] | None, progress: Progress | None) -> None:
        """The endpoint Updating towards ``pending`` (guarded by ``config``), saved."""
        record.pending = pending
        record.status = "Updating"
        record.failure_reason = None
        record.modified = self._clock()
        record.deployment = None if progress is None else progress.to_doc()
        if config is not None:
            record.last_deployment_config = config
        self.store.save_endpoint(record)

    async def update_endpoint_weights_and_capacities(
            self, params: dict[str, Any]) -> dict[str, Any]:
        """New weights and instance counts, live: Updating -> InService, no request dropped."""
        name = params["EndpointName"]
        endpoint_arn = self.arn(KIND_ENDPOINT, name)
        record = self._updatable(self.store.get_endpoint(name) or self._unmanaged(name),
                                 endpoint_arn)
        asynchronous = bool(record.current.spec.get("async_config"))
        for change in params["DesiredWeightsAndCapacities"]:
            if change.get("DesiredInstanceCount") == 0 and not asynchronous:
                # An asynchronous endpoint scales to zero; a real-time one keeps an instance.
                raise wire.validation_error(sagemaker_rules.zero_instances(change["VariantName"]))
        if specs.is_component_deployment(record.current.variants):
            # Instances for components are bookkeeping: the new counts hold at once, then the
            # components' copies are placed again (pending ones on the added instances).
            variants = resized(record, params["DesiredWeightsAndCapacities"],
                                          MAX_INSTANCES_PER_ENDPOINT, endpoint_arn)
            record.current = dataclasses.replace(record.current, variants=variants)
            record.status, record.failure_reason = "Updating", None
            record.modified = self._clock()
            self._save(record)
            self.lifecycle.spawn(name, self._run_component_resize(record.name))
            return {"EndpointArn": endpoint_arn}
        current = EndpointSpec.from_doc(record.current.spec)
        changes: dict[str, tuple[float | None, int | None]] = {}
        for change in params["DesiredWeightsAndCapacities"]:
            variant = change["VariantName"]
            if current.variant(variant) is None:
                raise wire.validation_error(  # [U] wording
                    f'The variant "{variant}" does not exist in endpoint "{endpoint_arn}"; its '
                    f"variants are {', '.join(v.name for v in current.variants)}.")
            weight = change.get("DesiredWeight")
            count = change.get("DesiredInstanceCount")
            changes[variant] = (None if weight is None else float(weight),
                                None if count is None else int(count))
        desired = current.with_capacities(changes)
        if sum(v.weight for v in desired.variants) <= 0:
            raise wire.validation_error(  # [U] wording
                "The sum of the variants' weights must be greater than 0; the endpoint would "
                "receive no traffic.")
        total = sum(v.instance_count for v in desired.variants)
        if total > MAX_INSTANCES_PER_ENDPOINT:
            raise wire.resource_limit_exceeded(
                f"Endpoint {name} would have {total} instances; the emulator runs at most "
                f"{MAX_INSTANCES_PER_ENDPOINT} per endpoint (each is a Triton process on this "
                "machine).")
        record.desired = desired.to_doc()
        record.status = "Updating"
        record.failure_reason = None
        record.modified = self._clock()
        self._save(record)
        self.lifecycle.spawn(name, self._run_resize(record.name, desired))
        return {"EndpointArn": endpoint_arn}

    @staticmethod
    def _updatable(record: EndpointRecord | None, endpoint_arn: str) -> EndpointRecord:
        """The endpoint, if it exists and is InService: the only state an update starts from."""
        if record is None:
            raise wire.not_found(KIND_ENDPOINT, endpoint_arn)
        if record.status in IN_PROGRESS:
            raise wire.validation_error(f'Cannot update in-progress endpoint "{endpoint_arn}".')
        if record.status != "InService":
            raise wire.validation_error(
                f'Cannot update endpoint "{endpoint_arn}" in status {record.status}: '
                "only DeleteEndpoint is allowed on a failed endpoint."
            )
        return record

    def _save(self, record: EndpointRecord) -> None:
        """Stored, or for the --model-data endpoint (which flags re-create) kept in memory."""
        if self.store.get_endpoint(record.name) is None and self.registry.get(record.name):
            self._volatile[record.name.lower()] = record
        else:
            self.store.save_endpoint(record)

    def _get(self, name: str) -> EndpointRecord | None:
        return self.store.get_endpoint(name) or self._volatile.get(name.lower())

    async def delete_endpoint(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointName"]
        record = self.store.get_endpoint(name)
        if record is None:
            raise wire.not_found(KIND_ENDPOINT, self.arn(KIND_ENDPOINT, name))
        if record.status == "Deleting":
            return {}
        self.components.check_endpoint_deletable(record.name, self.arn(KIND_ENDPOINT, name))
        record.status = "Deleting"
        record.modified = self._clock()
        self.store.save_endpoint(record)
        # A create or update still running finishes first, so its runtime is stopped too; a
        # guarded deployment (it may bake for hours) is cancelled: both generations stop.
        previous = self.lifecycle.running(name)
        if previous is not None and (record.deployment is not None or self.lifecycle.held(name)):
            previous.cancel()  # a deployment, or a transition held before its work began
        self.lifecycle.spawn(name, self._run_delete(record.name, previous))
        for listener in self.endpoint_deleted:
            listener(record.name)
        return {}

    # -- lifecycle tasks ---------------------------------------------------------------------

    async def _start(self, name: str, deployment: Deployment) -> None:
        """The endpoint's runtime: its processes, or for inference components none of its own."""
        if deployment.spec:
            await self.registry.create(EndpointSpec.from_doc(deployment.spec))
        else:
            await self.registry.create_for_components(
                name, self.components.state_of, specs.metrics_options(deployment.metrics_config))

    def _configure_component_metrics(self, name: str, deployment: Deployment) -> None:
        """An endpoint for components publishes as ``deployment``'s MetricsConfig says."""
        self.registry.configure_metrics(name, specs.metrics_options(deployment.metrics_config))

    async def _run_create(self, name: str, deployment: Deployment) -> None:
        try:
            await self._start(name, deployment)
        except Exception as exc:  # noqa: BLE001 - any failure of the runtime ends in Failed
            log.warning("endpoint %s failed to start: %s", name, exc)
            self.lifecycle.transition(name, ("Creating",), "Failed",
                                      failure_reason=failure_reason(exc))
        else:
            self.lifecycle.transition(name, ("Creating",), "InService", failure_reason=None)

    async def _run_update(self, name: str, deployment: Deployment, spec: EndpointSpec) -> None:
        try:
            await self.registry.replace(spec)
        except Exception as exc:  # noqa: BLE001 - any failure keeps the running deployment
            log.warning("endpoint %s failed to update: %s", name, exc)
            # SageMaker rolls back to the running deployment and reports why.
            self.lifecycle.transition(name, ("Updating",), "InService",
                                      failure_reason=failure_reason(exc), pending=None)
        else:
            self.lifecycle.transition(
                name, ("Updating",), "InService", failure_reason=None,
                current=dataclasses.replace(deployment, started=self._clock()), pending=None)

    async def _run_component_resize(self, name: str) -> None:
        self.lifecycle.transition(name, ("Updating",), "InService", failure_reason=None)
        self.components.replace_endpoint(name)

    async def _run_resize(self, name: str, desired: EndpointSpec) -> None:
        try:
            await self.registry.resize(desired)
        except Exception as exc:  # noqa: BLE001 - the running shape stays, with the reason
            log.warning("endpoint %s failed to change capacity: %s", name, exc)
            self.lifecycle.transition(name, ("Updating",), "InService",
                                      failure_reason=failure_reason(exc), desired=None)
        else:
            record = self._get(name)
            if record is not None:
                current = dataclasses.replace(record.current, spec=desired.to_doc())
                self.lifecycle.transition(name, ("Updating",), "InService",
                                          failure_reason=None, current=current, desired=None)

    async def _run_delete(self, name: str, previous: asyncio.Task[None] | None) -> None:
        if previous is not None and not previous.done():
            await asyncio.gather(previous, return_exceptions=True)
        try:
            await self.registry.delete(name)
        except Exception as exc:  # noqa: BLE001 - e.g. a Failed endpoint has no runtime
            log.info("endpoint %s: runtime not deleted (%s)", name, exc)
        self.store.remove_endpoint(name)

    async def _run_restore(self, name: str, deployment: Deployment) -> None:
        try:
            await self._start(name, deployment)
        except Exception as exc:  # noqa: BLE001 - any failure of the runtime ends in Failed
            log.warning("endpoint %s could not be restored: %s", name, exc)
            self.lifecycle.transition(name, None, "Failed", failure_reason=failure_reason(exc))
        else:
            self.lifecycle.transition(name, None, "InService")

    async def restore(self, wait: bool = True) -> None:
        """Bring recorded endpoints back after a restart (call once, at startup).

        InService endpoints restart their runtime (models then load on demand); an interrupted
        Create or Update is carried to its end; an interrupted Delete is finished. A guarded
        deployment resumes at the step it was in (``GuardedUpdates.resume``); one rolling back
        finishes its rollback. ``wait`` waits for the runtimes, not for a resumed deployment's
        bakes. Then the inference components come back (``InferenceComponents.restore``).
        """
        await self.lifecycle.restore(self.store.endpoints(), self._resumed, wait=wait)
        await self.components.restore()

    def _resumed(self, record: EndpointRecord) -> Resumed | None:
        """What a restart does with one stored endpoint (the record saved in its new shape)."""
        name = record.name
        if record.status == "Deleting":
            return Resumed(self._run_delete(name, None))
        if record.status == "Creating":
            return Resumed(self._run_create(name, record.current))
        if record.status == "RollingBack":
            record.pending, record.deployment = None, None
            self.store.save_endpoint(record)
            return Resumed(self.guarded.restore_rollback(name, record.current))
        if record.status == "InService":
            return Resumed(self._run_restore(name, record.current))
        if record.status != "Updating":
            return None
        progress = Progress.from_doc(record.deployment) if record.deployment is not None else None
        if (progress is not None and progress.phase != TERMINATING and record.pending is not None
                and endpoint_updates.is_for_components(record.current)):
            return Resumed(self._interrupted_component_update(record))
        if progress is not None and progress.phase != TERMINATING and record.pending is not None:
            progress.resumed += 1
            record.deployment = progress.to_doc()
            self.store.save_endpoint(record)
            return Resumed(self.guarded.resume(name, record.current, record.pending, progress))
        if progress is not None:
            # Green was the endpoint already: the update is done once it is back.
            record.pending, record.deployment = None, None
            self.store.save_endpoint(record)
            return Resumed(self._run_restore(name, record.current))
        target = record.pending or record.current
        if record.desired is not None:  # a capacity change: come back in its shape
            target = dataclasses.replace(target, spec=record.desired)
        record.current, record.pending, record.desired = target, None, None
        self.store.save_endpoint(record)
        return Resumed(self._run_restore(name, target))

    async def _interrupted_component_update(self, record: EndpointRecord) -> None:
        """[U] A guarded update of an endpoint for components cut by a restart: the endpoint
        comes back on its previous config, the reason as FailureReason."""
        new = record.pending.config_name if record.pending is not None else ""
        record.pending, record.deployment = None, None
        self.store.save_endpoint(record)
        await self._run_restore(record.name, record.current)
        self.lifecycle.transition(
            record.name, ("InService",), "InService", failure_reason=(
                f"The deployment to endpoint config {new} was interrupted by a restart of the "
                "emulator; the endpoint serves its previous config. Update it again."))

    # -- the whole state at once (reset, snapshots: ``emulator.state``) ------------------------

    async def clear(self) -> dict[str, int]:
        """Every lifecycle task cancelled (as at shutdown) and every resource forgotten; how
        many of each there were. The runtimes are the registry's to stop (``clear`` there)."""
        await self.aclose()
        self._volatile.clear()
        return self.store.clear()

    def export(self) -> dict[str, list[dict[str, Any]]]:
        """Every stored resource, by table (``ControlStore.dump``)."""
        return self.store.dump()

    async def load(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        """``export``'s rows stored, then brought back as after a restart (``restore``)."""
        self.store.load(rows)
        await self.restore()

    async def wait_idle(self) -> None:
        """Wait until no lifecycle task is running (tests, shutdown)."""
        await self.lifecycle.wait_idle()

    async def aclose(self) -> None:
        """Cancel lifecycle tasks; the registry stops the runtimes themselves."""
        await self.lifecycle.aclose()
        await self.components.aclose()

    # -- endpoints the control plane did not create ------------------------------------------

    def _unmanaged(self, name: str) -> EndpointRecord | None:
        """An endpoint the runtime serves that the control plane did not create (--model-data)."""
        runtime = self.registry.get(name)
        if runtime is None:
            return None
        if name.lower() in self._volatile:
            return self._volatile[name.lower()]
        return EndpointRecord(
            name=name,
            created=self._started,
            modified=self._started,
            status="InService",
            current=Deployment(config_name="", variants=[], spec=runtime.spec.to_doc()),
        )

    def _all_unmanaged(self) -> list[EndpointRecord]:
        found = (self._unmanaged(n) for n in list(self.registry.names()))
        return [r for r in found if r is not None]
