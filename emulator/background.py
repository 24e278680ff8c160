"""A coroutine run beside a block: started as a task when the block starts, cancelled and
awaited when it ends (the app's lifespan runs the scaling engine and ``--watch`` so); and
``cancel_and_wait``, how a task is stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


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
