"""An inference component's copies without Triton (emulator/hosting/component_copies.py): a
removed copy leaves routing at once and stops only once its call is answered; a copy that
fails to start leaves the others serving and says why; least outstanding requests routing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from emulator.hosting.component_copies import ComponentCopies, CopyTarget
from emulator.hosting.spec import ContainerSpec, VariantSpec

VARIANT = VariantSpec("AllTraffic", ContainerSpec("file:///m.tar.gz", mode="SingleModel"))


class FakeCopy:
    """What ComponentCopies uses of an instance; ``gate`` holds its calls."""

    def __init__(self, copy_id: str, work_dir: Path, fail: str | None) -> None:
        self.id = copy_id
        self.work_dir = work_dir
        self.fail = fail
        self.in_flight = 0
        self.draining = False
        self.stopped = False
        self.gate = asyncio.Event()
        self.gate.set()
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self) -> None:
        if self.fail:
            raise RuntimeError(self.fail)

    async def drain(self, timeout_s: float) -> None:
        self.draining = True
        await self._idle.wait()

    async def stop(self) -> None:
        assert not self.in_flight, "stopped with a call in flight"
        self.stopped = True

    async def invoke(self, *args: Any) -> str:
        self.in_flight += 1
        self._idle.clear()
        try:
            await self.gate.wait()
            return self.id
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()


def _copies(tmp_path: Path, fail: dict[int, str] | None = None) -> tuple[ComponentCopies,
                                                                        list[FakeCopy]]:
    built: list[FakeCopy] = []

    async def build(endpoint: Any, variant: Any, copy_id: str, work_dir: Path,
                    metrics: Any) -> Any:
        copy = FakeCopy(copy_id, work_dir, (fail or {}).get(len(built) + 1))
        built.append(copy)
        return copy

    return ComponentCopies("ep", "ic", tmp_path, build, None), built


async def _test_a_removed_copy_leaves_routing_at_once_and_stops_after_its_call(
        tmp_path: Path) -> None:
    copies, built = _copies(tmp_path)
    await copies.apply(CopyTarget(VARIANT, 2))
    assert [c.id for c in copies.ready] == ["ic/copy-1", "ic/copy-2"]
    newest = built[1]
    newest.gate.clear()
    call = asyncio.ensure_future(newest.invoke())
    await asyncio.sleep(0)
    scale_in = asyncio.ensure_future(copies.apply(CopyTarget(VARIANT, 1)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert copies.ready == [built[0]] and not newest.stopped  # out of routing, still draining
    assert all(copies.choose()[0] is built[0] for _ in range(3))
    newest.gate.set()
    assert await call == "ic/copy-2"
    await scale_in
    assert newest.stopped and not built[0].stopped


async def _test_a_copy_that_fails_to_start_leaves_the_others_and_says_why(tmp_path: Path) -> None:
    copies, built = _copies(tmp_path, fail={2: "model failed to load"})
    await copies.apply(CopyTarget(VARIANT, 1))
    with pytest.raises(RuntimeError, match="model failed to load"):
        await copies.apply(CopyTarget(VARIANT, 2))
    assert copies.ready == [built[0]] and built[1].stopped
    assert copies.failure == "model failed to load"
    await copies.stop()
    assert built[0].stopped and not copies.ready


async def _test_least_outstanding_requests_picks_the_idle_copy(tmp_path: Path) -> None:
    copies, built = _copies(tmp_path)
    await copies.apply(CopyTarget(VARIANT, 2))
    built[0].in_flight = 3
    assert {copies.choose()[0].id for _ in range(4)} == {"ic/copy-2"}
    built[0].in_flight = 0
    assert {copies.choose()[0].id for _ in range(4)} == {"ic/copy-1", "ic/copy-2"}  # in turn
    await copies.stop()


def test_a_removed_copy_leaves_routing_at_once_and_stops_after_its_call(tmp_path: Path) -> None:
    asyncio.run(_test_a_removed_copy_leaves_routing_at_once_and_stops_after_its_call(tmp_path))

def test_a_copy_that_fails_to_start_leaves_the_others_and_says_why(tmp_path: Path) -> None:
    asyncio.run(_test_a_copy_that_fails_to_start_leaves_the_others_and_says_why(tmp_path))

def test_least_outstanding_requests_picks_the_idle_copy(tmp_path: Path) -> None:
    asyncio.run(_test_least_outstanding_requests_picks_the_idle_copy(tmp_path))
