"""The store changed under a served model (``mme serve --watch``): its next call loads the new
version. A part of the model manager (``model_manager.py`` is the coordinator): it marks a
TargetModel stale when the store says it changed, and before that model's next call takes the
old version out (unloaded once no call holds it, its files deleted) so that the call's load reads
the store afresh. A call under way, or a load under way, is left to finish: the change applies
to the load after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from emulator.manager.artifacts import ArtifactCache
from emulator.manager.memory import ModelMemory
from emulator.manager.records import ModelNotReady, ModelRecord, ModelState

StartUnload = Callable[[ModelRecord, str], "asyncio.Task[None]"]


class StoreRefresh:
    def __init__(self, memory: ModelMemory, artifacts: ArtifactCache,
                 loads: Mapping[str, asyncio.Task[ModelRecord]],
                 unloads: Mapping[str, asyncio.Task[None]], start_unload: StartUnload) -> None:
        self._memory = memory
        self._artifacts = artifacts
        self._loads = loads
        self._unloads = unloads
        self._start_unload = start_unload
        self._stale: set[str] = set()
        self._refreshes: dict[str, asyncio.Task[None]] = {}

    def pending(self, target: str) -> bool:
        """Whether ``target``'s next call must wait for its old version to go (two set reads
        while nothing changed: every call asks)."""
        return bool(self._stale or self._refreshes) and (
            target in self._stale or target in self._refreshes)

    def store_changed(self, target: str) -> None:
        self._stale.add(target)

    async def refreshed(self, record: ModelRecord, started: float,
                        wait_timeout_s: float) -> None:
        """Wait, within the call's timeout, for ``record``'s old version to be taken out."""
        target = record.target
        task = self._refreshes.get(target)
        if task is None:
            self._stale.discard(target)
            task = asyncio.create_task(self._take_out_old_version(record),
                                       name=f"refresh:{target}")
            self._refreshes[target] = task
            task.add_done_callback(lambda _t: self._refreshes.pop(target, None))
        remaining = wait_timeout_s - (time.monotonic() - started)
        try:
            await asyncio.wait_for(asyncio.shield(task), max(remaining, 0.001))
        except asyncio.TimeoutError:
            raise ModelNotReady(target) from None

    async def _take_out_old_version(self, record: ModelRecord) -> None:
        """Unload ``record`` once no call holds it and delete its files, so that the next load
        downloads the store's object afresh; nothing when the copy there is is the object's
        current version (a load under way read the new bytes)."""
        target = record.target
        load = self._loads.get(target)
        if load is not None:  # a load under way finishes first: the change applies to the next
            await asyncio.wait([load])
        current = await asyncio.to_thread(self._artifacts.store_version, target)
        if record.version is not None and current == record.version:
            return
        while True:
            changed = self._memory.changed.next()
            async with self._memory.lock:
                if not self._memory.holds(target):
                    unload = self._unloads.get(target)
                    break
                if not self._memory.is_pinned(target):  # the calls under way have ended
                    unload = self._start_unload(record, "store changed")
                    break
            await changed
        if unload is not None:
            await asyncio.shield(unload)
        if record.state is ModelState.ON_DISK and record.artifact_dir is not None:
            await self._artifacts.delete(record)
