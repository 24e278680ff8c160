"""Where an endpoint's inference components' copies go, and the runtime told of it.

Every change (a component created, updated, scaled or deleted; its endpoint resized, updated or
restarted) places the copies of a variant's components again, oldest first
(``emulator.hosting.placement``): each record gets its copies per instance, what fits nowhere
stays pending, and ManagedInstanceScaling may add or release instances
(``emulator.hosting.managed_instances``). The runtime then starts or stops each component's
copies to its placed count (``apply_copies``, the endpoint registry's; None: copies stay
bookkeeping, as in unit tests without a runtime).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from emulator import instance_types
from emulator.contract import inference_components as rules
from emulator.contract import routing_config
from emulator.control.component_records import (
    ComponentRecord,
    ComponentTable,
    reservation,
    strategy,
)
from emulator.control.state_db import MODELS, EndpointRecord
from emulator.hosting import managed_instances, placement
from emulator.hosting.component_copies import CopyTarget
from emulator.hosting.spec import ContainerSpec, VariantSpec

log = logging.getLogger(__name__)

IN_SERVICE = rules.STATUSES[1]
ApplyCopies = Callable[[str, str, CopyTarget | None], Awaitable[None]]


class CopyPlacement:
    """The placement of every component's copies on its variant's instances."""

    def __init__(self, table: ComponentTable) -> None:
        self.table = table
        # The runtime's hook that starts and stops copies (the endpoint registry's
        # ``apply_copies``); None: copies stay bookkeeping (unit tests without a runtime).
        self.apply_copies: ApplyCopies | None = None
        # Copy changes the runtime is making, cancelled at shutdown.
        self.changes: set[asyncio.Task[None]] = set()

    def replace_endpoint(self, endpoint_name: str) -> None:
        """Place the copies of every variant of an endpoint again (its instances changed)."""
        endpoint = self.table.store.get_endpoint(endpoint_name)
        if endpoint is not None:
            for variant in endpoint.current.variants:
                self.place(endpoint, variant["VariantName"])

    async def move_copies(self, endpoint_name: str) -> list[str]:
        """Place every component's copies on the endpoint's (new) variants and wait until the
        runtime started and stopped them; returns why a component's copies failed to start."""
        endpoint = self.table.store.get_endpoint(endpoint_name)
        if endpoint is None:
            return []
        changes: dict[str, asyncio.Task[None]] = {}
        for variant in endpoint.current.variants:
            changes.update({name: task for name, task in self.place(
                endpoint, variant["VariantName"]).items() if task is not None})
        results = await asyncio.gather(*changes.values(), return_exceptions=True)
        return [f"{name}: {result}" for name, result in zip(changes, results, strict=True)
                if isinstance(result, BaseException)]

    def place(self, endpoint: EndpointRecord, variant_name: str,
              creating: str | None = None) -> dict[str, asyncio.Task[None] | None]:
        """Place the copies of every InService component of a variant again (oldest first),
        and of ``creating`` (a Create's component, whose copies start before it is InService):
        each record gets its copies per instance; what fits nowhere stays pending. Returns the
        runtime's copy changes so started, by component."""
        variant = next((v for v in endpoint.current.variants
                        if v["VariantName"] == variant_name), None)
        if variant is None:
            return {}
        records = self._hosted(endpoint.name, variant_name, creating)
        demands = _demands(records)
        count = self._managed_instances(endpoint, variant, demands)
        placed = placement.place(variant.get("InstanceType"), count, demands)
        records = [r for r in records if r.rollout is None]
        for record in records:
            counts = placed.get(record.name, [])
            if counts != record.placement or sum(counts) != record.current_copies:
                record.placement, record.current_copies = counts, sum(counts)
                self.table.save(record)
        return {r.name: self._change_copies(r, variant) for r in records}

    def _hosted(self, endpoint_name: str, variant_name: str,
                creating: str | None = None) -> list[ComponentRecord]:
        """The components a variant hosts, oldest first: the InService ones, ``creating``, and
        one in a rolling update (it keeps its room; its copies are the update's)."""
        records = sorted(self.table.all(), key=lambda r: (r.created, r.name.lower()))
        return [r for r in records if (r.status == IN_SERVICE or r.name == creating
                                       or r.rollout is not None)
                and r.endpoint_name.lower() == endpoint_name.lower()
                and r.variant_name == variant_name]

    def targets_on(self, endpoint_name: str, variants: list[dict[str, Any]]
                   ) -> dict[str, CopyTarget]:
        """Each hosted component's copies as they would be placed on ``variants`` (a guarded
        UpdateEndpoint's new fleet, started whole beside the running one): nothing saved,
        nothing started."""
        targets: dict[str, CopyTarget] = {}
        for variant in variants:
            records = self._hosted(endpoint_name, variant["VariantName"])
            demands = _demands(records)
            count = managed_instances.instance_count(
                variant, demands, instance_types.MAX_INSTANCES_PER_ENDPOINT)
            placed = placement.place(variant.get("InstanceType"),
                                     int(variant.get("InitialInstanceCount") or 0)
                                     if count is None else count, demands)
            for record in records:
                targets[record.name] = dataclasses.replace(
                    self.copy_target(record, variant), copies=sum(placed.get(record.name, [])))
        return targets

    def _change_copies(self, record: ComponentRecord,
                       variant: dict[str, Any]) -> asyncio.Task[None] | None:
        """The runtime starts or stops the component's copies to its placed count, in the
        background (one change at a time per component, in order). [U] A copy that fails to
        start leaves the component's status as it is: calls are answered with the reason."""
        if self.apply_copies is None:
            return None
        try:
            target = self.copy_target(record, variant)
        except LookupError as exc:  # its model deleted since: no new copy can start
            log.warning("inference component %s: %s", record.name, exc)
            return None
        task = asyncio.ensure_future(self.apply_copies(record.endpoint_name, record.name, target))
        self.changes.add(task)
        task.add_done_callback(self._copy_changed)
        return task

    def _copy_changed(self, task: asyncio.Task[None]) -> None:
        self.changes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("inference component copies: %s", task.exception())

    def copy_target(self, record: ComponentRecord, variant: dict[str, Any]) -> CopyTarget:
        """What each copy serves: the named Model's container, or the component's own
        Container; a copy is a one-instance variant of the component's instance type."""
        spec = record.specification
        if spec.get("ModelName"):
            model = self.table.store.get(MODELS, spec["ModelName"])
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
            routing_config.strategy_of(variant)[0],
            download_timeout_s=startup.get("ModelDataDownloadTimeoutInSeconds"),
            prefix=routing_config.strategy_of(variant)[1])

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
        self.table.store.save_endpoint(endpoint)
        return managed

    async def start_new_copies(self, record: ComponentRecord) -> Exception | None:
        """Start the copies of an update's new specification (as many as are placed) beside
        the old ones; the failure, if they cannot start."""
        endpoint = self.table.store.get_endpoint(record.endpoint_name)
        variant = next((v for v in endpoint.current.variants
                        if v["VariantName"] == record.variant_name), None) if endpoint else None
        spec = record.pending_specification
        if self.apply_copies is None or variant is None or spec is None \
                or not record.current_copies:
            return None
        try:
            target = self.copy_target(dataclasses.replace(record, specification=spec), variant)
            await self.apply_copies(record.endpoint_name, record.name, target)
        except Exception as exc:  # noqa: BLE001 - any start failure fails the update
            return exc
        return None

    async def stop_copies(self, record: ComponentRecord) -> None:
        """Every copy of a component drains and stops (it is being deleted)."""
        if self.apply_copies is not None:
            await self.apply_copies(record.endpoint_name, record.name, None)


def _demands(records: list[ComponentRecord]) -> list[placement.Demand]:
    return [placement.Demand(r.name, r.desired_copies, reservation(r.specification),
                             strategy(r.specification)) for r in records]
