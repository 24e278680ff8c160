"""Control-plane behaviour: what exists, and the endpoint lifecycle.

CreateEndpoint answers at once with ``Creating`` and starts the endpoint's runtime (its own
Triton and model manager) in a background task, which ends in ``InService`` or in ``Failed`` with
a ``FailureReason``. UpdateEndpoint goes ``Updating`` -> ``InService`` through the runtime's
``replace`` (start new, swap, stop old), so traffic is never dropped; a failed update rolls back
to the running deployment and reports why in ``FailureReason``, as SageMaker does. DeleteEndpoint
goes ``Deleting`` -> gone. After a restart, ``restore()`` brings recorded endpoints back.

Wire concerns (validation, shapes, messages) live in ``emulator.contract.control_plane``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from emulator.contract import control_plane as wire
from emulator.contract.control_plane import KIND_CONFIG, KIND_ENDPOINT, KIND_MODEL
from emulator.control.store import (
    CONFIGS,
    MODELS,
    AlreadyExists,
    ControlStore,
    Deployment,
    EndpointRecord,
    Resource,
)

log = logging.getLogger(__name__)

IN_PROGRESS = ("Creating", "Updating", "Deleting", "SystemUpdating", "RollingBack")
_FAILURE_REASON_MAX = 1024


class EndpointRuntimes(Protocol):
    """What the service needs from the endpoint registry (``emulator.endpoints``)."""

    async def create(self, spec: Any) -> Any: ...

    async def delete(self, name: str) -> Any: ...

    async def replace(self, spec: Any) -> Any: ...


@dataclasses.dataclass
class PlainSpec:
    """Stand-in for ``emulator.endpoints.EndpointSpec`` when that module is not importable."""

    name: str
    model_data: str
    mode: str = "MultiModel"
    environment: dict[str, str] = dataclasses.field(default_factory=dict)
    image: str | None = None
    variant_name: str = "AllTraffic"
    model_cache_enabled: bool = True


def default_spec_factory(fields: dict[str, Any]) -> Any:
    """Build the registry's EndpointSpec, passing only the fields it declares."""
    try:
        from emulator.endpoints import EndpointSpec  # type: ignore[attr-defined]
    except ImportError:
        return PlainSpec(**fields)
    if dataclasses.is_dataclass(EndpointSpec):
        accepted = {f.name for f in dataclasses.fields(EndpointSpec)}
    else:
        accepted = set(inspect.signature(EndpointSpec).parameters)
    return EndpointSpec(**{k: v for k, v in fields.items() if k in accepted})


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
        spec_factory: Callable[[dict[str, Any]], Any] = default_spec_factory,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.registry = registry
        self.region = region
        self.account = account
        self._spec_factory = spec_factory
        self._clock = clock
        self._started = clock()
        # One background task per endpoint at most (keyed by lowercased name).
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            op: getattr(self, _snake(op)) for op in wire.OPERATIONS
        }

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
        record = self.store.get_endpoint(name)
        if record is None:
            raise wire.not_found(KIND_ENDPOINT, endpoint_arn)
        if record.status in IN_PROGRESS:
            raise wire.validation_error(f'Cannot update in-progress endpoint "{endpoint_arn}".')
        if record.status != "InService":
            raise wire.validation_error(
                f'Cannot update endpoint "{endpoint_arn}" in status {record.status}: '
                "only DeleteEndpoint is allowed on a failed endpoint."
            )
        deployment = self._deployment(record.name, params["EndpointConfigName"])
        record.pending = deployment
        record.status = "Updating"
        record.failure_reason = None
        record.modified = self._clock()
        self.store.save_endpoint(record)
        self._spawn(name, self._run_update(name, deployment))
        return {"EndpointArn": endpoint_arn}

    async def delete_endpoint(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["EndpointName"]
        record = self.store.get_endpoint(name)
        if record is None:
            raise wire.not_found(KIND_ENDPOINT, self.arn(KIND_ENDPOINT, name))
        if record.status == "Deleting":
            return {}
        record.status = "Deleting"
        record.modified = self._clock()
        self.store.save_endpoint(record)
        # A create or update still running finishes first, so its runtime is stopped too.
        previous = self._tasks.get(name.lower())
        self._spawn(name, self._run_delete(record.name, previous), replace=True)
        return {}

    # -- lifecycle tasks ---------------------------------------------------------------------

    async def _run_create(self, name: str, deployment: Deployment) -> None:
        try:
            await self.registry.create(self._spec_factory(deployment.spec))
        except Exception as exc:  # noqa: BLE001 - any failure of the runtime ends in Failed
            log.warning("endpoint %s failed to start: %s", name, exc)
            self._transition(name, ("Creating",), "Failed", failure_reason=failure_reason(exc))
        else:
            self._transition(name, ("Creating",), "InService", failure_reason=None)

    async def _run_update(self, name: str, deployment: Deployment) -> None:
        try:
            replace = getattr(self.registry, "replace", None)
            spec = self._spec_factory(deployment.spec)
            if replace is not None:
                await replace(spec)
            else:  # a registry without replace: stop then start (drops traffic briefly)
                await self.registry.delete(name)
                await self.registry.create(spec)
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
            await self.registry.create(self._spec_factory(deployment.spec))
        except Exception as exc:  # noqa: BLE001
            log.warning("endpoint %s could not be restored: %s", name, exc)
            self._transition(name, None, "Failed", failure_reason=failure_reason(exc))
        else:
            self._transition(name, None, "InService")

    def _transition(
        self, name: str, expected: tuple[str, ...] | None, status: str, **changes: Any
    ) -> None:
        """Move an endpoint to ``status`` unless something else (a delete) overtook the task."""
        record = self.store.get_endpoint(name)
        if record is None or (expected is not None and record.status not in expected):
            return
        if record.status == "Deleting":
            return
        record.status = status
        record.modified = self._clock()
        for key, value in changes.items():
            setattr(record, key, value)
        self.store.save_endpoint(record)

    def _spawn(self, name: str, work: Awaitable[None], replace: bool = False) -> None:
        key = name.lower()
        task = asyncio.ensure_future(work)
        self._tasks[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._tasks.get(key) is done:
                del self._tasks[key]

        task.add_done_callback(forget)

    async def restore(self, wait: bool = True) -> None:
        """Bring recorded endpoints back after a restart (call once, at startup).

        InService endpoints restart their runtime (models then load on demand); an interrupted
        Create or Update is carried to its end; an interrupted Delete is finished.
        """
        for record in self.store.endpoints():
            if record.status == "Deleting":
                self._spawn(record.name, self._run_delete(record.name, None))
            elif record.status == "Creating":
                self._spawn(record.name, self._run_create(record.name, record.current))
            elif record.status == "Updating":
                target = record.pending or record.current
                record.current, record.pending = target, None
                self.store.save_endpoint(record)
                self._spawn(record.name, self._run_restore(record.name, target))
            elif record.status == "InService":
                self._spawn(record.name, self._run_restore(record.name, record.current))
        if wait:
            await self.wait_idle()

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

    # -- helpers -----------------------------------------------------------------------------

    def _resource(self, table: str, kind: str, name: str) -> Resource:
        resource = self.store.get(table, name)
        if resource is None:
            raise wire.not_found(kind, self.arn(kind, name))
        return resource

    def _deployment(self, endpoint_name: str, config_name: str) -> Deployment:
        """Resolve a config and its model into what the runtime needs, at call time."""
        config = self._resource(CONFIGS, KIND_CONFIG, config_name)
        variants = config.doc["ProductionVariants"]
        # The emulator runs one variant per endpoint: the first, as the one all traffic reaches.
        variant = variants[0]
        model = self._resource(MODELS, KIND_MODEL, variant["ModelName"])
        containers = (
            [model.doc["PrimaryContainer"]]
            if model.doc.get("PrimaryContainer")
            else list(model.doc.get("Containers") or [])
        )
        if len(containers) != 1:
            raise wire.validation_error(
                f'Model "{self.arn(KIND_MODEL, model.name)}" has {len(containers)} containers; '
                "the emulator runs exactly one container per endpoint."
            )
        container = containers[0]
        model_data = container.get("ModelDataUrl") or (
            (container.get("ModelDataSource") or {}).get("S3DataSource") or {}
        ).get("S3Uri")
        if not model_data:
            raise wire.validation_error(
                f'Model "{self.arn(KIND_MODEL, model.name)}" has no ModelDataUrl; the emulator '
                "needs one (an S3 prefix for MultiModel, a tarball for SingleModel)."
            )
        cache = (container.get("MultiModelConfig") or {}).get("ModelCacheSetting", "Enabled")
        spec = {
            "name": endpoint_name,
            "model_data": model_data,
            "mode": container.get("Mode", "SingleModel"),
            "environment": dict(container.get("Environment") or {}),
            "image": container.get("Image"),
            "variant_name": variant["VariantName"],
            "model_cache_enabled": cache != "Disabled",
        }
        return Deployment(
            config_name=config.name,
            variants=variants,
            spec=spec,
            images=[container.get("Image")],
            started=self._clock(),
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
        running = record.status not in ("Creating", "Failed")
        if record.current.variants:
            doc["ProductionVariants"] = [
                _variant_summary(v, record.current, running) for v in record.current.variants
            ]
        if record.pending is not None:
            doc["PendingDeploymentSummary"] = {
                "EndpointConfigName": record.pending.config_name,
                "ProductionVariants": [
                    _pending_summary(v, record.pending) for v in record.pending.variants
                ],
                "StartTime": record.pending.started,
            }
        return doc

    def _unmanaged(self, name: str) -> EndpointRecord | None:
        """An endpoint the runtime serves that the control plane did not create (--model-data)."""
        get = getattr(self.registry, "get", None)
        if get is None:
            return None
        try:
            runtime = get(name)
        except (KeyError, LookupError):
            return None
        if runtime is None:
            return None
        return EndpointRecord(
            name=name,
            created=self._started,
            modified=self._started,
            status="InService",
            current=Deployment(config_name="", variants=[], spec={}),
        )

    def _all_unmanaged(self) -> list[EndpointRecord]:
        names = getattr(self.registry, "names", None)
        if names is None:
            return []
        found = (self._unmanaged(n) for n in list(names()))
        return [r for r in found if r is not None]


def _variant_summary(variant: dict[str, Any], deployment: Deployment, running: bool):
    desired = int(variant.get("InitialInstanceCount") or 1)
    weight = float(variant.get("InitialVariantWeight", 1.0))
    summary: dict[str, Any] = {
        "VariantName": variant["VariantName"],
        "CurrentWeight": weight,
        "DesiredWeight": weight,
        "CurrentInstanceCount": desired if running else 0,
        "DesiredInstanceCount": desired,
    }
    images = [i for i in deployment.images if i]
    if images:
        summary["DeployedImages"] = [
            {"SpecifiedImage": i, "ResolvedImage": i, "ResolutionTime": deployment.started}
            for i in images
        ]
    return summary


def _pending_summary(variant: dict[str, Any], deployment: Deployment) -> dict[str, Any]:
    summary = _variant_summary(variant, deployment, running=False)
    summary["VariantStatus"] = [{"Status": "Creating", "StartTime": deployment.started}]
    if variant.get("InstanceType"):
        summary["InstanceType"] = variant["InstanceType"]
    return summary


def _with_token(body: dict[str, Any], token: str | None) -> dict[str, Any]:
    if token:
        body["NextToken"] = token
    return body


def _snake(operation: str) -> str:
    out = []
    for index, char in enumerate(operation):
        if char.isupper() and index:
            out.append("_")
        out.append(char.lower())
    return "".join(out)
