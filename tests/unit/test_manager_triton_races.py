"""The model manager's answers to races (two of them Triton's), against scripted Triton clients.

- Triton's lookup race: an inference for a loaded model answered "Request for unknown model:
  '<name>' is not found" (whatever name it gives) is sent again while the request's lease holds
  the model loaded, and only then (tests/integration/test_triton_lookup_race.py provokes the
  race in a real Triton).
- The unload's wait: a repository index that fails after Triton accepted the unload (a model
  folder removed while Triton listed them) does not end the wait; a refused unload does.
- A load whose waiters gave up goes on; its files are not a disk eviction's victim meanwhile.
- A load that waits for room (every loaded model serving) is woken when a request lets go of
  its model, and is a 507 if that does not happen within the load timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest

from emulator.manager.model_manager import ModelManager
from emulator.manager.records import Lease, ModelRecord, ModelState
from emulator.manager.triton_side import LOOKUP_RACE_DELAYS_S
from emulator.metrics import EndpointMetrics, InstanceMetrics
from emulator.triton.client import TritonError, TritonResponse
from tests.manager_support import InstantTriton

ENTRY = "model--0123456789ab"
RACE = b'{"error":"Request for unknown model: \'' + ENTRY.encode() + b'\' is not found"}'
# The same race once named the model with a few bytes of garbage, the rest of its text cut off.
GARBLED_RACE = '{"error":"Request for unknown model: \'f\ufffd6\u05f4"}'.encode()
OK = b'{"outputs":[]}'


class ScriptedTriton:
    """Answers inferences from ``answers`` in turn; unloads run ``unloads`` in turn."""

    def __init__(self, answers: list[tuple[int, bytes]] | None = None,
                 unloads: list[str] | None = None) -> None:
        self.answers = list(answers or [])
        self.unloads = list(unloads or [])
        self.infers = 0
        self.unload_calls = 0

    async def infer(self, model: str, body: bytes, headers: Any,
                    timeout: float | None) -> TritonResponse:
        assert model == ENTRY
        self.infers += 1
        status, answer = self.answers.pop(0)
        return TritonResponse(status, {}, answer)

    async def unload(self, model: str, dependents: bool = True, timeout: float = 360.0,
                     on_accepted: Callable[[], None] | None = None,
                     also: Collection[str] = ()) -> None:
        self.unload_calls += 1
        step = self.unloads.pop(0)
        if step == "refused":
            raise TritonError(400, '{"error":"refused"}')
        assert on_accepted is not None
        on_accepted()
        if step == "index-failed":
            raise TritonError(500, '{"error":"failed to stat file /repo/other--key"}')


def manager_with(triton: ScriptedTriton, tmp_path: Path) -> ModelManager:
    return ModelManager(source=None, cache_dir=tmp_path,  # type: ignore[arg-type]
                        triton=triton, triton_repository=tmp_path / "repo",  # type: ignore[arg-type]
                        metrics=InstanceMetrics(EndpointMetrics("e", "v"), "i-1"))


def loaded_lease(manager: ModelManager, pinned: bool = True) -> Lease:
    record = ModelRecord("m.tar.gz", "0123456789ab", state=ModelState.LOADED, entry=ENTRY)
    manager.records[record.target] = record
    manager.memory.add(record.target, 1)
    if pinned:
        manager.memory.pin(record.target)
    return Lease(record, True, ENTRY, 0)


@pytest.mark.parametrize(("status", "first"), [
    (400, RACE), (404, RACE),  # 404: the same text, on a busy machine
    (404, GARBLED_RACE)])  # the name read from the map while it was re-assigned
def test_a_lookup_race_answer_is_sent_again(tmp_path: Path, status: int, first: bytes) -> None:
    triton = ScriptedTriton([(status, first), (400, RACE), (200, OK)])
    manager = manager_with(triton, tmp_path)
    response = asyncio.run(manager.infer(loaded_lease(manager), b"{}", {}, timeout=5))
    assert (response.status, response.body) == (200, OK)
    assert triton.infers == 3 and manager.lookup_retries == 2


def test_the_resending_is_bounded(tmp_path: Path) -> None:
    triton = ScriptedTriton([(400, RACE)] * (len(LOOKUP_RACE_DELAYS_S) + 1))
    manager = manager_with(triton, tmp_path)
    started = time.monotonic()
    response = asyncio.run(manager.infer(loaded_lease(manager), b"{}", {}, timeout=5))
    assert response.status == 400 and triton.infers == len(LOOKUP_RACE_DELAYS_S) + 1
    # Paced, not at once: a torn map may last while its writer is descheduled.
    assert time.monotonic() - started >= sum(LOOKUP_RACE_DELAYS_S)


def test_the_resending_stops_at_the_requests_deadline(tmp_path: Path) -> None:
    triton = ScriptedTriton([(400, RACE)] * (len(LOOKUP_RACE_DELAYS_S) + 1))
    manager = manager_with(triton, tmp_path)
    response = asyncio.run(manager.infer(loaded_lease(manager), b"{}", {}, timeout=0.1))
    # Sent at 0, then after pauses of 0, 0.01 and 0.05 s; the next pause (0.2 s) would end
    # past the deadline. A runner that holds the loop for tens of milliseconds meets the
    # deadline a pause or two sooner; without the deadline all seven would be sent.
    assert response.status == 400 and 2 <= triton.infers <= 4


@pytest.mark.parametrize("case", ["other error", "not pinned", "not loaded", "new generation"])
def test_other_answers_are_the_models(tmp_path: Path, case: str) -> None:
    triton = ScriptedTriton([(400, b'{"error":"bad input"}' if case == "other error" else RACE)])
    manager = manager_with(triton, tmp_path)
    lease = loaded_lease(manager, pinned=case != "not pinned")
    if case == "not loaded":
        lease.record.state = ModelState.UNLOADING
    if case == "new generation":
        lease.record.generation += 1
    response = asyncio.run(manager.infer(lease, b"{}", {}, timeout=5))
    assert response.status == 400 and triton.infers == 1 and manager.lookup_retries == 0


@pytest.mark.parametrize(("script", "calls", "fails"), [
    (["accepted"], 1, False),
    (["index-failed", "accepted"], 2, False),  # the wait asks again, and completes
    (["index-failed"] * 4, 4, True),  # UNLOAD_WAIT_RETRIES, then the failure stands
    (["refused"], 1, True),  # before the 200: the unload's own failure, not asked again
])
def test_the_unload_waits_past_an_index_failure(tmp_path: Path, script: list[str], calls: int,
                                                fails: bool) -> None:
    triton = ScriptedTriton(unloads=script)
    manager = manager_with(triton, tmp_path)
    record = loaded_lease(manager, pinned=False).record
    accepted: list[bool] = []

    async def unload() -> None:
        await manager._triton.unload_in_triton(record, lambda: accepted.append(True))

    if fails:
        with pytest.raises(TritonError):
            asyncio.run(unload())
    else:
        asyncio.run(unload())
    assert triton.unload_calls == calls
    assert bool(accepted) == (script[0] != "refused")


def test_a_load_whose_waiters_gave_up_keeps_its_files(tmp_path: Path) -> None:
    """A request gives up (ModelNotReady) while its model waits for room in memory; the load
    goes on. A download of another model must not delete that model's files meanwhile (it did:
    the load then failed with a KeyError, or Triton read a deleted folder)."""
    from emulator.manager.extract import tree_size
    from emulator.manager.records import ModelLoadFailed, ModelNotReady
    from emulator.manager.sources import FolderSource
    from ensembles.packaging import package
    from harness.testmodels import write_scale_model

    store = tmp_path / "store"
    store.mkdir()
    size = 0
    for k in range(3):
        folder = write_scale_model(tmp_path / "repos", f"model{k}", scale=k + 1.0)
        package(folder, store / f"m{k}.tar.gz", "folder")
        size = max(size, tree_size(folder))
    triton = InstantTriton()
    (tmp_path / "repo").mkdir()
    manager = ModelManager(source=FolderSource(store), cache_dir=tmp_path / "cache",
                           triton=triton, triton_repository=tmp_path / "repo",  # type: ignore[arg-type]
                           metrics=InstanceMetrics(EndpointMetrics("e", "v"), "i-1"),
                           max_loaded_models=1, disk_budget=2 * size + size // 2)

    async def scenario() -> None:
        async with manager.acquire("m2.tar.gz", 30):  # serving: the one memory slot is taken
            with pytest.raises(ModelNotReady):  # m0 waits for room; its request gives up
                async with manager.acquire("m0.tar.gz", 0.2):
                    pass
            assert manager.records["m0.tar.gz"].state is ModelState.ON_DISK
            assert "m0.tar.gz" in manager._loads
            # m1's download needs disk room: m0, being brought in, is not a victim (the disk
            # holds m2, serving, and m0; m1 is refused rather than m0's files deleted).
            with pytest.raises(ModelLoadFailed, match="disk budget"):
                async with manager.acquire("m1.tar.gz", 5):
                    pass
            assert manager.records["m0.tar.gz"].artifact_dir is not None
        await asyncio.wait_for(asyncio.shield(manager._loads["m0.tar.gz"]), 10)
        async with manager.acquire("m0.tar.gz", 5) as lease:
            assert lease.entry in triton.loaded and lease.cache_hit

    asyncio.run(scenario())


# --- waiting for room: a full budget whose every model is serving ---------------------------

def full_manager(tmp_path: Path, load_timeout_s: float) -> tuple[ModelManager, Lease]:
    """Room for one model, taken by a model a request holds."""
    manager = ModelManager(source=None, cache_dir=tmp_path,  # type: ignore[arg-type]
                           triton=ScriptedTriton(unloads=["done"]),  # type: ignore[arg-type]
                           triton_repository=tmp_path / "repo", max_loaded_models=1,
                           load_timeout_s=load_timeout_s,
                           metrics=InstanceMetrics(EndpointMetrics("e", "v"), "i-1"))
    return manager, loaded_lease(manager, pinned=True)


def test_a_load_waiting_for_room_goes_on_when_the_request_lets_go(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        manager, lease = full_manager(tmp_path, load_timeout_s=60)
        incoming = manager.records["n.tar.gz"] = ModelRecord("n.tar.gz", "fedcba987654", size=1)
        manager.disk.add(incoming.target, 1)  # downloaded: what remains is room in memory
        making_room = asyncio.create_task(manager._make_room(incoming))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not making_room.done()  # the only model is serving: nothing to evict
        await manager._release(lease)  # the request ends: room can be made now
        await asyncio.wait_for(making_room, 5)
        return manager.memory.keys_lru_first()

    assert asyncio.run(scenario()) == ["n.tar.gz"]  # the idle model made way


def test_a_load_that_never_gets_room_is_a_507_at_the_load_timeout(tmp_path: Path) -> None:
    from emulator.manager.records import ModelLoadFailed

    async def scenario() -> ModelLoadFailed:
        manager, _held = full_manager(tmp_path, load_timeout_s=0.2)
        incoming = manager.records["n.tar.gz"] = ModelRecord("n.tar.gz", "fedcba987654", size=1)
        with pytest.raises(ModelLoadFailed) as failed:
            await asyncio.wait_for(manager._make_room(incoming), 5)
        return failed.value

    failure = asyncio.run(scenario())
    assert failure.status == 507 and "every loaded model is serving requests" in failure.body
