"""Control-plane behaviour: what exists, and the endpoint lifecycle.

CreateEndpoint answers at once with ``Creating`` and starts the endpoint's runtime (its own
Triton and model manager) in a background task, which ends in ``InService`` or in ``Failed`` with
a ``FailureReason``. UpdateEndpoint goes ``Updating`` -> ``InService`` through the runtime's
``replace`` (start new, swap, stop old), so traffic is never dropped; a failed update rolls back
to the running deployment and reports why in ``FailureReason``, as SageMaker does. DeleteEndpoint
goes ``Deleting`` -> gone. After a restart, ``restore()`` brings recorded endpoints back.

UpdateEndpoint with a ``DeploymentConfig`` (or ``RetainDeploymentConfig``) is a guarded
deployment: a green generation beside the running one, traffic shifted step by step on the
emulated clock, rolled back when an AutoRollbackConfiguration alarm goes into ALARM
(``emulator.control.deployments``; the plan and its rules in ``emulator.hosting.deployment``).

Wire concerns (validation, shapes, messages) live in ``emulator.contract.control_plane``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from botocore import xform_name

from emulator.clock import Clock
from emulator.contract import control_plane as wire
from emulator.contract.control_plane import KIND_CONFIG, KIND_ENDPOINT, KIND_MODEL
from emulator.control import component_endpoint_updates as endpoint_updates
from emulator.control import inference_components as components
from emulator.control.deployments import (
    BAKING,
    STARTING,
    TERMINATING,
    AlarmStates,
    DeploymentRun,
    Generations,
    Progress,
    RolledBack,
)
from emulator.control.state_db import (
    CONFIGS,
    MODELS,
    AlreadyExists,
    ControlStore,
    Deployment,
    EndpointRecord,
    Resource,
)
from emulator.hosting import deployment as guardrails
from emulator.hosting.components import ComponentLookup
from emulator.hosting.spec import (
    DEFAULT_PUBLISH_PERIOD_S,
    SERIAL,
    ContainerSpec,
    EndpointSpec,
    VariantSpec,
)
from emulator.instance_types import MAX_INSTANCES_PER_ENDPOINT

log = logging.getLogger(__name__)

IN_PROGRESS = ("Creating", "Updating", "Deleting", "SystemUpdating", "RollingBack")

# Told of each step of a guarded deployment that the live page keeps in its history:
# (endpoint, kind, text, details), kind one of deployment, rollback, rolled-back, deployed.
ActivityListener = Callable[[str, str, str, dict[str, Any]], None]


def _no_listener(_endpoint: str, _kind: str, _text: str, _details: dict[str, Any]) -> None:
    return None
_FAILURE_REASON_MAX = 1024


class EndpointRuntimes(Generations, Protocol):
    """What the service needs from the endpoint registry (``emulator.hosting.endpoint_registry``),
    guarded deployments' generations (``Generations``) among it."""

    async def create(self, spec: EndpointSpec) -> Any: ...

    async def delete(self, name: str) -> Any: ...

    async def replace(self, spec: EndpointSpec) -> Any: ...

    async def resize(self, spec: EndpointSpec) -> Any: ...

    def get(self, name: str) -> Any: ...

    def names(self) -> list[str]: ...

    async def drop_green(self, name: str) -> None: ...

    async def create_for_components(self, name: str, lookup: ComponentLookup) -> Any: ...



def failure_reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[:_FAILURE_REASON_MAX]


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How one stored resource kind is named on the wire."""

    table: str
    kind: str  # in ARNs and messages
    name_key: str
    arn_key: str
    list_key: str
    operation_noun: str  # DescribeModel, DescribeEndpointConfig
    defaults: dict[str, Any] = dataclasses.field(default_factory=dict)


_MODEL = _Kind(MODELS, KIND_MODEL, "ModelName", "ModelArn", "Models", "Model",
               {"EnableNetworkIsolation": False})
_CONFIG = _Kind(CONFIGS, KIND_CONFIG, "EndpointConfigName", "EndpointConfigArn",
                "EndpointConfigs", "EndpointConfig")


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
    ):
        # Bakes and waits of guarded deployments run on the emulated clock (--clock-scale).
        self.emulated_clock = emulated_clock or Clock()
        # CloudWatch alarms, for AutoRollbackConfiguration (None: no alarm exists).
        self.alarms = alarms
        # The live page's history of deployments (the composition root sets it).
        self.on_activity: ActivityListener = _no_listener
        self.store = store
        # Why a container's Image cannot run here (the launcher decides), checked at CreateModel.
        self._image_problem = image_problem
        self.registry = registry
        self.region = region
        self.account = account
        self._clock = clock
        self._started = clock()
        # One background task per endpoint at most (keyed by lowercased name).
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Records of endpoints the control plane did not create (--model-data), never stored.
        self._volatile: dict[str, EndpointRecord] = {}
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            op: getattr(self, xform_name(op)) for op in wire.OPERATIONS
        }
        # Inference components: their operations and state live in their module.
        self.components = components.InferenceComponents(store, self.arn, clock)
        # Their copies are started and stopped by the runtime (a test double may have none).
        self.components.apply_copies = getattr(registry, "apply_copies", None)
        self.components.emulated_clock, self.components.alarms = self.emulated_clock, alarms
        self._handlers.update(self.components.handlers())

    # -- entry point -------------------------------------------------------------------------

    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run one validated operation; raises ``ControlPlaneError`` for the client's mistakes."""
        return await self._handlers[operation](params)

    def arn(self, kind: str, name: str) -> str:
        return wire.arn(kind, name, self.region, self.account)

    # -- models and endpoint configs: stored documents, the same four operations -----------

    def _create_stored(self, kind: _Kind, params: dict[str, Any]) -> dict[str, Any]:
        name = params[kind.name_key]
        try:
            self.store.add(kind.table, Resource(name, self._clock(), params))
        except AlreadyExists:
            raise wire.already_exists(kind.kind, self.arn(kind.kind, name)) from None
        return {kind.arn_key: self.arn(kind.kind, name)}

    def _describe_stored(self, kind: _Kind, params: dict[str, Any]) -> dict[str, Any]:
        resource = self._resource(kind.table, kind.kind, params[kind.name_key])
        doc = {
            **kind.defaults,
            **resource.doc,
            kind.name_key: resource.name,
            kind.arn_key: self.arn(kind.kind, resource.name),
            "CreationTime": resource.created,
        }
        return wire.output(f"Describe{kind.operation_noun}", doc)

    def _list_stored(self, kind: _Kind, params: dict[str, Any]) -> dict[str, Any]:
        page, token = wire.list_page(
            self.store.all(kind.table), params, name=lambda r: r.name, created=lambda r: r.created
        )
        items = [
            {
                kind.name_key: r.name,
                kind.arn_key: self.arn(kind.kind, r.name),
                "CreationTime": r.created,
            }
            for r in page
        ]
        return _with_token({kind.list_key: items}, token)

    def _delete_stored(self, kind: _Kind, params: dict[str, Any]) -> dict[str, Any]:
        name = params[kind.name_key]
        if not self.store.remove(kind.table, name):
            raise wire.not_found(kind.kind, self.arn(kind.kind, name))
        return {}

    async def create_model(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.store.get(MODELS, params["ModelName"]) is None and self._image_problem:
            containers = ([params["PrimaryContainer"]] if params.get("PrimaryContainer")
                          else list(params.get("Containers") or []))
            for container in containers:
                problem = await asyncio.to_thread(self._image_problem, container)
                if problem:
                    raise wire.validation_error(problem)
        return self._create_stored(_MODEL, params)

    async def describe_model(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._describe_stored(_MODEL, params)

    async def list_models(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._list_stored(_MODEL, params)

    async def delete_model(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._delete_stored(_MODEL, params)

    async def create_endpoint_config(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointConfigName"]
        if self.store.get(CONFIGS, name) is not None:  # named before any missing model
            raise wire.already_exists(KIND_CONFIG, self.arn(KIND_CONFIG, name))
        for variant in params["ProductionVariants"]:
            if variant.get("ModelName"):  # a variant for inference components names none
                self._resource(MODELS, KIND_MODEL, variant["ModelName"])
        return self._create_stored(_CONFIG, params)

    async def describe_endpoint_config(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._describe_stored(_CONFIG, params)

    async def list_endpoint_configs(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._list_stored(_CONFIG, params)

    async def delete_endpoint_config(self, params: dict[str, Any]) -> dict[str, Any]:
        # Allowed while an endpoint uses it: endpoints keep a snapshot of their config.
        return self._delete_stored(_CONFIG, params)

    # -- endpoints ---------------------------------------------------------------------------

    async def create_endpoint(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointName"]
        endpoint_arn = self.arn(KIND_ENDPOINT, name)
        if self.store.get_endpoint(name) is not None or self._unmanaged(name):
            raise wire.already_exists(KIND_ENDPOINT, endpoint_arn)
        deployment = self._deployment(name, params["EndpointConfigName"])
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
        self._spawn(name, self._run_create(name, deployment))
        return {"EndpointArn": endpoint_arn}

    async def describe_endpoint(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointName"]
        record = self.store.get_endpoint(name)
        if record is None:
            record = self._unmanaged(name)
        if record is None:
            raise wire.not_found(KIND_ENDPOINT, self.arn(KIND_ENDPOINT, name))
        return wire.output("DescribeEndpoint", self._describe(record))

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
        summaries = [
            {
                "EndpointName": r.name,
                "EndpointArn": self.arn(KIND_ENDPOINT, r.name),
                "CreationTime": r.created,
                "LastModifiedTime": r.modified,
                "EndpointStatus": r.status,
            }
            for r in page
        ]
        return _with_token({"Endpoints": summaries}, token)

    async def update_endpoint(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointName"]
        endpoint_arn = self.arn(KIND_ENDPOINT, name)
        record = self._updatable(self.store.get_endpoint(name), endpoint_arn)
        new = self._deployment(record.name, params["EndpointConfigName"])
        endpoint_updates.check_same_kind(record.current, new, endpoint_arn)
        if endpoint_updates.is_for_components(record.current):
            # Components' copies move onto the new config's instances (their own module).
            record.pending = endpoint_updates.prepare(record, new, params, self.components)
            record.status, record.failure_reason = "Updating", None
            record.modified = self._clock()
            self.store.save_endpoint(record)
            self._spawn(name, endpoint_updates.run(record.name, self._get, self._transition,
                                                   self.components))
            return {"EndpointArn": endpoint_arn}
        deployment = self._retained(record, new, params)
        config = self._deployment_config(record, params)
        progress = None if config is None else self._guarded(record, deployment, config)
        record.pending = deployment
        record.status = "Updating"
        record.failure_reason = None
        record.modified = self._clock()
        record.deployment = None if progress is None else progress.to_doc()
        if config is not None:
            record.last_deployment_config = config
        self.store.save_endpoint(record)
        if progress is None:
            self._spawn(name, self._run_update(name, deployment))
        else:
            self._spawn(name, self._run_guarded(record.name, deployment, progress))
        return {"EndpointArn": endpoint_arn}

    # -- guarded deployments: what UpdateEndpoint checks before anything changes ------------

    @staticmethod
    def _retained(record: EndpointRecord, deployment: Deployment,
                  params: dict[str, Any]) -> Deployment:
        """RetainAllVariantProperties: the running variants' instance counts and weights carry
        over to the new config's variants of the same name, except those excluded."""
        excluded = {p["VariantPropertyType"]
                    for p in params.get("ExcludeRetainedVariantProperties") or []}
        if not params.get("RetainAllVariantProperties"):
            if excluded:  # [U] wording
                raise wire.validation_error(
                    "ExcludeRetainedVariantProperties applies only when "
                    "RetainAllVariantProperties is true.")
            return deployment
        current = EndpointSpec.from_doc(record.desired or record.current.spec)
        changes: dict[str, tuple[float | None, int | None]] = {}
        for variant in EndpointSpec.from_doc(deployment.spec).variants:
            running = current.variant(variant.name)
            if running is not None:
                changes[variant.name] = (
                    None if "DesiredWeight" in excluded else running.weight,
                    None if "DesiredInstanceCount" in excluded else running.instance_count)
        # DataCaptureConfig: the emulator captures no data, so there is nothing to retain.
        spec = EndpointSpec.from_doc(deployment.spec).with_capacities(changes)
        return dataclasses.replace(deployment, spec=spec.to_doc())

    @staticmethod
    def _deployment_config(record: EndpointRecord,
                           params: dict[str, Any]) -> dict[str, Any] | None:
        given = params.get("DeploymentConfig")
        if params.get("RetainDeploymentConfig"):
            if given is not None:  # [U] wording
                raise wire.validation_error(
                    "Specify either DeploymentConfig or RetainDeploymentConfig, not both.")
            # [U] No earlier DeploymentConfig: the default update (blue/green, all at once).
            return record.last_deployment_config
        return given

    def _guarded(self, record: EndpointRecord, deployment: Deployment,
                 config: dict[str, Any]) -> Progress:
        """The plan of a guarded update, or SageMaker's error for what it refuses."""
        running = EndpointSpec.from_doc(record.current.spec)
        new = EndpointSpec.from_doc(deployment.spec)
        old_names = sorted(v.name for v in running.variants)
        new_names = sorted(v.name for v in new.variants)
        if old_names != new_names:  # documented exclusion; [U] wording
            raise wire.validation_error(
                f"A deployment with DeploymentConfig needs the new endpoint configuration to "
                f"have the same variant names as the running one ({', '.join(old_names)}); "
                f"{deployment.config_name} has {', '.join(new_names)}.")
        try:
            plan = guardrails.plan(config, [v.instance_count for v in new.variants])
        except guardrails.PlanError as exc:
            raise wire.validation_error(str(exc)) from None
        missing = [a for a in plan.alarms if self.alarms is None or not self.alarms.exists(a)]
        if missing:  # [U] wording
            raise wire.validation_error(
                f"AutoRollbackConfiguration names CloudWatch alarm(s) that do not exist in "
                f"{self.region}: {', '.join(missing)}. Create them with PutMetricAlarm first.")
        if any((v.instance_type or "").startswith("ml.inf1.") for v in new.variants):
            # Documented exclusion: Inf1 endpoints fall back to blue/green all at once with no
            # final baking period.
            plan = dataclasses.replace(plan, kind=guardrails.BLUE_GREEN,
                                       routing=guardrails.ALL_AT_ONCE, shares=(1.0,),
                                       bake_s=0.0, termination_wait_s=0.0)
        return Progress(plan=plan.to_doc(), started=self._clock())

    async def update_endpoint_weights_and_capacities(
            self, params: dict[str, Any]) -> dict[str, Any]:
        """New weights and instance counts, live: Updating -> InService, no request dropped."""
        name = params["EndpointName"]
        endpoint_arn = self.arn(KIND_ENDPOINT, name)
        record = self._updatable(self.store.get_endpoint(name) or self._unmanaged(name),
                                 endpoint_arn)
        if components.is_component_deployment(record.current.variants):
            # Instances for components are bookkeeping: the new counts hold at once, then the
            # components' copies are placed again (pending ones on the added instances).
            variants = components.resized(record, params["DesiredWeightsAndCapacities"],
                                          MAX_INSTANCES_PER_ENDPOINT, endpoint_arn)
            record.current = dataclasses.replace(record.current, variants=variants)
            record.status, record.failure_reason = "Updating", None
            record.modified = self._clock()
            self._save(record)
            self._spawn(name, self._run_component_resize(record.name))
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
        self._spawn(name, self._run_resize(record.name, desired))
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
        previous = self._tasks.get(name.lower())
        if previous is not None and record.deployment is not None:
            previous.cancel()
        self._spawn(name, self._run_delete(record.name, previous), replace=True)
        return {}

    # -- lifecycle tasks ---------------------------------------------------------------------

    async def _run_create(self, name: str, deployment: Deployment) -> None:
        try:
            if deployment.spec:
                await self.registry.create(EndpointSpec.from_doc(deployment.spec))
            else:  # an endpoint for inference components: no process of its own
                await self.registry.create_for_components(name, self.components.state_of)
        except Exception as exc:  # noqa: BLE001 - any failure of the runtime ends in Failed
            log.warning("endpoint %s failed to start: %s", name, exc)
            self._transition(name, ("Creating",), "Failed", failure_reason=failure_reason(exc))
        else:
            self._transition(name, ("Creating",), "InService", failure_reason=None)

    async def _run_update(self, name: str, deployment: Deployment) -> None:
        try:
            await self.registry.replace(EndpointSpec.from_doc(deployment.spec))
        except Exception as exc:  # noqa: BLE001
            log.warning("endpoint %s failed to update: %s", name, exc)
            # SageMaker rolls back to the running deployment and reports why.
            self._transition(
                name,
                ("Updating",),
                "InService",
                failure_reason=failure_reason(exc),
                pending=None,
            )
        else:
            self._transition(
                name,
                ("Updating",),
                "InService",
                failure_reason=None,
                current=dataclasses.replace(deployment, started=self._clock()),
                pending=None,
            )

    async def _run_guarded(self, name: str, deployment: Deployment, progress: Progress) -> None:
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

        record = self._get(name)
        blue_count = (EndpointSpec.from_doc(record.current.spec).variants[0].instance_count
                      if record is not None and record.current.spec else 1)
        run = DeploymentRun(name, EndpointSpec.from_doc(deployment.spec), progress,
                            self.registry, self.emulated_clock, self.alarms, save, promoted,
                            config_name=deployment.config_name, blue_count=blue_count)
        rolling = run.plan.rolling
        new = deployment.config_name
        plan = {"NewConfig": new, "Kind": run.plan.kind, "Routing": run.plan.routing,
                "Steps": run.plan.steps}
        self.on_activity(name, "deployment", (
            f"deployment to {new} {'resumed' if progress.resumed else 'started'}: "
            f"{run.plan.routing.lower().replace('_', ' ')}, {run.plan.steps} step(s)"), plan)
        try:
            await run.run()
        except RolledBack as exc:
            await self._roll_back(name, str(exc), rolling, new, progress.alarm)
            return
        except Exception as exc:  # noqa: BLE001 - green never took traffic, or blue is gone
            log.warning("endpoint %s: deployment failed: %s", name, exc)
            if progress.phase == TERMINATING:  # green serves already: the update is done
                self._transition(name, ("Updating",), "InService", failure_reason=None,
                                 pending=None, deployment=None)
                self.on_activity(name, "deployed", f"deployment to {new} ended: {new} serves",
                                 plan)
            else:
                await self._roll_back(name, failure_reason(exc), rolling, new)
            return
        self._transition(name, ("Updating",), "InService", failure_reason=None, pending=None,
                         deployment=None)
        self.on_activity(name, "deployed", f"deployment to {new} ended: {new} serves", plan)

    async def _roll_back(self, name: str, reason: str, rolling: bool = False,
                         new_config: str = "", alarm: str | None = None) -> None:
        """Every new call back to blue at once, then green drained and stopped. A rolling
        update first brings blue back to its size (it gave up instances batch by batch)."""
        log.warning("endpoint %s: rolling back: %s", name, reason)
        self._transition(name, ("Updating",), "RollingBack", failure_reason=reason)
        record = self._get(name)
        old = record.current.config_name if record is not None else ""
        details = {"NewConfig": new_config, "OldConfig": old, "Alarm": alarm, "Reason": reason}
        self.on_activity(name, "rollback", f"rolling back the deployment to {new_config}: "
                         f"{reason}", details)
        try:
            if rolling and record is not None and self.registry.get(name) is not None:
                await self.registry.resize(EndpointSpec.from_doc(record.current.spec))
            await self.registry.drop_green(name)
        except Exception as exc:  # noqa: BLE001
            self._transition(name, ("RollingBack",), "UpdateRollbackFailed",
                             failure_reason=failure_reason(exc))
            self.on_activity(name, "rollback-failed", f"the rollback to {old} failed: {exc}",
                             details)
            return
        self._transition(name, ("RollingBack",), "InService", failure_reason=reason,
                         pending=None, deployment=None)
        self.on_activity(name, "rolled-back", f"rolled back: {old} serves again, the "
                         f"deployment to {new_config} ended", details)

    async def _run_resume(self, name: str, blue: Deployment, green: Deployment,
                          progress: Progress) -> None:
        """After a restart: blue comes back, then the deployment goes on from its step."""
        try:
            await self.registry.create(EndpointSpec.from_doc(blue.spec))
        except Exception as exc:  # noqa: BLE001
            log.warning("endpoint %s could not be restored: %s", name, exc)
            self._transition(name, None, "Failed", failure_reason=failure_reason(exc),
                             pending=None, deployment=None)
            return
        log.warning("endpoint %s: the deployment to %s was interrupted by a restart in step "
                    "%d of %d; it resumes there (the new fleet starts again; the step's bake "
                    "starts again in full)", name, green.config_name, progress.step + 1,
                    len(progress.plan["shares"]))
        self._spawn(name, self._run_guarded(name, green, progress))

    async def _run_restore_rollback(self, name: str, blue: Deployment) -> None:
        """After a restart during a rollback: blue comes back, the rollback is done."""
        try:
            await self.registry.create(EndpointSpec.from_doc(blue.spec))
        except Exception as exc:  # noqa: BLE001
            self._transition(name, None, "UpdateRollbackFailed",
                             failure_reason=failure_reason(exc))
        else:
            self._transition(name, None, "InService")

    async def _run_component_resize(self, name: str) -> None:
        self._transition(name, ("Updating",), "InService", failure_reason=None)
        self.components.replace_endpoint(name)

    async def _run_resize(self, name: str, desired: EndpointSpec) -> None:
        try:
            await self.registry.resize(desired)
        except Exception as exc:  # noqa: BLE001 - the running shape stays, with the reason
            log.warning("endpoint %s failed to change capacity: %s", name, exc)
            self._transition(name, ("Updating",), "InService",
                             failure_reason=failure_reason(exc), desired=None)
        else:
            record = self._get(name)
            if record is not None:
                current = dataclasses.replace(record.current, spec=desired.to_doc())
                self._transition(name, ("Updating",), "InService", failure_reason=None,
                                 current=current, desired=None)

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
            if deployment.spec:
                await self.registry.create(EndpointSpec.from_doc(deployment.spec))
            else:  # an endpoint for inference components: no process of its own
                await self.registry.create_for_components(name, self.components.state_of)
        except Exception as exc:  # noqa: BLE001
            log.warning("endpoint %s could not be restored: %s", name, exc)
            self._transition(name, None, "Failed", failure_reason=failure_reason(exc))
        else:
            self._transition(name, None, "InService")

    def _transition(
        self, name: str, expected: tuple[str, ...] | None, status: str, **changes: Any
    ) -> None:
        """Move an endpoint to ``status`` unless something else (a delete) overtook the task."""
        record = self._get(name)
        if record is None or (expected is not None and record.status not in expected):
            return
        if record.status == "Deleting":
            return
        record.status = status
        record.modified = self._clock()
        for key, value in changes.items():
            setattr(record, key, value)
        self._save(record)

    def _spawn(self, name: str, work: Awaitable[None],
               replace: bool = False) -> asyncio.Future[None]:
        key = name.lower()
        task = asyncio.ensure_future(work)
        self._tasks[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._tasks.get(key) is done:
                del self._tasks[key]

        task.add_done_callback(forget)
        return task

    async def restore(self, wait: bool = True) -> None:
        """Bring recorded endpoints back after a restart (call once, at startup).

        InService endpoints restart their runtime (models then load on demand); an interrupted
        Create or Update is carried to its end; an interrupted Delete is finished. A guarded
        deployment resumes at the step it was in (``_run_resume``); one rolling back finishes
        its rollback. ``wait`` waits for the runtimes, not for a resumed deployment's bakes.
        """
        started: list[asyncio.Future[None]] = []
        for record in self.store.endpoints():
            progress = (Progress.from_doc(record.deployment)
                        if record.deployment is not None else None)
            if record.status == "Deleting":
                started.append(self._spawn(record.name, self._run_delete(record.name, None)))
            elif record.status == "Creating":
                started.append(self._spawn(record.name,
                                           self._run_create(record.name, record.current)))
            elif record.status == "RollingBack":
                record.pending, record.deployment = None, None
                self.store.save_endpoint(record)
                started.append(self._spawn(record.name,
                                           self._run_restore_rollback(record.name,
                                                                      record.current)))
            elif record.status == "Updating" and progress is not None:
                if progress.phase == TERMINATING or record.pending is None:
                    # Green was the endpoint already: the update is done once it is back.
                    record.pending, record.deployment = None, None
                    self.store.save_endpoint(record)
                    started.append(self._spawn(record.name,
                                               self._run_restore(record.name, record.current)))
                    continue
                progress.resumed += 1
                record.deployment = progress.to_doc()
                self.store.save_endpoint(record)
                started.append(self._spawn(record.name, self._run_resume(
                    record.name, record.current, record.pending, progress)))
            elif record.status == "Updating":
                target = record.pending or record.current
                if record.desired is not None:  # a capacity change: come back in its shape
                    target = dataclasses.replace(target, spec=record.desired)
                record.current, record.pending, record.desired = target, None, None
                self.store.save_endpoint(record)
                started.append(self._spawn(record.name, self._run_restore(record.name, target)))
            elif record.status == "InService":
                started.append(self._spawn(record.name,
                                           self._run_restore(record.name, record.current)))
        if wait:
            await asyncio.gather(*started, return_exceptions=True)
        await self.components.restore()

    async def wait_idle(self) -> None:
        """Wait until no lifecycle task is running (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel lifecycle tasks; the registry stops the runtimes themselves."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.components.aclose()

    # -- helpers -----------------------------------------------------------------------------

    def _resource(self, table: str, kind: str, name: str) -> Resource:
        resource = self.store.get(table, name)
        if resource is None:
            raise wire.not_found(kind, self.arn(kind, name))
        return resource

    def _deployment(self, endpoint_name: str, config_name: str) -> Deployment:
        """Resolve a config and its models into what the runtime needs, at call time."""
        config = self._resource(CONFIGS, KIND_CONFIG, config_name)
        variants = config.doc["ProductionVariants"]
        if components.is_component_deployment(variants):
            # Instances for inference components: bookkeeping, no runtime spec; the
            # same bound, as their copies will be processes on this machine.
            count = sum(int(v.get("InitialInstanceCount") or 0) for v in variants)
            if count > MAX_INSTANCES_PER_ENDPOINT:
                raise wire.resource_limit_exceeded(
                    f"Endpoint config {config.name} asks for {count} instances; the emulator "
                    f"runs at most {MAX_INSTANCES_PER_ENDPOINT} per endpoint.")
            return Deployment(config_name=config.name, variants=variants, spec={},
                              started=self._clock())
        specs = tuple(self._variant_spec(v) for v in variants)
        total = sum(v.instance_count for v in specs)
        if total > MAX_INSTANCES_PER_ENDPOINT:
            raise wire.resource_limit_exceeded(
                f"Endpoint config {config.name} asks for {total} instances; the emulator runs at "
                f"most {MAX_INSTANCES_PER_ENDPOINT} per endpoint (each is a Triton process on "
                "this machine).")
        metrics = config.doc.get("MetricsConfig") or {}
        spec = EndpointSpec(
            endpoint_name, specs, config_name=config.name,
            enhanced_metrics=bool(metrics.get("EnableEnhancedMetrics", False)),
            # AWS: "The default value for new endpoint configurations is True."
            detailed_observability=bool(metrics.get("EnableDetailedObservability", True)),
            publish_period_s=int(metrics.get("MetricPublishFrequencyInSeconds",
                                             DEFAULT_PUBLISH_PERIOD_S)))
        return Deployment(
            config_name=config.name,
            variants=variants,
            spec=spec.to_doc(),
            images=[c.image for v in specs for c in v.containers],
            started=self._clock(),
        )

    def _variant_spec(self, variant: dict[str, Any]) -> VariantSpec:
        model = self._resource(MODELS, KIND_MODEL, variant["ModelName"])
        containers = (
            [model.doc["PrimaryContainer"]]
            if model.doc.get("PrimaryContainer")
            else list(model.doc.get("Containers") or [])
        )
        if not containers:
            raise wire.validation_error(
                f'Model "{self.arn(KIND_MODEL, model.name)}" has no container.')
        several = len(containers) > 1
        specs = [self._container_spec(model.name, c, required=not several) for c in containers]
        mode = (model.doc.get("InferenceExecutionConfig") or {}).get("Mode")
        return VariantSpec(
            name=variant["VariantName"],
            container=specs[0],
            more_containers=tuple(specs[1:]),
            # SageMaker's default for a multi-container model is Serial.
            execution_mode=mode or (SERIAL if several else None),
            instance_count=int(variant.get("InitialInstanceCount") or 1),
            weight=float(variant.get("InitialVariantWeight", 1.0)),
            instance_type=variant.get("InstanceType"),
            startup_timeout_s=variant.get("ContainerStartupHealthCheckTimeoutInSeconds"),
        )

    def _container_spec(self, model_name: str, container: dict[str, Any],
                        required: bool) -> ContainerSpec:
        """One ContainerDefinition; model data may be absent from a pipeline's container (a
        featurizer with its code in the image), never from a single container's."""
        model_data = container.get("ModelDataUrl") or (
            (container.get("ModelDataSource") or {}).get("S3DataSource") or {}
        ).get("S3Uri")
        if not model_data and required:
            raise wire.validation_error(
                f'Model "{self.arn(KIND_MODEL, model_name)}" has no ModelDataUrl; the emulator '
                "needs one (an S3 prefix for MultiModel, a tarball for SingleModel)."
            )
        cache = (container.get("MultiModelConfig") or {}).get("ModelCacheSetting", "Enabled")
        return ContainerSpec(
            model_data=model_data or "",
            mode=container.get("Mode", "SingleModel"),
            environment=dict(container.get("Environment") or {}),
            image=container.get("Image"),
            model_cache_enabled=cache != "Disabled",
            hostname=container.get("ContainerHostname"),
        )

    def _describe(self, record: EndpointRecord) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "EndpointName": record.name,
            "EndpointArn": self.arn(KIND_ENDPOINT, record.name),
            "EndpointConfigName": record.current.config_name or None,
            "EndpointStatus": record.status,
            "FailureReason": record.failure_reason,
            "CreationTime": record.created,
            "LastModifiedTime": record.modified,
        }
        progress = Progress.from_doc(record.deployment) if record.deployment else None
        # During a guarded deployment, the share of the calls the new fleet takes now.
        share = self.registry.traffic_share(record.name) if progress is not None else 0.0
        if record.current.spec:
            spec = EndpointSpec.from_doc(record.current.spec)
            desired = EndpointSpec.from_doc(record.desired) if record.desired else spec
            runtime = self.registry.get(record.name)
            doc["ProductionVariants"] = [
                _variant_summary(v, desired.variant(v.name) or v, runtime, record.current,
                                 share=1.0 - share)
                for v in spec.variants
            ]
        elif components.is_component_deployment(record.current.variants):
            doc["ProductionVariants"] = components.variant_summaries(
                record.current.variants, in_service=record.status in ("InService", "Updating"))
        if record.pending is not None and not record.pending.spec:  # for components
            doc["PendingDeploymentSummary"] = endpoint_updates.pending_summary(record.pending)
        elif record.pending is not None:
            pending = EndpointSpec.from_doc(record.pending.spec)
            green = self.registry.green(record.name) if progress is not None else None
            doc["PendingDeploymentSummary"] = {
                "EndpointConfigName": record.pending.config_name,
                "ProductionVariants": [
                    _pending_summary(v, record.pending, green, share, progress)
                    for v in pending.variants
                ],
                "StartTime": record.pending.started,
            }
        if record.last_deployment_config is not None:
            doc["LastDeploymentConfig"] = record.last_deployment_config
        return doc

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


def _variant_summary(variant: VariantSpec, desired: VariantSpec, runtime: Any,
                     deployment: Deployment, share: float = 1.0) -> dict[str, Any]:
    """CurrentInstanceCount is what serves now (0 until the endpoint runs); Desired* is the
    target of an update in progress, else the same as Current*. CurrentWeight is the weight
    times the ``share`` of the calls this fleet takes (below 1 during a deployment) [U]."""
    serving = 0
    if runtime is not None:
        running = runtime.variant(variant.name)
        serving = len(running.serving()) if running is not None else 0
    summary: dict[str, Any] = {
        "VariantName": variant.name,
        "CurrentWeight": variant.weight * share,
        "DesiredWeight": desired.weight,
        "CurrentInstanceCount": serving,
        "DesiredInstanceCount": desired.instance_count,
    }
    images = [c.image for c in variant.containers if c.image]
    if images:  # one entry per container, in order
        summary["DeployedImages"] = [{"SpecifiedImage": image, "ResolvedImage": image,
                                      "ResolutionTime": deployment.started} for image in images]
    return summary


def _pending_summary(variant: VariantSpec, deployment: Deployment, green: Any = None,
                     share: float = 0.0, progress: Progress | None = None) -> dict[str, Any]:
    """The new fleet: Creating while it starts, then (a guarded deployment) Baking with the
    step, its share of the traffic and the bake's length in StatusMessage [U]."""
    summary = _variant_summary(variant, variant, green, deployment, share=share)
    status: dict[str, Any] = {"Status": "Creating", "StartTime": deployment.started}
    if progress is not None and progress.phase == BAKING:
        steps = len(progress.plan["shares"])
        message = (f"Step {progress.step + 1} of {steps}: {share:.0%} of traffic on the new "
                   f"fleet, baking for {progress.plan['bake_s']:.0f} seconds")
        if progress.resumed:
            message += " (resumed after an emulator restart; the bake started again)"
        status = {"Status": "Baking", "StatusMessage": message,
                  "StartTime": progress.step_started}
    elif progress is not None and progress.phase == STARTING and progress.resumed:
        status["StatusMessage"] = ("Starting again after an emulator restart; the deployment "
                                   f"resumes at step {progress.step + 1}")
    summary["VariantStatus"] = [status]
    if variant.instance_type:
        summary["InstanceType"] = variant.instance_type
    return summary


def _with_token(body: dict[str, Any], token: str | None) -> dict[str, Any]:
    if token:
        body["NextToken"] = token
    return body
