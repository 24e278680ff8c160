"""An inference component as the control plane keeps it: one row of the SQLite file.

``ComponentRecord`` is JSON-safe (``to_resource``/``from_resource``); ``ComponentTable`` reads and
writes the records of one control plane's store, so every module that needs a component reads
it the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from emulator.control.state_db import INFERENCE_COMPONENTS, ControlStore, Resource
from emulator.hosting import placement


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


class ComponentTable:
    """The component records of one store."""

    def __init__(self, store: ControlStore) -> None:
        self.store = store

    def get(self, name: str) -> ComponentRecord | None:
        resource = self.store.get(INFERENCE_COMPONENTS, name)
        return ComponentRecord.from_resource(resource) if resource is not None else None

    def save(self, record: ComponentRecord) -> None:
        self.store.save(INFERENCE_COMPONENTS, record.to_resource())

    def remove(self, name: str) -> None:
        self.store.remove(INFERENCE_COMPONENTS, name)

    def all(self) -> list[ComponentRecord]:
        return [ComponentRecord.from_resource(r) for r in self.store.all(INFERENCE_COMPONENTS)]

    def on_endpoint(self, endpoint_name: str) -> list[ComponentRecord]:
        """The components of an endpoint (names are unique without regard to case)."""
        return [r for r in self.all() if r.endpoint_name.lower() == endpoint_name.lower()]


def reservation(spec: dict[str, Any]) -> placement.Reservation:
    """What one copy of a specification reserves on its instance."""
    needs = spec.get("ComputeResourceRequirements") or {}
    return placement.Reservation(
        cpus=float(needs.get("NumberOfCpuCoresRequired") or 0.0),
        accelerators=float(needs.get("NumberOfAcceleratorDevicesRequired") or 0.0),
        memory_mib=int(needs.get("MinMemoryRequiredInMb") or 0))


def strategy(spec: dict[str, Any]) -> str:
    """How a specification's copies are spread over the instances."""
    return str((spec.get("SchedulingConfig") or {}).get("PlacementStrategy") or placement.SPREAD)
