"""The model manager's parts on their own, without a Triton, a store or the coordinator.

- Memory (ModelMemory): a load makes way with the least recently used model that is loaded and
  idle, never one a request waits for or one still loading; a model larger than the whole budget
  is a 507 naming its size and the budget; a load waiting for room goes on at the first change;
  a load's measured size shares Triton's growth with the loads under way beside it.
- Disk (ArtifactCache): a deleted artifact's folder is renamed away at once, so a new download
  of the same model into ``<key>`` is not removed with it.
- Triton side (TritonSide): a load that Triton refuses for lack of memory is the container's 507,
  any other refusal its 400, with the installed names made public.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from emulator.manager.artifacts import ArtifactCache
from emulator.manager.events import Events
from emulator.manager.memory import ModelMemory
from emulator.manager.records import ModelLoadFailed, ModelRecord, ModelState, Records
from emulator.manager.sources import FolderSource
from emulator.manager.triton_side import TritonSide
from emulator.metrics import EndpointMetrics, InstanceMetrics
from emulator.triton.client import TritonError


def loaded(records: Records, memory: ModelMemory, target: str, size: int) -> ModelRecord:
    record = records[target] = ModelRecord(target, target, state=ModelState.LOADED, size=size)
    memory.index.add(target, size)
    return record


def reserve(memory: ModelMemory, record: ModelRecord, timeout_s: float = 5.0) -> list[str]:
    evicted: list[str] = []

    def evict(victims: list[str]) -> None:
        for target in victims:  # as the coordinator's unload does first
            memory.release(target)
            memory.records[target].state = ModelState.UNLOADING
        evicted.extend(victims)

    async def run() -> list[str]:
        return await memory.reserve(record, timeout_s, evict)

    assert asyncio.run(run()) == evicted
    return evicted


def test_the_victim_is_the_least_recently_used_idle_loaded_model() -> None:
    records: Records = {}
    memory = ModelMemory(records, None, 4)  # four loaded: one must make way
    loaded(records, memory, "waited-for", 1).demand = 1  # a request waits for it
    loaded(records, memory, "still-loading", 1).state = ModelState.LOADING
    loaded(records, memory, "pinned", 1)
    memory.pin("pinned")
    loaded(records, memory, "idle", 1)
    incoming = records["new"] = ModelRecord("new", "new", size=1)
    assert reserve(memory, incoming) == ["idle"]
    assert memory.index.keys_lru_first() == ["waited-for", "still-loading", "pinned", "new"]


def test_a_model_larger_than_the_whole_budget_is_a_507_naming_both() -> None:
    records: Records = {}
    memory = ModelMemory(records, 100, None)
    incoming = records["big"] = ModelRecord("big", "big", size=150)
    with pytest.raises(ModelLoadFailed) as failed:
        reserve(memory, incoming)
    assert failed.value.status == 507
    assert "150 bytes" in failed.value.body and "100 bytes" in failed.value.body


def test_a_load_waiting_for_room_goes_on_at_the_first_change() -> None:
    records: Records = {}
    memory = ModelMemory(records, None, 1)
    loaded(records, memory, "serving", 1)
    memory.pin("serving")
    incoming = records["new"] = ModelRecord("new", "new", size=1)

    async def scenario() -> list[str]:
        def evict(victims: list[str]) -> None:
            for target in victims:
                memory.release(target)

        waiting = asyncio.create_task(memory.reserve(incoming, 60, evict))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not waiting.done()  # the only model is serving
        memory.unpin("serving")
        memory.changed.notify()
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(scenario()) == ["serving"]


def test_triton_growth_over_a_load_is_shared_by_the_loads_beside_it() -> None:
    records: Records = {}
    memory = ModelMemory(records, 10_000, None)
    first = records["a"] = ModelRecord("a", "a", state=ModelState.LOADING, size=5)
    records["b"] = ModelRecord("b", "b", state=ModelState.LOADING, size=5)
    memory.index.add("a", first.memory_size)
    memory.measured(first, before=1000, after=1600, own=50)
    assert (first.measured, first.measured_growth) == (350, 300)
    entry = memory.index.get("a")
    assert entry is not None and entry.size == 350  # its reservation, as measured


def test_a_deleted_artifact_makes_way_for_a_new_download_of_the_same_key(tmp_path: Path) -> None:
    records: Records = {}
    store = FolderSource(tmp_path / "store")
    cache = ArtifactCache(source=store, cache_dir=tmp_path, records=records, events=Events(store),
                          metrics=InstanceMetrics(EndpointMetrics("e", "v"), "i-1"),
                          disk_budget=None, max_extracted_bytes=None,
                          bringing_in=lambda target: False)
    folder = cache.dir / "k"
    (folder / "model").mkdir(parents=True)
    record = records["m"] = ModelRecord("m", "k", state=ModelState.ON_DISK, artifact_dir=folder)
    cache.index.add("m", 1)
    doomed = cache.forget(record)
    assert doomed is not None and doomed != folder and not folder.exists()
    (folder / "model").mkdir(parents=True)  # the same model, downloaded again meanwhile
    asyncio.run(cache.remove_folder(doomed))
    assert (folder / "model").is_dir() and not doomed.exists()
    assert "m" not in records and "m" not in cache.index


@pytest.mark.parametrize(("answer", "status"), [
    ("CUDA out of memory while loading add_one--0123456789ab", 507),
    ("failed to load 'add_one--0123456789ab': bad config", 400),
])
def test_a_refused_load_is_the_containers_answer(tmp_path: Path, answer: str,
                                                 status: int) -> None:
    side = TritonSide(triton=object(),  # type: ignore[arg-type]  # load_failed asks Triton nothing
                      triton_repository=tmp_path, events=Events(FolderSource(tmp_path)),
                      load_timeout_s=1.0,
                      memory_probe=None, single_model=False, default_model=None,
                      gpus_available=False)
    record = ModelRecord("m.tar.gz", "0123456789ab", entry="add_one--0123456789ab",
                         installed=["add_one--0123456789ab"])
    failure = side.load_failed(record, TritonError(400, answer))
    assert failure.status == status
    assert "--0123456789ab" not in failure.body  # Triton's internal name is not shown
    assert record.generation == 0  # refused, not wedged: the names may be used again

