"""What the model manager does when Triton or a model's process fails under it.

- A model's Python stub died while serving: Triton answers "Stub process ... is not healthy"
  for it (``failures.stub_unhealthy``); the model is taken out on that first answer (on disk
  only, its Triton copy abandoned: Triton cannot unload it) and loads afresh, under a new
  Triton name, on the next request.
- A model's process was killed for memory (the instance's watch): said in the log and to the
  observers; its next answer is Triton's "not healthy", which takes it out as above.
- Triton is recycled (replaced) or restarted: every loaded model is on disk only and reloads
  on demand; a load under way keeps its reservation (it is asked again of the new Triton, or
  fails and gives it back).

Beside the coordinator (``model_manager.py``), which owns the records; this part changes a
record's state and the two budgets' books the way an unload does, without asking Triton.
"""

from __future__ import annotations

from emulator.manager import failures
from emulator.manager.artifacts import ArtifactCache
from emulator.manager.events import Events, log
from emulator.manager.memory import ModelMemory
from emulator.manager.records import ModelRecord, ModelState, Records
from emulator.manager.triton_side import TritonSide
from emulator.metrics import InstanceMetrics


class Recovery:
    """One manager's answers to failures outside its own steps."""

    def __init__(self, records: Records, memory: ModelMemory, artifacts: ArtifactCache,
                 triton: TritonSide, events: Events, metrics: InstanceMetrics) -> None:
        self._records = records
        self._memory = memory
        self._disk = artifacts.index
        self._triton = triton
        self._events = events
        self._metrics = metrics
        # Models whose stub died, at a load or while serving.
        self.stub_failures = 0

    def triton_recycling(self, target: str, reason: str) -> None:
        self._triton.recycling(target)
        self._events.emit("recycling", target, reason=reason)
        self.forget_loaded("triton recycled")

    async def triton_restarted(self) -> None:
        self.forget_loaded("triton restarted")
        recycle = self._triton.restarted()
        if recycle is not None:
            target, seconds = recycle
            log.warning("model=%s step=recycled seconds=%.3f (its instance's Triton was "
                        "replaced; models reload on demand)", self._events.name_of(target),
                        seconds)
            self._events.emit("recycled", target, seconds=seconds)
        self._memory.changed.notify()

    def forget_loaded(self, reason: str) -> None:
        """Every loaded model is on disk only (a load under way keeps its reservation: it is
        asked again of the new Triton, or fails and gives it back)."""
        for target in list(self._memory.index.keys_lru_first()):
            record = self._records.get(target)
            if record is None or record.state is not ModelState.LOADED:
                continue
            self._memory.release(target)
            self._disk.unpin(target)
            record.state = ModelState.ON_DISK
            self._events.emit("unloaded", target, reason=reason)
        self._metrics.set_loaded_model_count(self._memory.loaded_count())

    def infer_failed(self, triton_model: str, status: int, body: bytes) -> None:
        """TritonClient listener: a non-200 inference answer from our Triton."""
        answer = body.decode(errors="replace")
        if not failures.stub_unhealthy(answer):
            return
        for record in list(self._records.values()):
            if triton_model in record.installed or triton_model == record.entry:
                self.take_out_broken(record, answer)
                return

    def container_failed(self, target: str, status: int, body: bytes) -> bool:
        """What Triton answered for ``target``; True if the model was taken out."""
        record = self._records.get(target)
        answer = body.decode(errors="replace")
        if record is None or status == 200 or not failures.stub_unhealthy(answer):
            return False
        return self.take_out_broken(record, answer)

    def take_out_broken(self, record: ModelRecord, answer: str) -> bool:
        """A loaded model's stub died while serving: forget Triton's copy, reload on demand."""
        if record.state is not ModelState.LOADED:
            return False
        self.stub_failures += 1
        log.warning("model=%s step=take-out reason=%r", self._events.name_of(record.target),
                    answer[:200])
        self._events.emit("taken-out", record.target, reason=answer[:200])
        self._memory.release(record.target)
        self._disk.unpin(record.target)
        record.state = ModelState.ON_DISK
        names = list(record.installed)
        self._triton.abandon(record)
        self._triton.spawn(self._triton.uninstall(names), f"uninstall:{record.target}")
        self._metrics.set_loaded_model_count(self._memory.loaded_count())
        self._memory.changed.notify()
        return True

    def process_killed(self, triton_model: str, reason: str) -> str | None:
        """A model's process was killed for memory: say it, naming the TargetModel whose
        Triton model it was (its next answer takes it out, ``infer_failed``). The TargetModel,
        or None."""
        target = next((t for t, r in self._records.items() if triton_model in r.installed),
                      None)
        name = self._events.name_of(target) if target is not None else triton_model
        log.warning("model=%s step=oom-kill reason=%r", name, reason)
        self._events.emit("oom-killed", target if target is not None else triton_model,
                          reason=reason)
        return target

