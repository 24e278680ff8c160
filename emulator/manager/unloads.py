"""Taking models out of Triton: a part of the model manager (``model_manager.py`` is the
coordinator). One job: the unloads under way. Each unload is a task the coordinator, the store
refresh and the next load of the same model can wait on, with a future set once Triton has
accepted it (it serves the model no more), which a load that made room may wait for instead of
the whole unload (``ModelManager._make_room``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from emulator.manager.events import Events, log
from emulator.manager.lru import LruIndex
from emulator.manager.memory import ModelMemory
from emulator.manager.records import ModelRecord, ModelState
from emulator.manager.triton_side import TritonSide
from emulator.metrics import InstanceMetrics


@dataclass(eq=False)
class Unloads:
    memory: ModelMemory
    disk: LruIndex
    triton: TritonSide
    events: Events
    metrics: InstanceMetrics
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    # Set once Triton has accepted the unload of that target (it serves it no more).
    accepted: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    completed: int = 0

    def start(self, record: ModelRecord, reason: str = "requested",
              making_room_for: str | None = None) -> asyncio.Task[None]:
        """Take ``record`` out of the memory budget now and unload it from Triton in a task."""
        self.memory.release(record.target)
        record.state = ModelState.UNLOADING
        self.events.emit("unloading", record.target, reason=reason, **(
            {"for": making_room_for} if making_room_for is not None else {}))
        accepted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._unload(record, accepted))
        self.tasks[record.target] = task
        self.accepted[record.target] = accepted

        def finished(_task: asyncio.Task[None]) -> None:
            self.tasks.pop(record.target, None)
            self.accepted.pop(record.target, None)
            if not accepted.done():  # cancelled before Triton answered
                accepted.cancel()

        task.add_done_callback(finished)
        return task

    async def _unload(self, record: ModelRecord, accepted: asyncio.Future[None]) -> None:
        def accept() -> None:
            if not accepted.done():
                accepted.set_result(None)

        elapsed = await self.triton.unload(record, accept)
        record.state = ModelState.ON_DISK
        self.disk.unpin(record.target)
        self.completed += 1
        self.metrics.record("ModelUnloadingTime", elapsed * 1e6)
        self.metrics.set_loaded_model_count(self.memory.loaded_count())
        log.info("model=%s step=unload seconds=%.3f", self.events.name_of(record.target),
                 elapsed)
        self.events.emit("unloaded", record.target, seconds=elapsed)
        self.memory.changed.notify()
