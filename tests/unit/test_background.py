"""Work that must end though its caller is cancelled (an endpoint's stop during a shutdown)."""

from __future__ import annotations

import asyncio

import pytest

from emulator.background import ShieldedTasks


def test_a_cancelled_caller_leaves_the_work_running_and_drain_waits_for_it() -> None:
    async def scenario() -> list[str]:
        done: list[str] = []
        release = asyncio.Event()

        async def stop(name: str, after: int = 0) -> str:
            await release.wait()
            for _ in range(after):  # ends some loop turns after the first
                await asyncio.sleep(0)
            done.append(name)
            return name

        tasks = ShieldedTasks()
        caller = asyncio.create_task(tasks.run(stop("endpoint")))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert done == []  # the caller is gone; its stop is still under way

        async def release_and_start_another() -> None:
            tasks.start(stop("started while draining", after=5))
            release.set()

        await asyncio.gather(tasks.drain(), release_and_start_another())
        return list(done)  # as drain() left it

    assert asyncio.run(scenario()) == ["endpoint", "started while draining"]


def test_run_returns_the_works_result_and_raises_its_error() -> None:
    async def scenario() -> None:
        tasks = ShieldedTasks()

        async def answer() -> int:
            return 42

        async def fail() -> None:
            raise RuntimeError("stop failed")

        assert await tasks.run(answer()) == 42
        with pytest.raises(RuntimeError, match="stop failed"):
            await tasks.run(fail())
        await tasks.drain()  # nothing left: returns at once

    asyncio.run(scenario())
