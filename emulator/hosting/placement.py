"""Where the copies of a variant's inference components go (as bookkeeping).

Each instance of the variant has the resources of its InstanceType (``emulator.instance_types``:
vCPUs, memory, accelerator devices); a copy takes what its component reserves
(``ComputeResourceRequirements``: NumberOfCpuCoresRequired, NumberOfAcceleratorDevicesRequired,
MinMemoryRequiredInMb) and never spans instances. A copy that fits on no instance stays
pending: the component's CurrentCopyCount counts placed copies only, DesiredCopyCount all.

Copies are not serving processes yet (docs/inference-components.md): this is the bookkeeping
they will be placed by. Choices AWS does not document, each [U]:
- placement is recomputed from scratch whenever a component of the variant changes, the
  components taken oldest first, each copy in turn: so an older component keeps its copies and
  a pending copy is placed as soon as room frees;
- SPREAD puts a copy on the instance holding fewest copies of its component (then the one with
  most free memory), BINPACK on the fullest instance it fits (least free memory); without a
  SchedulingConfig, SPREAD;
- an instance's whole memory is the copies' (no share kept for the platform);
- an instance type the table does not know has no limits: every copy is placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from emulator import instance_types

SPREAD = "SPREAD"
BINPACK = "BINPACK"
_MIB = 1024 * 1024


@dataclass(frozen=True)
class Reservation:
    """What one copy of a component takes on an instance."""

    cpus: float = 0.0
    accelerators: float = 0.0
    memory_mib: int = 0


@dataclass(frozen=True)
class Demand:
    """A component to place: its copies, what each takes, and how to spread them."""

    name: str
    copies: int
    reservation: Reservation
    strategy: str = SPREAD


@dataclass
class _Instance:
    cpus: float
    accelerators: float
    memory_mib: float

    def fits(self, need: Reservation) -> bool:
        return (need.cpus <= self.cpus + 1e-9 and need.accelerators <= self.accelerators + 1e-9
                and need.memory_mib <= self.memory_mib)

    def take(self, need: Reservation) -> None:
        self.cpus -= need.cpus
        self.accelerators -= need.accelerators
        self.memory_mib -= need.memory_mib


def place(instance_type: str | None, instance_count: int,
          demands: Sequence[Demand]) -> dict[str, list[int]]:
    """Copies of each component per instance (index = instance), in ``demands``' order."""
    known = instance_types.lookup(instance_type or "")
    if known is None:  # no figures: nothing limits the copies [U]; all on the first instances
        return {d.name: _round_robin(d.copies, instance_count) for d in demands}
    instances = [_Instance(known.vcpus, known.accelerators, known.memory_bytes / _MIB)
                 for _ in range(instance_count)]
    placed: dict[str, list[int]] = {}
    for demand in demands:
        counts = placed[demand.name] = [0] * instance_count
        for _ in range(demand.copies):
            candidates = [i for i, inst in enumerate(instances) if inst.fits(demand.reservation)]
            if not candidates:
                break  # the rest of this component's copies stay pending
            if demand.strategy == BINPACK:
                chosen = min(candidates, key=lambda i: (instances[i].memory_mib, i))
            else:
                chosen = min(candidates, key=lambda i: (counts[i], -instances[i].memory_mib, i))
            instances[chosen].take(demand.reservation)
            counts[chosen] += 1
    return placed


def _round_robin(copies: int, instance_count: int) -> list[int]:
    if instance_count <= 0:
        return []
    return [copies // instance_count + (1 if i < copies % instance_count else 0)
            for i in range(instance_count)]
