"""What one model manager holds, as the instance, the page and the metrics read it: the two
budgets (``Usage``) and a row per model (``describe``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.manager.lru import LruIndex
from emulator.manager.records import ModelState, Records


@dataclass(frozen=True)
class Usage:
    """The two budgets of one manager as the instance, the page and the metrics read them."""

    loaded_bytes: int  # as eviction counts them: measured where measured, else the files' bytes
    loaded_file_bytes: int
    loaded_count: int
    memory_budget_bytes: int | None  # None: unlimited
    max_loaded_models: int | None
    disk_bytes: int
    disk_budget_bytes: int | None
    gpu_loaded_bytes: int = 0  # the GPU memory of the models counted in memory (measured)
    gpu_memory_budget_bytes: int | None = None  # None: unlimited (or no GPU)

    def free_fraction(self) -> float:
        """How much of the memory budgets is free, 0..1 (1 without a budget)."""
        free = 1.0
        if self.memory_budget_bytes:
            free = min(free, max(self.memory_budget_bytes - self.loaded_bytes, 0)
                       / self.memory_budget_bytes)
        if self.gpu_memory_budget_bytes:
            free = min(free, max(self.gpu_memory_budget_bytes - self.gpu_loaded_bytes, 0)
                       / self.gpu_memory_budget_bytes)
        if self.max_loaded_models:
            free = min(free, max(self.max_loaded_models - self.loaded_count, 0)
                       / self.max_loaded_models)
        return free


def usage_of(memory: LruIndex, disk: LruIndex, loaded_file_bytes: int) -> Usage:
    """The budgets' use now, from the memory and disk indexes (``loaded_file_bytes``: the
    extracted files' bytes of the models counted in memory)."""
    return Usage(loaded_bytes=memory.total_bytes, loaded_file_bytes=loaded_file_bytes,
                 loaded_count=len(memory), memory_budget_bytes=memory.capacity_bytes,
                 max_loaded_models=memory.capacity_count, disk_bytes=disk.total_bytes,
                 disk_budget_bytes=disk.capacity_bytes,
                 gpu_loaded_bytes=memory.total_gpu_bytes,
                 gpu_memory_budget_bytes=memory.capacity_gpu_bytes)


def describe(records: Records, memory: LruIndex) -> list[dict[str, Any]]:
    """Every model of ``records``, LRU order first (the page's and the API's rows)."""
    lru = memory.keys_lru_first()
    rows = []
    for target, record in records.items():
        entry = memory.get(target)
        rows.append({
            "TargetModel": target,
            "State": record.state.value,
            "OnDisk": record.artifact_dir is not None and record.artifact_dir.is_dir(),
            "Loaded": record.state is ModelState.LOADED,
            "Pinned": bool(entry and entry.pins),
            "InFlight": entry.pins if entry else 0,
            "SizeBytes": record.size,
            "MeasuredBytes": record.measured,
            "GpuBytes": record.measured_gpu,
            # KIND_GPU instance groups running on CPU (no GPU on this machine).
            "KindGpuOnCpu": record.gpu_on_cpu,
            "StoreChanged": record.store_changed,
            "MemoryBytes": entry.size if entry else record.memory_size,
            "LruPosition": lru.index(target) if target in lru else None,
            "TritonModel": record.entry,
            "LastUsed": record.last_used,
        })
    return sorted(rows, key=lambda r: (r["LruPosition"] is None, r["LruPosition"] or 0))
