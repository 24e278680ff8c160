"""What a fault rule does to a load or a download of this instance (``emulator/faults``): drawn
when a load starts, applied where a real failure of that kind happens, so it fails as that
failure does (the same answer, the same clean-up)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from emulator.faults.rules import DownloadFault, LoadFault
from emulator.faults.table import UnitFaults
from emulator.manager import failures
from emulator.manager.artifacts import InjectedDownload
from emulator.manager.records import ModelLoadFailed, ModelRecord
from emulator.triton.client import TritonError


def load_fault(faults: UnitFaults | None, record: ModelRecord,
               artifacts_dir: Path) -> LoadFault | None:
    """The load fault that fires for ``record``'s load, if any; a full disk is raised at once
    (before anything is downloaded, as the container's 507)."""
    fired = faults.draw(record.target, "load") if faults is not None else None
    fault = fired.fault if fired is not None and isinstance(fired.fault, LoadFault) else None
    if fault is not None and fault.disk_full:
        raise ModelLoadFailed(failures.INSUFFICIENT_STORAGE, failures.body(failures.disk_full(
            record.target or "(the endpoint's model)", str(artifacts_dir), "loading",
            "[Errno 28] No space left on device")))
    return fault


def download_fault(faults: UnitFaults | None, record: ModelRecord) -> InjectedDownload | None:
    """The download fault that fires for ``record``'s download, if any; a stall lasts while its
    rule is in force."""
    fired = faults.draw(record.target, "download") if faults is not None else None
    if faults is None or fired is None or not isinstance(fired.fault, DownloadFault):
        return None
    table, rule_id = faults.table, fired.rule_id
    return InjectedDownload(fired.fault, lambda: table.in_force(rule_id))


async def loaded_as_the_fault_says(fault: LoadFault | None) -> None:
    """A fault rule's load: Triton's refusal (its words, or out of memory: 507), or a load that
    takes longer. Raised as Triton's own answer, so it fails as a real refusal does."""
    if fault is None:
        return
    if fault.delay_s:
        await asyncio.sleep(fault.delay_s)
    elif fault.out_of_memory:
        raise TritonError(400, failures.body("failed to load the model: CUDA out of memory. "
                                             "Tried to allocate 2.00 GiB"))
    elif fault.fail is not None:
        raise TritonError(400, failures.body(fault.fail))
