"""The model manager's answers to two of Triton's races, against a scripted Triton client.

- Triton's lookup race: an inference for a loaded model answered "Request for unknown model:
  '<name>' is not found" is sent again while the request's lease holds the model loaded, and only
  then (tests/integration/test_triton_lookup_race.py provokes the race in a real Triton).
- The unload's wait: a repository index that fails after Triton accepted the unload (a model
  folder removed while Triton listed them) does not end the wait; a refused unload does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from emulator.manager.model_manager import (
    LOOKUP_RACE_RETRIES,
    Lease,
    ModelManager,
    ModelRecord,
    ModelState,
)
from emulator.metrics import EndpointMetrics, InstanceMetrics
from emulator.triton.client import TritonError, TritonResponse

ENTRY = "model--0123456789ab"
RACE = b'{"error":"Request for unknown model: \'' + ENTRY.encode() + b'\' is not found"}'
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
                     on_accepted: Callable[[], None] | None = None) -> None:
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


def test_a_lookup_race_answer_is_sent_again(tmp_path: Path) -> None:
    triton = ScriptedTriton([(400, RACE), (400, RACE), (200, OK)])
    manager = manager_with(triton, tmp_path)
    response = asyncio.run(manager.infer(loaded_lease(manager), b"{}", {}, timeout=5))
    assert (response.status, response.body) == (200, OK)
    assert triton.infers == 3 and manager.lookup_retries == 2


def test_the_resending_is_bounded(tmp_path: Path) -> None:
    triton = ScriptedTriton([(400, RACE)] * (LOOKUP_RACE_RETRIES + 1))
    manager = manager_with(triton, tmp_path)
    response = asyncio.run(manager.infer(loaded_lease(manager), b"{}", {}, timeout=5))
    assert response.status == 400 and triton.infers == LOOKUP_RACE_RETRIES + 1


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
        await manager._unload_in_triton(record, lambda: accepted.append(True))

    if fails:
        with pytest.raises(TritonError):
            asyncio.run(unload())
    else:
        asyncio.run(unload())
    assert triton.unload_calls == calls
    assert bool(accepted) == (script[0] != "refused")
