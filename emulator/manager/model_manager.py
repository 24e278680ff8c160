"""The MME model lifecycle: TargetModel -> disk cache -> loaded in Triton, with LRU eviction.

``ModelManager`` is the coordinator: it decides *when* each step happens and keeps the records;
each step's *how* is a part with one job:

- ``memory.py`` (ModelMemory): the memory budget, its pins, measured sizes, who may be a victim;
- ``artifacts.py`` (ArtifactCache): the cache folder, downloads, extraction, the disk budget, and
  the store's same-key-new-bytes check;
- ``triton_side.py`` (TritonSide): installing into Triton's repository, loads, unloads, stub
  deaths, the memory probe, recycling Triton, the inference Triton's lookup race answers wrongly;
- ``unloads.py`` (Unloads): the unloads under way and when Triton accepted each;
- ``recovery.py`` (Recovery): a stub that died while serving, a process killed for memory,
  Triton recycled or restarted;
- ``usage.py``: the two budgets' use and a row per model, as the instance and the page read them;
- beneath them ``records.py`` (the record of a model, its states and errors), ``events.py`` (the
  log lines and observers), ``failures.py`` (every [U] decision), ``lru.py``, ``extract.py``,
  ``sources.py``, ``repository.py``. No part imports this module (.importlinter).

The lifecycle:

- ``acquire(target)`` pins a loaded model for the duration of one request. On a miss, one
  *single-flight* task per TargetModel downloads, extracts, installs and loads it; every concurrent
  request for that model waits on the same task, and loads of different models run side by side.
- Memory: a model counts as what its serving processes really hold once loaded (measured
  through ``memory_probe``: the growth of Triton's memory over the load plus the model's own
  stub processes; docs/memory.md), or as the bytes of its extracted files where nothing can be
  measured. Before a load, the least-recently-used models that are neither pinned (serving) nor
  wanted (a request is waiting for them) are unloaded until the new one fits ``memory_budget``
  and ``max_loaded_models``, the new one counted as it measured last time (its files' bytes the
  first time); once loaded and measured, more are unloaded if it holds more than that.
- Disk: artifacts that are not loaded, waited for or being brought in are deleted
  least-recently-used first to stay under ``disk_budget``.
- A waiting request gives up after the invocation timeout (ModelNotReadyException) while the load
  goes on in the background, as SageMaker does.
- Only loaded, idle models are eviction victims: a model still loading is never one (its unload
  would wait for the load, and the model that needs the room would starve behind it).
- Broken containers: a load whose Python stub dies at import (Triton then keeps it LOADING for
  ever) fails promptly; a model whose stub died while serving is taken out on Triton's first
  "Stub process ... is not healthy" answer and loads afresh on the next request. Triton cannot
  unload either (the unload waits on the dead stub), so the model comes back under a new Triton
  name (``generation``) and the old one is abandoned.
- Loads Triton cannot finish: a load past ``load_timeout_s`` fails with a ModelError, and so does
  every load whose stub died at import; Triton can cancel neither, each holds one of its few
  model-load threads (TRITON_LOAD_THREADS) for as long as it runs. The manager then asks the
  instance to recycle its Triton (``request_recycle``): at once after a timeout, and once dead
  stubs hold every load thread. Meanwhile loads wait for the new Triton (``triton_recycling``,
  ``triton_restarted``) and a load the recycle cut short, or that the old one completed while
  it was measured, is asked again of the new one.
- Failures outside the model (no disk, the store down) are ModelErrors saying what to fix
  (``failures.py``, which holds every [U] decision of the manager).
- Inferences go through ``infer(lease, ...)``, which resends the one answer that Triton gives
  for a model it has loaded when a load or unload of any model meets the lookup of its name
  (see LOOKUP_RACE_DELAYS_S).

What the hosting layer and the routes use: ``acquire``, ``infer``, ``unload``, ``add_observer``,
``describe``, ``loaded_file_bytes``, ``process_killed``, ``container_failed``, the recycle hooks
(``request_recycle``, ``triton_recycling``, ``triton_recycle_failed``, ``triton_restarted``),
``close``, ``hard_memory_limit`` (set by an instance that kills processes past its memory), and
for reading: ``records``, ``memory`` and ``disk`` (the two budgets' indexes), ``unloading`` (the
unloads under way, and how many completed), ``memory_probe``, ``source``, ``triton_repository``
and the counters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

from emulator.contract.body import Body
from emulator.faults.table import UnitFaults
from emulator.manager import failures, injected
from emulator.manager.artifacts import ArtifactCache
from emulator.manager.events import Events, ModelObserver, log
from emulator.manager.memory import ModelMemory
from emulator.manager.records import (
    Lease,
    ModelLoadFailed,
    ModelNotReady,
    ModelRecord,
    ModelState,
    Records,
    record_for,
)
from emulator.manager.recovery import Recovery
from emulator.manager.refresh import StoreRefresh
from emulator.manager.sources import ModelSource
from emulator.manager.triton_side import (
    LOAD_ERRORS,
    RecycleRequest,
    StubDied,
    TritonSide,
)
from emulator.manager.unloads import Unloads
from emulator.manager.usage import Usage, describe, usage_of
from emulator.metrics import InstanceMetrics
from emulator.triton.client import TritonClient, TritonResponse
from emulator.triton.memory import MemoryProbe
from emulator.triton.releases import Release


class Holding:
    """``ModelManager.acquire``: pins the model on entry, unpins it on exit."""

    __slots__ = ("_manager", "_target", "_timeout_s", "_lease")

    def __init__(self, manager: ModelManager, target: str, wait_timeout_s: float) -> None:
        self._manager = manager
        self._target = target
        self._timeout_s = wait_timeout_s
        self._lease: Lease | None = None

    async def __aenter__(self) -> Lease:
        self._lease = await self._manager._pin(self._target, self._timeout_s)
        return self._lease

    async def __aexit__(self, *exc_info: object) -> None:
        if self._lease is not None:
            await self._manager._release(self._lease)


class ModelManager:
    # [U] How often, at most, a served model's object is looked up in the store to see whether
    # it was overwritten (an emulator-only check: SageMaker does not look; it only warns).
    store_check_s: float = 30.0

    def __init__(
        self,
        *,
        source: ModelSource,
        cache_dir: Path,
        triton: TritonClient,
        triton_repository: Path,
        metrics: InstanceMetrics,
        memory_budget: int | None = None,
        max_loaded_models: int | None = None,
        gpu_memory_budget: int | None = None,
        disk_budget: int | None = None,
        max_extracted_bytes: int | None = None,
        load_timeout_s: float = 360.0,
        cache_enabled: bool = True,
        single_model: bool = False,
        default_model: str | None = None,
        gpus_available: bool = True,
        memory_probe: MemoryProbe | None = None,
        instance_gpus: int | None = None,
        release: Release | None = None,
        stream_downloads: bool = True,
        overlap_count_evictions: bool = True,
        overlap_byte_evictions: bool = True,
    ) -> None:
        self.source = source
        self.triton = triton
        self.triton_repository = triton_repository
        self.metrics = metrics
        self.load_timeout_s = load_timeout_s
        self.cache_enabled = cache_enabled
        self.memory_probe = memory_probe
        self.gpus_available = gpus_available
        # Extract a download as it arrives (store.open + extract_stream); False: copy the archive
        # to disk, then extract it (settings: MME_STREAM_DOWNLOADS).
        self.stream_downloads = stream_downloads
        # Under a count budget alone, start the load once Triton has accepted the victim's
        # unload (see _make_room); False: wait for the unload to complete.
        self.overlap_count_evictions = overlap_count_evictions
        # Under a byte budget, the same, where the victims' memory may be held a moment longer
        # (see _load_may_overlap_unloads); False: wait for the unloads to complete.
        self.overlap_byte_evictions = overlap_byte_evictions
        # The memory past which a model process is killed (the instance type's whole memory,
        # set by an instance that watches it); None: nothing is killed, the budget is books.
        self.hard_memory_limit: int | None = None
        self.faults: UnitFaults | None = None  # the rules its loads ask (the composition root's)
        self.records: Records = {}
        self._loads: dict[str, asyncio.Task[ModelRecord]] = {}
        self._events = Events(source)
        self._memory = ModelMemory(self.records, memory_budget, max_loaded_models,
                                   gpu_memory_budget)
        self._artifacts = ArtifactCache(
            source=source, cache_dir=cache_dir, records=self.records, events=self._events,
            metrics=metrics, disk_budget=disk_budget, max_extracted_bytes=max_extracted_bytes,
            bringing_in=self._loads.__contains__)
        self._triton = TritonSide(
            triton=triton, triton_repository=triton_repository, events=self._events,
            load_timeout_s=load_timeout_s, memory_probe=memory_probe, single_model=single_model,
            default_model=default_model, gpus_available=gpus_available,
            instance_gpus=instance_gpus, release=release)
        # The two budgets' indexes, read by the instance, the page and the metrics.
        self.memory = self._memory.index
        self.disk = self._artifacts.index
        self.artifacts_dir = self._artifacts.dir
        self.unloading = Unloads(self._memory, self.disk, self._triton, self._events, metrics)
        self._start_unload = self.unloading.start
        self._recovery = Recovery(self.records, self._memory, self._artifacts, self._triton,
                                  self._events, metrics)
        self._refresh = StoreRefresh(self._memory, self._artifacts, self._loads,
                                     self.unloading.tasks, self._start_unload)
        self.loads = 0
        # Every non-200 inference answer of our Triton passes by here (a stub that died).
        add_listener = getattr(triton, "add_infer_listener", None)
        if add_listener is not None:
            add_listener(self._recovery.infer_failed)

    # --- counters and hooks the instance reads or sets --------------------------------------

    @property
    def downloads(self) -> int:
        return self._artifacts.downloads

    @property
    def lookup_retries(self) -> int:
        """Inferences resent after Triton's lookup race."""
        return self._triton.lookup_retries

    @property
    def stub_failures(self) -> int:
        """Models whose stub died, at a load or while serving."""
        return self._recovery.stub_failures

    @property
    def _stub_registry(self) -> Path:  # read by tests that look at the stubs' records
        return self._triton.stub_registry

    @property
    def recycles(self) -> int:
        return self._triton.recycles

    @property
    def request_recycle(self) -> RecycleRequest | None:
        """Told that this Triton cannot recover: ``request_recycle(target, reason)``."""
        return self._triton.request_recycle

    @request_recycle.setter
    def request_recycle(self, request: RecycleRequest | None) -> None:
        self._triton.request_recycle = request

    def name_of(self, target: str) -> str:
        """The model as logs name it: its TargetModel, or on a single-model endpoint (no
        TargetModel) the name of the endpoint's model data, e.g. ``model.tar.gz``."""
        return self._events.name_of(target)

    def add_observer(self, observer: ModelObserver) -> None:
        """Call ``observer`` at every lifecycle step of every model (see ModelObserver)."""
        self._events.add_observer(observer)

    # --- the request path -------------------------------------------------------------------

    def acquire(self, target: str, wait_timeout_s: float) -> Holding:
        """``async with manager.acquire(target, timeout) as lease``: the loaded model for
        ``target``, pinned so it cannot be unloaded meanwhile."""
        return Holding(self, target, wait_timeout_s)

    async def _pin(self, target: str, wait_timeout_s: float) -> Lease:
        started = time.monotonic()
        record = record_for(self.records, target)
        record.demand += 1
        try:
            if self._refresh.pending(target):
                await self._refresh.refreshed(record, started, wait_timeout_s)
            hit = self._memory.is_loaded(record)
            while not self._memory.is_loaded(record):
                task = self._loads.get(target) or self._start_load(record)
                remaining = wait_timeout_s - (time.monotonic() - started)
                try:
                    await asyncio.wait_for(asyncio.shield(task), max(remaining, 0.001))
                except asyncio.TimeoutError:
                    raise ModelNotReady(target) from None
            self._memory.pin(target)
        finally:
            record.demand -= 1
            self._forget_if_unused(record)
        samples = [("ModelCacheHit", 1.0 if hit else 0.0)]
        if not hit:
            samples.append(("ModelLoadingWaitTime", (time.monotonic() - started) * 1e6))
        self.metrics.record_soon(samples)  # once the request has gone on to Triton
        record.last_used = time.time()
        self.disk.touch(target)
        self._artifacts.check_store_soon(record, self.store_check_s)
        return Lease(record, hit, record.entry, record.generation)

    async def _release(self, lease: Lease) -> None:
        record, target = lease.record, lease.record.target
        if record.generation == lease.generation:  # else its pin went with the abandoned copy
            self._memory.unpin(target)
        if not self.cache_enabled and not self._memory.is_pinned(target):
            # ModelCacheSetting=Disabled: unload and delete right after each invocation.
            await self._evict_completely(record)
        self._memory.changed.notify()

    def infer(self, lease: Lease, body: bytes | Body, headers: Mapping[str, str],
              timeout: float) -> Coroutine[Any, Any, TritonResponse]:
        """Send one inference to the model ``lease`` holds; Triton's answer.

        An answer of Triton's lookup race (LOOKUP_RACE_DELAYS_S) is not the model's: the request
        is sent again, within ``timeout`` overall, while ``lease`` still holds the model loaded.
        """
        assert lease.entry is not None
        record = lease.record

        def still_held() -> bool:
            return (record.generation == lease.generation
                    and record.state is ModelState.LOADED
                    and self.records.get(record.target) is record
                    and self._memory.is_pinned(record.target))

        # The Triton side's coroutine itself, not awaited in one more frame: this is every
        # call's path (mme bench overhead).
        return self._triton.infer(lease.entry, body, headers, timeout,
                                  self.name_of(record.target), still_held)

    def _start_load(self, record: ModelRecord) -> asyncio.Task[ModelRecord]:
        """The one load of ``record`` (single-flight: every caller waits on this task)."""
        task = asyncio.create_task(self._bring_in(record), name=f"load:{record.target}")
        self._loads[record.target] = task
        task.add_done_callback(self._load_finished)
        return task

    async def preload(self, target: str) -> None:
        """Download and load ``target`` now, as its first call would, without a call (``mme
        serve --preload``); raises what that call would have met (ModelLoadFailed, ...)."""
        record = record_for(self.records, target)
        record.demand += 1
        try:
            while not self._memory.is_loaded(record):
                await asyncio.shield(self._loads.get(target) or self._start_load(record))
        finally:
            record.demand -= 1
            self._forget_if_unused(record)

    def store_changed(self, target: str) -> None:
        """The store's object for ``target`` has changed (``mme serve --watch``): its next call
        loads the new version (``refresh.py``)."""
        if target in self.records:
            self._refresh.store_changed(target)

    def _load_finished(self, task: asyncio.Task[ModelRecord]) -> None:
        target = task.get_name().removeprefix("load:")
        if self._loads.get(target) is task:
            del self._loads[target]
        if not task.cancelled() and task.exception() is not None:
            log.warning("model=%s step=load outcome=failed error=%r", self.name_of(target),
                        task.exception())
            self._events.emit("failed", target, error=repr(task.exception()))
            record = self.records.get(target)
            if record is not None:
                self._forget_if_unused(record)

    def _forget_if_unused(self, record: ModelRecord) -> None:
        """Drop a record that has nothing on disk, no load under way and nobody waiting."""
        if (record.state is ModelState.NEW and not record.demand
                and record.target not in self._loads):
            self.records.pop(record.target, None)

    # --- bringing a model in ----------------------------------------------------------------

    async def _bring_in(self, record: ModelRecord) -> ModelRecord:
        pending_unload = self.unloading.tasks.get(record.target)
        if pending_unload is not None:
            await asyncio.shield(pending_unload)
        load_fault = injected.load_fault(self.faults, record, self.artifacts_dir)
        await self._artifacts.bring_to_disk(record, self.stream_downloads,
                                            self.unloading.tasks.values(),
                                            injected.download_fault(self.faults, record))
        await self._triton.install(record)
        try:
            tearing_down = await self._make_room(record)
        except BaseException:
            await self._triton.uninstall(record.installed)
            raise
        record.state = ModelState.LOADING
        self._events.emit("loading", record.target, size=record.size)
        started = time.monotonic()
        before = await self._triton.triton_bytes()
        gpu_before = await self._triton.triton_gpu_bytes() if self.gpus_available else None
        try:
            await injected.loaded_as_the_fault_says(load_fault)
            epoch = await self._triton.load(record)
        except LOAD_ERRORS as exc:
            self._memory.release(record.target)
            self.disk.unpin(record.target)
            record.state = ModelState.ON_DISK
            failure = self._triton.load_failed(record, exc)
            await self._triton.uninstall(record.installed)
            self._memory.changed.notify()
            if isinstance(exc, StubDied):
                self._recovery.stub_failures += 1
            # Our own messages stand alone; Triton's answer keeps its cause for the log.
            raise failure from (None if isinstance(exc, (asyncio.TimeoutError, StubDied))
                                else exc)
        elapsed = time.monotonic() - started
        await _measure(self._triton, self._memory, record, before, gpu_before, tearing_down)
        await self._refuse_if_too_large(record)
        if not self._triton.serves(epoch):
            # Its Triton was replaced while it was measured, and the recycle, which leaves
            # every loaded model on disk, found it still loading: on disk too. The requests
            # waiting for it load it again, in the new Triton.
            log.info("model=%s step=load outcome=again reason=\"Triton was recycled while the "
                     "load was measured\"", self.name_of(record.target))
            self._memory.release(record.target)
            self.disk.unpin(record.target)
            record.state = ModelState.ON_DISK
            self._memory.changed.notify()
            return record
        self.metrics.record("ModelLoadingTime", elapsed * 1e6)
        record.state = ModelState.LOADED
        self.loads += 1
        self.metrics.set_loaded_model_count(self.loaded_count())
        self._events.loaded(record, elapsed)
        await self._evict_over_measured(record)
        self._memory.changed.notify()
        return record

    async def _refuse_if_too_large(self, record: ModelRecord) -> None:
        """A model that holds more than the whole budget once loaded cannot stay: it is
        unloaded and its load fails with the 507 a container out of memory answers (the next
        request is refused before loading: its measured size is known)."""
        gpu = self._memory.too_large_for_gpu(record)
        if not gpu and not self._memory.too_large(record):
            return
        message = self._memory.too_large_message(record, gpu)
        log.warning("model=%s step=load outcome=out-of-%smemory measured=%s gpu=%s",
                    self.name_of(record.target), "gpu-" if gpu else "", record.measured,
                    record.measured_gpu)
        await self._start_unload(record, "out of GPU memory" if gpu else "out of memory")
        raise ModelLoadFailed(failures.INSUFFICIENT_STORAGE, failures.body(message))

    async def _evict_over_measured(self, record: ModelRecord) -> None:
        """A model that holds more than it was counted as: unload LRU others until the budget
        holds again (as a SageMaker instance does when memory runs short)."""
        async with self._memory.lock:
            for target in self._memory.over_measured(record):
                log.info("model=%s step=evict reason=measured for=%s measured=%d",
                         self.name_of(target), self.name_of(record.target), record.measured or 0)
                self._start_unload(self.records[target], "lru", record.target)

    async def _make_room(self, record: ModelRecord) -> list[asyncio.Task[None]]:
        """Reserve memory for ``record``, unloading LRU models that nobody is using; returns the
        unloads still under way (Triton has accepted them) that its measure must wait for."""
        unloads: list[asyncio.Task[None]] = []

        def evict(victims: list[str]) -> None:
            unloads.extend(self._start_unload(self.records[t], "lru", record.target)
                           for t in victims)

        victims = await self._memory.reserve(record, self.load_timeout_s, evict)
        # No await since the reservation: its artifact cannot have been chosen for deletion.
        self.disk.pin(record.target)
        if not unloads:
            return []
        if self._load_may_overlap_unloads([self.records[t] for t in victims]):
            await asyncio.gather(*(self.unloading.accepted[t] for t in victims))
            # A byte budget counts the model as it measures: read without the victims.
            counted_in_bytes = self._memory.budget_bytes is not None
            return [task for task in unloads if not task.done()] if counted_in_bytes else []
        await asyncio.gather(*unloads)
        return []

    def _load_may_overlap_unloads(self, victims: list[ModelRecord]) -> bool:
        """May a load start before the unloads that make room for it have completed?
        (``ModelMemory.may_overlap_unloads``)."""
        return self._memory.may_overlap_unloads(
            victims, count_budget=self.overlap_count_evictions,
            byte_budget=self.overlap_byte_evictions, gpus=self.gpus_available,
            hard_limit=self.hard_memory_limit)

    # --- taking models out ------------------------------------------------------------------

    async def _evict_completely(self, record: ModelRecord) -> None:
        async with self._memory.lock:
            if not self._memory.holds(record.target) or self._memory.is_pinned(record.target):
                return
            task = self._start_unload(record, "cache disabled")
        await task
        if record.state is ModelState.ON_DISK and not record.demand:
            await self._artifacts.delete(record)

    async def unload(self, target: str) -> bool:
        """Unload one model on request (keeps it on disk). False if it was not loaded."""
        record = self.records.get(target)
        if record is None:
            return False
        async with self._memory.lock:
            if not self._memory.holds(target) or self._memory.is_pinned(target):
                return False
            task = self._start_unload(record)
        await task
        return True

    # --- failures outside the manager's own steps (``recovery.py``) ---------------------------

    def triton_recycling(self, target: str, reason: str) -> None:
        """The instance is replacing its Triton (``target``'s load caused it): no model is
        served by the old one from now on (each reloads on demand) and loads wait for the new
        one. The requests under way in the old one finish there (the instance waits for them)."""
        self._recovery.triton_recycling(target, reason)

    def triton_recycle_failed(self) -> None:
        """The launcher could not replace its Triton: loads go to the one there is."""
        self._triton.recycle_failed()

    async def triton_restarted(self) -> None:
        """Triton came back empty: everything is on disk only and reloads on demand."""
        await self._recovery.triton_restarted()

    async def container_failed(self, target: str, status: int, body: bytes) -> bool:
        """Tell the manager what Triton answered for ``target``; True if it took the model out.

        Not needed with this project's TritonClient (its listener calls the same code); kept for
        callers with another client.
        """
        return self._recovery.container_failed(target, status, body)

    def process_killed(self, triton_model: str, reason: str) -> str | None:
        """A model's process was killed for memory (the instance's watch); the TargetModel
        whose Triton model it was, or None."""
        return self._recovery.process_killed(triton_model, reason)

    async def close(self) -> None:
        for task in list(self._loads.values()) + list(self.unloading.tasks.values()):
            task.cancel()
        self._triton.close()
        self._artifacts.close()

    # --- introspection ----------------------------------------------------------------------

    def loaded_file_bytes(self) -> int:
        """The extracted files' bytes of the models counted in memory (beside the measured)."""
        return self._memory.loaded_file_bytes()

    def usage(self) -> Usage:
        return usage_of(self.memory, self.disk, self.loaded_file_bytes())

    def state_of(self, target: str) -> ModelState | None:
        """Where ``target`` is in its life here (None: this manager has never seen it)."""
        record = self.records.get(target)
        return None if record is None else record.state

    def is_on_disk(self, target: str) -> bool:
        record = self.records.get(target)
        return record is not None and record.artifact_dir is not None

    def loaded_count(self) -> int:
        return self._memory.loaded_count()

    def describe(self) -> list[dict[str, Any]]:
        """Every model this manager knows, LRU order first (the page's and the API's rows)."""
        return describe(self.records, self.memory)


async def _measure(triton: TritonSide, memory: ModelMemory, record: ModelRecord,
                   before: int | None, gpu_before: int | None,
                   tearing_down: list[asyncio.Task[None]]) -> None:
    """What ``record`` holds once loaded: Triton's bytes (and GPU bytes) against before."""
    if before is not None:
        if tearing_down:
            # Read once the victims are gone, as when the load waited for them: a victim's
            # stub still running shares its pages with this model's, halving them in its
            # figure. Their teardown began before this load, so this wait is short.
            await asyncio.wait(tearing_down)
        held = await triton.held_after_load(record)
        if held is not None:
            memory.measured(record, before, *held)
    if gpu_before is not None:
        gpu_held = await triton.held_after_load(record, gpu=True)
        if gpu_held is not None:
            memory.measured_gpu(record, gpu_before, *gpu_held)
