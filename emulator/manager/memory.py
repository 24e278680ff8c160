"""Memory and pins: which models the memory budget counts, at what size, and who may make way.

One job: the accounting of memory. The budget (``--memory-budget`` bytes and/or
``--max-loaded-models``, and on a GPU instance its GPU memory, ``--gpu-memory-budget``) is an
``LruIndex`` whose entries are the models loaded or loading, each counted as it measured once
loaded (``ModelRecord.memory_size``; its files' bytes before it has been measured; its GPU
memory, ``ModelRecord.gpu_size``, none before), and pinned while a request uses it. Here are
the rules of who may be a victim (never a model someone waits for, nor one not yet loaded: its
unload would wait for its load and a stuck load would starve the model that needs the room), the
wait for room when every loaded model is serving, and the growth of a reservation to what a load
measured.

Why apart: these rules decide correctness under load (what is evicted, what waits) and need no
Triton and no disk to reason about; the coordinator carries the chosen evictions out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from emulator.manager import failures
from emulator.manager.lru import DoesNotFit, LruIndex
from emulator.manager.records import Change, ModelLoadFailed, ModelRecord, ModelState, Records


class ModelMemory:
    def __init__(self, records: Records, budget_bytes: int | None,
                 max_models: int | None, gpu_budget_bytes: int | None = None) -> None:
        self.records = records
        self.index = LruIndex(budget_bytes, max_models, gpu_budget_bytes)
        # Held while victims are chosen and their unloads started: two loads must not pick
        # the same victim, nor count the same free room.
        self.lock = asyncio.Lock()
        self.changed = Change()  # pins, loads, unloads: room may have been made

    @property
    def budget_bytes(self) -> int | None:
        return self.index.capacity_bytes

    @property
    def gpu_budget_bytes(self) -> int | None:
        return self.index.capacity_gpu_bytes

    def holds(self, target: str) -> bool:
        """Counted in memory: loaded, loading, or reserved for a load about to start."""
        return target in self.index

    def is_loaded(self, record: ModelRecord) -> bool:
        return record.state is ModelState.LOADED and record.target in self.index

    # --- pins -------------------------------------------------------------------------------

    def pin(self, target: str) -> None:
        self.index.pin(target)

    def unpin(self, target: str) -> None:
        self.index.unpin(target)

    def is_pinned(self, target: str) -> bool:
        return self.index.is_pinned(target)

    # --- making room ------------------------------------------------------------------------

    async def reserve(self, record: ModelRecord, timeout_s: float,
                      evict: Callable[[list[str]], None]) -> list[str]:
        """Reserve memory for ``record``; the victims chosen to make way for it.

        ``evict(victims)`` is called under the lock, before the reservation, so the victims'
        unloads have started (they are out of the index) before anyone else looks. When only
        models in use stand in the way, waits for a change (a request let go of its model, an
        unload ended) for at most ``timeout_s``: then a 507, as a container out of memory.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            changed = self.changed.next()  # taken before looking: no change can be missed
            async with self.lock:
                victims = self._victims_for(record)
                if victims is not None:
                    evict(victims)
                    self.index.add(record.target, record.memory_size,  # the reservation
                                   record.gpu_size)
                    return victims
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ModelLoadFailed(507, '{"error":"out of memory: every loaded model is '
                                           'serving requests"}')
            await asyncio.wait((changed,), timeout=remaining)  # never cancels the shared future

    def _victims_for(self, record: ModelRecord) -> list[str] | None:
        # Never a victim: a model someone waits for, or one not (yet) loaded, whose unload
        # would wait for its load to end (a stuck load would starve us).
        spared = frozenset(t for t, r in self.records.items() if t != record.target
                           and (r.demand or r.state is not ModelState.LOADED))
        try:
            return self.index.victims(record.memory_size, exclude=spared,
                                      incoming_gpu=record.gpu_size)
        except DoesNotFit as exc:
            raise ModelLoadFailed(failures.INSUFFICIENT_STORAGE, failures.body(
                self.too_large_message(record, gpu=exc.gpu))) from exc

    def too_large_message(self, record: ModelRecord, gpu: bool) -> str:
        if gpu:
            assert self.index.capacity_gpu_bytes is not None
            return failures.out_of_gpu_memory(record.target, record.gpu_size,
                                              self.index.capacity_gpu_bytes)
        assert self.index.capacity_bytes is not None
        return failures.out_of_memory(record.target, record.memory_size,
                                      self.index.capacity_bytes, record.measured is not None)

    def release(self, target: str) -> None:
        """``target`` holds no memory any more (unloading, failed, or Triton forgot it)."""
        self.index.remove(target)

    # --- measured sizes ---------------------------------------------------------------------

    def _loading(self) -> int:
        return max(sum(1 for r in self.records.values() if r.state is ModelState.LOADING), 1)

    def measured(self, record: ModelRecord, before: int, after: int, own: int) -> None:
        """``record`` loaded: Triton held ``before`` bytes when its load started, ``after``
        now, and its own stubs hold ``own``; count it as what it holds (docs/memory.md).

        Triton's growth over the load is shared evenly by the loads under way at its end (they
        grew it together); a shrink counts as none. The model's own stubs are its alone.
        """
        growth = max(after - before, 0) // self._loading()
        record.measured = growth + own
        record.measured_growth = growth
        if record.target in self.index:  # its reservation, as measured
            self.index.add(record.target, record.measured, record.gpu_size)

    def measured_gpu(self, record: ModelRecord, before: int, after: int, own: int) -> None:
        """``record`` loaded: Triton's own processes held ``before`` bytes of GPU memory when
        its load started and ``after`` now, and its own stubs hold ``own``: counted as host
        memory is (``measured``)."""
        record.measured_gpu = max(after - before, 0) // self._loading() + own
        entry = self.index.get(record.target)
        if entry is not None:
            self.index.add(record.target, entry.size, record.measured_gpu)

    def too_large(self, record: ModelRecord) -> bool:
        """Does ``record`` hold more than the whole budget once loaded (it cannot stay)?"""
        budget = self.index.capacity_bytes
        return budget is not None and record.measured is not None and record.measured > budget

    def too_large_for_gpu(self, record: ModelRecord) -> bool:
        """Does ``record`` hold more GPU memory than the whole GPU budget once loaded?"""
        budget = self.index.capacity_gpu_bytes
        return budget is not None and record.gpu_size > budget

    def over_measured(self, record: ModelRecord) -> list[str]:
        """``record`` holds more than it was counted as: the LRU others to unload until the
        budget holds again (as a SageMaker instance does when memory runs short). Call under
        ``lock``."""
        spared = frozenset(t for t, r in self.records.items()
                           if t == record.target or r.demand or r.state is not ModelState.LOADED)
        return self.index.over_budget(exclude=spared)

    # --- what the instance and the page read ------------------------------------------------

    def loaded_count(self) -> int:
        return sum(1 for t in self.index.keys_lru_first()
                   if self.records[t].state is ModelState.LOADED)

    def loaded_file_bytes(self) -> int:
        """The extracted files' bytes of the models counted in memory (beside the measured)."""
        return sum(r.size for t, r in self.records.items() if t in self.index)

    def may_overlap_unloads(self, victims: list[ModelRecord], *, count_budget: bool,
                            byte_budget: bool, gpus: bool, hard_limit: int | None) -> bool:
        """May a load start before the unloads that make room for it (``victims``) have
        completed?

        Triton's Python backend spends a second in an unload doing nothing: it sleeps one
        second (its stub's health check) before it asks the stub to finalize, then waits for
        the stub's health thread (300 ms ticks) to end (docs/memory.md, "Where a miss goes").
        Waiting for that doubled the cost of a miss under a full budget. Once Triton has
        accepted the unload it serves the victim no more, so the load starts then, and the
        victim's teardown goes on beside it; the order the user sees (unloading, then loading)
        is kept.

        A count budget (--max-loaded-models) counts the models that serve or are loading: so
        always [U]. A byte budget (--memory-budget) stands for memory, which is free only once
        the unload has completed. The victims' memory is held a moment longer than the books
        say; that changes nothing a model sees unless a process could be killed for it. So the
        load waits as before where the instance kills model processes past its memory (an
        InstanceType, ``hard_limit``) and the victims' memory with what stays counted
        would pass that, and where Triton has GPUs [U]: a budget counts host memory, and a
        victim's teardown may free GPU memory the next load needs.

        ``count_budget``/``byte_budget``: whether the manager lets a load overlap its victims'
        unloads under each kind of budget; ``gpus``: Triton has GPUs; ``hard_limit``: the
        memory past which a model process is killed (None: nothing is killed).
        """
        if self.budget_bytes is None:
            return count_budget
        if not byte_budget or gpus:
            return False
        held = self.index.total_bytes + sum(victim.memory_size for victim in victims)
        return hard_limit is None or held <= hard_limit
