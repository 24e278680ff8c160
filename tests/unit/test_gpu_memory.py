"""GPU memory as a multi-model endpoint on a GPU instance counts it, without a GPU.

A model counts against its instance's GPU budget (``--gpu-memory-budget``, else the instance
type's GPU memory) as the GPU memory its load took (NVML, through the memory probe); none before
its first load. A load that measured more than is free makes the least recently used idle models
leave; a model whose size is known makes room before it loads; one model larger than the whole
GPU budget is SageMaker's 507, the first time after its load and then before any load. A
victim's process that still holds its GPU memory while it exits is not counted as the next
model's (on a GPU it freed its memory during the next load, which then measured too little).
docker/gpu-check.sh shows the same on a real GPU.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

import pytest

from emulator.instance_types import GIB, budget_for
from emulator.manager.lru import DoesNotFit, LruIndex
from emulator.manager.memory import ModelMemory
from emulator.manager.model_manager import ModelManager
from emulator.manager.records import ModelLoadFailed, ModelRecord, ModelState, Records
from emulator.manager.sources import FolderSource
from emulator.metrics import EndpointMetrics, InstanceMetrics
from emulator.triton.memory import OomKill
from ensembles.packaging import package
from harness.testmodels import write_scale_model
from tests.manager_support import InstantTriton


def test_an_item_that_fits_in_memory_but_not_on_the_gpu_evicts_by_gpu_memory() -> None:
    index = LruIndex(capacity_bytes=1000, capacity_gpu_bytes=500)
    index.add("cpu-only", 100, gpu=0)
    index.add("gpu-a", 100, gpu=300)
    index.add("gpu-b", 100, gpu=100)
    # A model that holds no GPU memory is not unloaded to make room on the GPU.
    assert index.victims(100, incoming_gpu=250) == ["gpu-a"]
    assert index.victims(100, incoming_gpu=100) == []
    with pytest.raises(DoesNotFit) as too_big:
        index.victims(100, incoming_gpu=501)
    assert too_big.value.gpu
    index.add("gpu-b", 100, gpu=450)  # measured more than it was counted as
    assert index.over_budget() == ["gpu-a"]
    index.add("cpu-only", 950)  # now the most recent; in bytes every model helps
    assert index.victims(100) == ["gpu-a", "gpu-b", "cpu-only"]


def test_gpu_growth_over_a_load_is_shared_by_the_loads_beside_it() -> None:
    records: Records = {}
    memory = ModelMemory(records, None, None, gpu_budget_bytes=10_000)
    first = records["a"] = ModelRecord("a", "a", state=ModelState.LOADING, size=5)
    records["b"] = ModelRecord("b", "b", state=ModelState.LOADING, size=5)
    memory.index.add("a", first.memory_size)
    memory.measured_gpu(first, before=1000, after=1600, own=50)
    assert first.measured_gpu == 350
    entry = memory.index.get("a")
    assert entry is not None and (entry.size, entry.gpu) == (5, 350)
    assert not memory.too_large_for_gpu(first)
    first.measured_gpu = 10_001
    assert memory.too_large_for_gpu(first)


def test_the_gpu_budget_is_the_flag_else_the_instance_types_gpu_memory() -> None:
    g5 = budget_for("ml.g5.xlarge", None)
    assert g5.gpu_memory_bytes == g5.instance_gpu_bytes == 24 * GIB
    overridden = budget_for("ml.g5.xlarge", None, 5 * GIB)
    assert overridden.gpu_memory_bytes == 5 * GIB
    assert overridden.instance_gpu_bytes == 24 * GIB  # GPUMemoryUtilization's denominator
    assert budget_for("ml.m5.xlarge", None).gpu_memory_bytes is None
    assert budget_for(None, None, 2 * GIB).gpu_memory_bytes == 2 * GIB


class GpuTriton(InstantTriton):
    """Each loaded model's process takes the GPU memory its name says; an unloaded model's
    process keeps it until the next load has begun (it is still exiting)."""

    def __init__(self, gpu_of: dict[str, int]) -> None:
        super().__init__()
        self.gpu_of = gpu_of
        self.exiting: list[str] = []
        self.loads: list[str] = []

    def held(self, models: Iterable[str]) -> int:
        return sum(self.gpu_of[name.split("--")[0]] for name in models)

    def gpu_bytes(self) -> int:
        return self.held(self.loaded) + self.held(self.exiting)

    def loaded_now(self, model: str) -> None:
        self.loads.append(model.split("--")[0])
        self.exiting.clear()

    def unloaded_now(self, model: str) -> None:
        self.exiting.append(model)


class GpuProbe:
    """A memory probe that sees only GPU memory (host memory then counts as files)."""

    def __init__(self, triton: GpuTriton) -> None:
        self.triton = triton

    def triton_bytes(self) -> int | None:
        return None

    def own_bytes(self, models: Iterable[str]) -> int:
        return 0

    def total_bytes(self) -> int | None:
        return None

    def gpu_bytes(self) -> int | None:
        return self.triton.gpu_bytes()

    def triton_gpu_bytes(self) -> int | None:
        return 0  # every model runs in processes of its own here (Python-based backends)

    def own_gpu_bytes(self, models: Iterable[str]) -> int:
        return self.triton.held(set(models) & self.triton.loaded)

    def oom_kill(self, limit: int) -> OomKill | None:
        return None


def test_gpu_memory_evicts_and_a_model_too_big_for_the_gpu_is_a_507(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    for name in ("a", "b", "big"):
        package(write_scale_model(tmp_path / "repos", name), store / f"{name}.tar.gz", "folder")
    triton = GpuTriton({"a": 300, "b": 300, "big": 600})
    (tmp_path / "repo").mkdir()
    manager = ModelManager(source=FolderSource(store), cache_dir=tmp_path / "cache",
                           triton=triton, triton_repository=tmp_path / "repo",  # type: ignore[arg-type]
                           metrics=InstanceMetrics(EndpointMetrics("e", "v"), "i-1"),
                           gpu_memory_budget=500, gpus_available=True,
                           memory_probe=GpuProbe(triton))

    def states() -> dict[str, str]:
        return {t: r.state.value for t, r in manager.records.items()}

    async def use(target: str) -> None:
        async with manager.acquire(target, 10):
            pass

    async def settled() -> None:
        while any(r.state is ModelState.UNLOADING for r in manager.records.values()):
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        await use("a.tar.gz")
        assert manager.records["a.tar.gz"].measured_gpu == 300
        assert manager.usage().gpu_loaded_bytes == 300
        # b's GPU memory is unknown until it loads: it loads, measures 300, and a (idle, least
        # recently used) leaves so that the 500 bytes of the budget hold.
        await use("b.tar.gz")
        await settled()
        assert states() == {"a.tar.gz": "on_disk", "b.tar.gz": "loaded"}
        assert triton.exiting  # a's process still holds its memory as big's load begins
        # One model larger than the whole GPU budget: the container's 507, and it is unloaded.
        for _ in range(2):
            with pytest.raises(ModelLoadFailed) as failed:
                await use("big.tar.gz")
            assert failed.value.status == 507
            assert "600 bytes of GPU memory" in failed.value.body
            assert "500 bytes of GPU memory" in failed.value.body
            await settled()
        assert triton.loads.count("big") == 1  # refused before loading the second time
        assert manager.records["big.tar.gz"].state is not ModelState.LOADED
        # a's size is known now: b makes way before a loads.
        await use("a.tar.gz")
        await settled()
        assert states()["a.tar.gz"] == "loaded" and states()["b.tar.gz"] == "on_disk"
        assert triton.loads == ["a", "b", "big", "a"]

    asyncio.run(scenario())
