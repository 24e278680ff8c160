"""A coroutine run beside a block: started as a task when the block starts, cancelled and
awaited when it ends (the app's lifespan runs the scaling engine and ``--watch`` so); and
``cancel_and_wait``, how a task is stopped; ``ShieldedTasks``, work that outlives a cancel of
its caller."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


@contextlib.asynccontextmanager
async def beside(work: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        await cancel_and_wait(task)


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended (its cancellation is not raised here)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class ShieldedTasks:
    """Work that must end even when whoever started it is cancelled (an endpoint's stop, its
    caller a request cut short by a shutdown): each runs as a task kept here until it is done,
    and ``drain()`` waits for every one, those started meanwhile included, so no Triton or folder
    outlives the object that keeps them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def start(self, work: Awaitable[T], name: str | None = None) -> asyncio.Future[T]:
        task = (asyncio.create_task(work, name=name) if asyncio.iscoroutine(work)
                else asyncio.ensure_future(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def run(self, work: Awaitable[T], name: str | None = None) -> T:
        """``work``'s result; a cancel of the caller is raised here, and ``work`` goes on."""
        return await asyncio.shield(self.start(work, name))

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
