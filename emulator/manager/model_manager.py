"""The MME model lifecycle: TargetModel -> disk cache -> loaded in Triton, with LRU eviction.

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
  ``triton_restarted``) and a load the recycle cut short is asked again of the new one.
- Failures outside the model (no disk, the store down) are ModelErrors saying what to fix
  (``failures.py``, which holds every [U] decision of the manager).
- Inferences go through ``infer(lease, ...)``, which resends the one answer that Triton gives
  for a model it has loaded when a load or unload of any model meets the lookup of its name
  (see LOOKUP_RACE_DELAYS_S).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import logging
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.contract.body import Body
from emulator.manager import failures, repository
from emulator.manager.extract import (
    ArchiveTooLarge,
    extract_archive,
    extract_stream,
    tree_size,
)
from emulator.manager.failures import DiskFull, StoreUnavailable
from emulator.manager.lru import DoesNotFit, LruIndex
from emulator.manager.sources import ModelSource
from emulator.metrics import InstanceMetrics
from emulator.public_names import public_text
from emulator.triton import stubs
from emulator.triton.client import (
    TritonClient,
    TritonError,
    TritonResponse,
    TritonUnreachable,
)
from emulator.triton.memory import MemoryProbe

log = logging.getLogger(__name__)

# Told each lifecycle step (the live page's feed): ``observer(step, target, details)``. Steps:
# downloading, downloaded, loading, loaded, failed, unloading (details: reason, and ``for`` when
# the LRU made room for another model), unloaded, taken-out, deleted; and for the whole instance,
# named after the model that caused it: recycling (reason), recycled (seconds).
ModelObserver = Callable[[str, str, dict[str, Any]], None]


# Triton's SageMaker server answers 507 (not 400) to a load whose error text contains one of these
# (SageMakerMMECheckOOMError); SageMaker then unloads unused models.
OOM_MARKERS = ("CUDA out of memory", "out of memory", "OOM", "MemoryError",
               "CUBLAS_STATUS_ALLOC_FAILED", "failed to allocate memory", "No space left on device")

# A stub that exits normally (the model-level stub, once the model is loaded) is reaped by Triton
# at once; one that died at import stays a zombie for ever. Polled while a load is pending.
STUB_POLL_S = 0.25
ZOMBIE_GRACE_S = 1.5

# Triton's lookup race. With --model-namespacing=true (the default of SageMaker's ``serve``),
# Triton finds the model of an inference by its name in a map (``global_map_``) that every load
# and every unload request, of any model, re-assigns, and the lookup does not take the lock that
# guards it: an inference that meets such a request may be answered 400 "Request for unknown
# model: '<name>' is not found" although the model is loaded. ``mme bench scale`` met it about
# once per few hundred loads at 200 models, more often the more models Triton has met (the map
# keeps one entry per name ever loaded). The answer comes from the lookup, before the model
# runs, so sending the request again is safe; it is resent while the request's lease holds the
# model loaded (pinned: the manager cannot have unloaded it), after each of these pauses in
# turn. Not at once only: on a busy machine the thread re-assigning the map may be descheduled
# half-way, and the map then stays torn for milliseconds (at 1,000 models, three resends in a
# row met it).
LOOKUP_RACE_DELAYS_S = (0.0, 0.01, 0.05, 0.2, 0.5, 1.0)
# The answer's text (``ModelRepositoryManager::FindModelIdentifier``), for the model's name.
LOOKUP_RACE_ANSWER = "Request for unknown model: '{name}' is not found"
# Triton 2.51 runs at most this many model loads at once (the default of its
# --model-load-thread-count; measured: with four loads that never end, a fifth never starts).
TRITON_LOAD_THREADS = 4
# Told that this Triton cannot recover: ``request_recycle(target, reason)`` (the instance's).
RecycleRequest = Callable[[str, str], None]
# Triton's repository index fails ("failed to stat file") when a model folder is removed while
# it lists them; an unload whose wait for completion meets that asks again, at most this often.
UNLOAD_WAIT_RETRIES = 3


class ModelState(str, enum.Enum):
    NEW = "new"
    DOWNLOADING = "downloading"
    ON_DISK = "on_disk"
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADING = "unloading"


class ModelNotReady(Exception):
    """The model is still on its way in after the caller's wait timeout."""


class _StubDied(Exception):
    def __init__(self, instances: list[str]) -> None:
        super().__init__(", ".join(instances))
        self.instances = instances


class ModelLoadFailed(Exception):
    """The container could not load the model: ``status`` and ``body`` are what it answered."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(body)
        self.status = status
        self.body = body


@dataclass
class ModelRecord:
    target: str
    key: str
    state: ModelState = ModelState.NEW
    artifact_dir: Path | None = None
    size: int = 0
    entry: str | None = None  # the namespaced Triton name requests go to
    installed: list[str] = field(default_factory=list)
    demand: int = 0  # requests waiting for this model to be loaded
    last_used: float = 0.0
    # Bumped when Triton's copy is abandoned (its stub died): the next load uses new names.
    generation: int = 0
    # What its serving processes held after its last load (None: never measured), and of it
    # the part that is Triton's growth (the rest is its own stubs').
    measured: int | None = None
    measured_growth: int = 0
    # The store's object as downloaded (mtime:size of a file, an S3 ETag), the one it holds
    # now when that differs (overwritten: the copy on disk and in memory is still served), and
    # when the store was last asked.
    version: str | None = None
    store_version: str | None = None
    store_checked: float = 0.0

    @property
    def store_changed(self) -> bool:
        return self.version is not None and self.store_version not in (None, self.version)

    @property
    def memory_size(self) -> int:
        """What the memory budget counts it as: measured, else its files' bytes."""
        return self.measured if self.measured is not None else self.size

    @property
    def triton_key(self) -> str:
        return self.key if not self.generation else f"{self.key}g{self.generation}"


@dataclass(frozen=True)
class Lease:
    """One request's hold on a loaded model."""

    record: ModelRecord
    cache_hit: bool  # it was loaded already when the request came (ModelCacheHit = 1)
    # Captured at acquire: a reload under a new generation must not rename this request's model.
    entry: str | None = None
    generation: int = 0


class Change:
    """A change that others may wait for: ``next()`` is a future set at the next ``notify()``.

    A waiter takes it before it looks at the state, so a change made between its look and its
    wait still wakes it; ``notify()`` costs one test when nobody waits (every invocation ends
    with one).
    """

    def __init__(self) -> None:
        self._next: asyncio.Future[None] | None = None

    def next(self) -> asyncio.Future[None]:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        return self._next

    def notify(self) -> None:
        waiting, self._next = self._next, None
        if waiting is not None and not waiting.done():
            waiting.set_result(None)


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


def artifact_key(target: str) -> str:
    """A short, stable, filesystem- and Triton-safe id for a TargetModel (SageMaker uses a hash)."""
    return hashlib.sha256(target.encode()).hexdigest()[:12]


class ModelManager:
    # Extract a download as it arrives (store.open + extract_stream). False: copy the archive to
    # disk, then extract it (the behaviour before; ``mme bench coldstart`` measures both).
    stream_downloads: bool = True
    # Under a count budget alone, start the load once Triton has accepted the victim's unload
    # (see _make_room). False: wait for the unload to complete (``mme bench scale`` measures
    # both).
    overlap_count_evictions: bool = True
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
        disk_budget: int | None = None,
        max_extracted_bytes: int | None = None,
        load_timeout_s: float = 360.0,
        cache_enabled: bool = True,
        single_model: bool = False,
        default_model: str | None = None,
        gpus_available: bool = True,
        memory_probe: MemoryProbe | None = None,
    ) -> None:
        self.source = source
        self.artifacts_dir = cache_dir / "artifacts"
        self.triton = triton
        self.triton_repository = triton_repository
        self.metrics = metrics
        self.max_extracted_bytes = max_extracted_bytes
        self.load_timeout_s = load_timeout_s
        self.cache_enabled = cache_enabled
        # SingleModel endpoints: serve's start-up rules pick the model (read_single_model_layout).
        self.single_model = single_model
        self.default_model = default_model
        self.gpus_available = gpus_available
        self.memory_probe = memory_probe
        self.memory = LruIndex(memory_budget, max_loaded_models)
        self.disk = LruIndex(disk_budget)
        self.records: dict[str, ModelRecord] = {}
        self._loads: dict[str, asyncio.Task[ModelRecord]] = {}
        self._unloads: dict[str, asyncio.Task[None]] = {}
        # Set once Triton has accepted the unload of that target (it serves it no more).
        self._unload_accepted: dict[str, asyncio.Future[None]] = {}
        self._memory_lock = asyncio.Lock()
        self._changed = Change()  # pins, loads, unloads: room may have been made
        self.downloads = 0
        self.loads = 0
        self.unloads = 0
        self.stub_failures = 0
        self.lookup_retries = 0  # inferences resent after Triton's lookup race
        self._background: set[asyncio.Task[None]] = set()
        self._stub_registry = stubs.registry_for(triton_repository)
        self._observers: list[ModelObserver] = []
        # Recycling: who replaces this Triton, the loads it will never finish (Triton names),
        # set while a Triton is up to take loads, bumped at each replacement.
        self.request_recycle: RecycleRequest | None = None
        self._wedged: set[str] = set()
        self._triton_up = asyncio.Event()
        self._triton_up.set()
        self._triton_epoch = 0
        self._recycle: tuple[str, float] | None = None  # (target, started) of the one under way
        self.recycles = 0
        # Item 4 without wiring: every non-200 inference answer of our Triton passes by here.
        add_listener = getattr(triton, "add_infer_listener", None)
        if add_listener is not None:
            add_listener(self._infer_failed)

    def name_of(self, target: str) -> str:
        """The model as logs name it: its TargetModel, or on a single-model endpoint (no
        TargetModel) the name of the endpoint's model data, e.g. ``model.tar.gz``."""
        return target or self.source.location.rstrip("/").rsplit("/", 1)[-1]

    def add_observer(self, observer: ModelObserver) -> None:
        """Call ``observer`` at every lifecycle step of every model (see ModelObserver)."""
        self._observers.append(observer)

    def _emit(self, step: str, target: str, **details: Any) -> None:
        for observer in self._observers:
            try:
                observer(step, target, details)
            except Exception:  # an observer's bug must never break a load or an unload
                log.exception("model observer failed on step=%s", step)

    # --- the request path -------------------------------------------------------------------

    def acquire(self, target: str, wait_timeout_s: float) -> Holding:
        """``async with manager.acquire(target, timeout) as lease``: the loaded model for
        ``target``, pinned so it cannot be unloaded meanwhile."""
        return Holding(self, target, wait_timeout_s)

    async def _pin(self, target: str, wait_timeout_s: float) -> Lease:
        started = time.monotonic()
        record = self._record(target)
        hit = record.state is ModelState.LOADED and target in self.memory
        record.demand += 1
        try:
            while not (record.state is ModelState.LOADED and target in self.memory):
                task = self._loads.get(target)
                if task is None:
                    task = asyncio.create_task(self._bring_in(record), name=f"load:{target}")
                    self._loads[target] = task
                    task.add_done_callback(self._load_finished)
                remaining = wait_timeout_s - (time.monotonic() - started)
                try:
                    await asyncio.wait_for(asyncio.shield(task), max(remaining, 0.001))
                except asyncio.TimeoutError:
                    raise ModelNotReady(target) from None
            self.memory.pin(target)
        finally:
            record.demand -= 1
            self._forget_if_unused(record)
        samples = [("ModelCacheHit", 1.0 if hit else 0.0)]
        if not hit:
            samples.append(("ModelLoadingWaitTime", (time.monotonic() - started) * 1e6))
        self.metrics.record_soon(samples)  # once the request has gone on to Triton
        record.last_used = time.time()
        self.disk.touch(target)
        self._check_store_soon(record)
        return Lease(record, hit, record.entry, record.generation)

    async def _release(self, lease: Lease) -> None:
        record, target = lease.record, lease.record.target
        if record.generation == lease.generation:  # else its pin went with the abandoned copy
            self.memory.unpin(target)
        if not self.cache_enabled and not self.memory.is_pinned(target):
            # ModelCacheSetting=Disabled: unload and delete right after each invocation.
            await self._evict_completely(record)
        self._changed.notify()

    async def infer(self, lease: Lease, body: bytes | Body, headers: Mapping[str, str],
                    timeout: float) -> TritonResponse:
        """Send one inference to the model ``lease`` holds; Triton's answer.

        An answer of Triton's lookup race (LOOKUP_RACE_DELAYS_S) is not the model's: the request
        is sent again, within ``timeout`` overall.
        """
        assert lease.entry is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        response = await self.triton.infer(lease.entry, body, headers, timeout=timeout)
        for pause in LOOKUP_RACE_DELAYS_S:
            if not self._lost_in_lookup(lease, response) or loop.time() + pause >= deadline:
                break
            self.lookup_retries += 1
            log.info("model=%s step=infer outcome=resent pause=%.2f reason=%r (Triton's lookup "
                     "raced a load or unload)", self.name_of(lease.record.target), pause,
                     response.body[:200].decode(errors="replace"))
            await asyncio.sleep(pause)
            response = await self.triton.infer(lease.entry, body, headers,
                                               timeout=max(deadline - loop.time(), 0.001))
        return response

    def _lost_in_lookup(self, lease: Lease, response: TritonResponse) -> bool:
        """Is ``response`` Triton's lookup race for a model that ``lease`` holds loaded?"""
        record = lease.record
        return (response.status == 400 and record.generation == lease.generation
                and record.state is ModelState.LOADED
                and self.records.get(record.target) is record
                and self.memory.is_pinned(record.target)
                and LOOKUP_RACE_ANSWER.format(name=lease.entry).encode() in response.body)

    def _load_finished(self, task: asyncio.Task[ModelRecord]) -> None:
        target = task.get_name().removeprefix("load:")
        if self._loads.get(target) is task:
            del self._loads[target]
        if not task.cancelled() and task.exception() is not None:
            log.warning("model=%s step=load outcome=failed error=%r", self.name_of(target),
                     task.exception())
            self._emit("failed", target, error=repr(task.exception()))
            record = self.records.get(target)
            if record is not None:
                self._forget_if_unused(record)

    def _forget_if_unused(self, record: ModelRecord) -> None:
        """Drop a record that has nothing on disk, no load under way and nobody waiting."""
        if (record.state is ModelState.NEW and not record.demand
                and record.target not in self._loads):
            self.records.pop(record.target, None)

    def _record(self, target: str) -> ModelRecord:
        record = self.records.get(target)
        if record is None:
            record = self.records[target] = ModelRecord(target, artifact_key(target))
        return record

    # --- bringing a model in ----------------------------------------------------------------

    async def _bring_in(self, record: ModelRecord) -> ModelRecord:
        pending_unload = self._unloads.get(record.target)
        if pending_unload is not None:
            await asyncio.shield(pending_unload)
        if record.artifact_dir is None or not record.artifact_dir.is_dir():
            await self._download(record)
        assert record.artifact_dir is not None  # set by _download
        extracted = record.artifact_dir / "model"
        if self.single_model:
            layout = await asyncio.to_thread(repository.read_single_model_layout, extracted,
                                             self.default_model)
        else:
            layout = await asyncio.to_thread(repository.read_layout, extracted)
        record.installed = await asyncio.to_thread(
            repository.install, layout, record.triton_key, self.triton_repository,
            self.gpus_available)
        record.entry = repository.namespaced(layout.entry, record.triton_key)
        try:
            await self._make_room(record)
        except BaseException:
            await asyncio.to_thread(repository.uninstall, record.installed, self.triton_repository)
            raise
        record.state = ModelState.LOADING
        self._emit("loading", record.target, size=record.size)
        started = time.monotonic()
        before = await self._triton_memory()
        try:
            await self._load_across_recycle(record)
        except (TritonError, TritonUnreachable, asyncio.TimeoutError, _StubDied) as exc:
            self.memory.remove(record.target)
            self.disk.unpin(record.target)
            record.state = ModelState.ON_DISK
            if isinstance(exc, (asyncio.TimeoutError, _StubDied)):
                wedged = record.entry
                self._abandon(record)  # Triton keeps these names LOADING: never reuse them
                self._wedged_load(record.target, wedged, timed_out=not isinstance(exc, _StubDied))
            await asyncio.to_thread(repository.uninstall, record.installed, self.triton_repository)
            self._changed.notify()
            if isinstance(exc, TritonError):
                oom = any(marker in exc.body for marker in OOM_MARKERS)
                raise ModelLoadFailed(507 if oom else 400, public_text(  # names a client knows
                    exc.body, self.triton_repository, record.installed, record.entry,
                    record.target)) from exc
            if isinstance(exc, _StubDied):
                self.stub_failures += 1
                raise ModelLoadFailed(failures.LOAD_FAILED, failures.body(
                    failures.stub_died_loading(record.target, exc.instances))) from None
            if isinstance(exc, asyncio.TimeoutError):
                raise ModelLoadFailed(500, failures.body(
                    failures.load_timed_out(record.target, self.load_timeout_s))) from None
            body = f'{{"error":"model load did not complete: {exc!r}"}}'
            raise ModelLoadFailed(500, body) from exc
        elapsed = time.monotonic() - started
        await self._measure(record, before)
        await self._refuse_if_too_large(record)
        self.metrics.record("ModelLoadingTime", elapsed * 1e6)
        record.state = ModelState.LOADED
        self.loads += 1
        self.metrics.set_loaded_model_count(self.loaded_count())
        log.info("model=%s step=load seconds=%.3f size=%d measured=%s entry=%s",
                 self.name_of(record.target), elapsed, record.size, record.measured, record.entry)
        self._emit("loaded", record.target, seconds=elapsed, size=record.size,
                   measured=record.measured, growth=record.measured_growth)
        await self._evict_over_measured(record)
        self._changed.notify()
        return record

    async def _triton_memory(self) -> int | None:
        probe = self.memory_probe
        return None if probe is None else await asyncio.to_thread(probe.triton_bytes)

    async def _measure(self, record: ModelRecord, before: int | None) -> None:
        """What the model's serving processes hold now that it is loaded (docs/memory.md).

        Triton's growth over the load is shared evenly by the loads under way at its end (they
        grew it together); a shrink counts as none. The model's own stubs are its alone.
        """
        probe = self.memory_probe
        if probe is None or before is None:
            return
        after = await asyncio.to_thread(probe.triton_bytes)
        own = await asyncio.to_thread(probe.own_bytes, record.installed)
        if after is None:
            return
        loading = sum(1 for r in self.records.values() if r.state is ModelState.LOADING)
        growth = max(after - before, 0) // max(loading, 1)
        record.measured = growth + own
        record.measured_growth = growth
        if record.target in self.memory:
            self.memory.add(record.target, record.measured)  # its reservation, as measured

    async def _refuse_if_too_large(self, record: ModelRecord) -> None:
        """A model that holds more than the whole budget once loaded cannot stay: it is
        unloaded and its load fails with the 507 a container out of memory answers (the next
        request is refused before loading: its measured size is known)."""
        budget = self.memory.capacity_bytes
        if budget is None or record.measured is None or record.measured <= budget:
            return
        log.warning("model=%s step=load outcome=out-of-memory measured=%d budget=%d",
                    self.name_of(record.target), record.measured, budget)
        await self._start_unload(record, "out of memory")
        raise ModelLoadFailed(failures.INSUFFICIENT_STORAGE, failures.body(
            failures.out_of_memory(record.target, record.measured, budget, True)))

    async def _evict_over_measured(self, record: ModelRecord) -> None:
        """A model that holds more than it was counted as: unload LRU others until the budget
        holds again (as a SageMaker instance does when memory runs short)."""
        async with self._memory_lock:
            spared = frozenset(t for t, r in self.records.items()
                               if t == record.target or r.demand
                               or r.state is not ModelState.LOADED)
            for target in self.memory.over_budget(exclude=spared):
                log.info("model=%s step=evict reason=measured for=%s measured=%d",
                         self.name_of(target), self.name_of(record.target), record.measured or 0)
                self._start_unload(self.records[target], "lru", record.target)

    async def _load_across_recycle(self, record: ModelRecord) -> None:
        """Load ``record`` once a Triton is up to take it; a load that a recycle of Triton cut
        short (the old one was ended under it) is asked again of the new one, once."""
        for attempt in (1, 2):
            epoch = await self._triton_ready()
            try:
                await self._load_in_triton(record)
            except TritonUnreachable:
                if attempt == 2 or self._triton_epoch == epoch:
                    raise
            else:
                # Loaded, unless by a Triton that a recycle has meanwhile given up (it is ended
                # once the requests under way are done): then by the new one too.
                if attempt == 2 or self._triton_epoch == epoch:
                    return
            log.info("model=%s step=load outcome=again reason=\"Triton was recycled during "
                     "the load\"", self.name_of(record.target))

    async def _triton_ready(self) -> int:
        """Wait while Triton is being recycled (within the load timeout); its epoch then."""
        if not self._triton_up.is_set():
            try:
                await asyncio.wait_for(self._triton_up.wait(), self.load_timeout_s)
            except asyncio.TimeoutError:
                raise TritonUnreachable("Triton was being recycled and did not come back within "
                                        f"{self.load_timeout_s:g}s") from None
        return self._triton_epoch

    def _wedged_load(self, target: str, entry: str | None, timed_out: bool) -> None:
        """Triton goes on with a load the manager gave up (its stub died, or it timed out): it
        holds one of Triton's load threads until it ends, which it may never do."""
        if entry is not None:
            self._wedged.add(entry)
        if timed_out:
            self._cannot_recover(target, failures.recycle_after_timeout(target,
                                                                        self.load_timeout_s))
        elif len(self._wedged) >= TRITON_LOAD_THREADS:
            self._cannot_recover(target, failures.recycle_after_dead_stubs(len(self._wedged)))

    def _cannot_recover(self, target: str, reason: str) -> None:
        log.warning("model=%s step=recycle-triton reason=%r", self.name_of(target), reason)
        if self.request_recycle is not None:
            self.request_recycle(target, reason)

    async def _load_in_triton(self, record: ModelRecord) -> None:
        """Ask Triton to load; fail early (``_StubDied``) if a stub of the model dies at import."""
        assert record.entry is not None
        if not self._stub_registry.is_dir():  # not the embedded launcher: no stub records
            await self.triton.load(record.entry, timeout=self.load_timeout_s)
            return
        stubs.forget(self._stub_registry, record.installed)
        load = asyncio.ensure_future(self.triton.load(record.entry, timeout=self.load_timeout_s))
        watch = asyncio.ensure_future(self._stub_death(record.installed))
        try:
            await asyncio.wait({load, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not load.done():
                raise _StubDied(watch.result())
            await load
        finally:
            for task in (load, watch):
                task.cancel()

    async def _stub_death(self, models: list[str]) -> list[str]:
        """Return the instance names once a stub of ``models`` has stayed a zombie a while."""
        loop = asyncio.get_running_loop()
        first_seen: dict[int, float] = {}
        while True:
            await asyncio.sleep(STUB_POLL_S)
            now = loop.time()
            # A thread: the registry holds a file per live stub, read on every poll.
            dead = await asyncio.to_thread(stubs.zombies, self._stub_registry, models)
            for stub in dead:
                first_seen.setdefault(stub.pid, now)
            lasting = [s.instance for s in dead if now - first_seen[s.pid] >= ZOMBIE_GRACE_S]
            if lasting:
                return lasting

    def _abandon(self, record: ModelRecord) -> None:
        """Leave Triton's copy of ``record`` behind; its next load uses new names.

        The unload is still asked for (it frees the healthy steps of an ensemble) but never
        awaited: Triton's unload of a model whose stub is dead does not complete.
        """
        names, entry = list(record.installed), record.entry
        record.generation += 1
        if entry:
            self._spawn(self._unload_quietly(entry), f"abandon:{entry}")
        log.warning("model=%s step=abandon triton_names=%s (its Python stub died)",
                    self.name_of(record.target), ",".join(names))

    async def _unload_quietly(self, entry: str) -> None:
        with contextlib.suppress(TritonError, TritonUnreachable, asyncio.TimeoutError):
            await self.triton.unload(entry, dependents=True, timeout=self.load_timeout_s)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _infer_failed(self, triton_model: str, status: int, body: bytes) -> None:
        """TritonClient listener: a non-200 inference answer from our Triton."""
        answer = body.decode(errors="replace")
        if not failures.stub_unhealthy(answer):
            return
        for record in list(self.records.values()):
            if triton_model in record.installed or triton_model == record.entry:
                self._take_out_broken(record, answer)
                return

    async def container_failed(self, target: str, status: int, body: bytes) -> bool:
        """Tell the manager what Triton answered for ``target``; True if it took the model out.

        Not needed with this project's TritonClient (its listener calls the same code); kept for
        callers with another client.
        """
        record = self.records.get(target)
        answer = body.decode(errors="replace")
        if record is None or status == 200 or not failures.stub_unhealthy(answer):
            return False
        return self._take_out_broken(record, answer)

    def _take_out_broken(self, record: ModelRecord, answer: str) -> bool:
        """A loaded model's stub died while serving: forget Triton's copy, reload on demand."""
        if record.state is not ModelState.LOADED:
            return False
        self.stub_failures += 1
        log.warning("model=%s step=take-out reason=%r", self.name_of(record.target), answer[:200])
        self._emit("taken-out", record.target, reason=answer[:200])
        self.memory.remove(record.target)
        self.disk.unpin(record.target)
        record.state = ModelState.ON_DISK
        names = list(record.installed)
        self._abandon(record)
        self._spawn(asyncio.to_thread(repository.uninstall, names, self.triton_repository),
                    f"uninstall:{record.target}")
        self.metrics.set_loaded_model_count(self.loaded_count())
        self._changed.notify()
        return True

    def _wanted_on_disk(self, record: ModelRecord) -> frozenset[str]:
        """Artifacts no disk eviction for ``record`` may take: those a request waits for, and
        those being brought in (their waiters may have given up; the load goes on, reading the
        files until Triton has loaded them, and then they are pinned)."""
        return frozenset(t for t, r in self.records.items()
                         if t != record.target and (r.demand or t in self._loads))

    def _disk_room(self, record: ModelRecord) -> int | None:
        """Bytes ``record`` may take on disk once every evictable artifact is deleted."""
        capacity = self.disk.capacity_bytes
        if capacity is None:
            return None
        wanted = self._wanted_on_disk(record)
        return max(capacity - self.disk.unevictable_bytes(wanted | {record.target}), 0)

    async def _download(self, record: ModelRecord) -> None:
        record.state = ModelState.DOWNLOADING
        self._emit("downloading", record.target)
        destination = self.artifacts_dir / record.key
        archive = self.artifacts_dir / f"{record.key}.tar.gz"
        started = time.monotonic()
        room = self._disk_room(record)
        limit = self.max_extracted_bytes
        if room is not None and (limit is None or room < limit):
            limit = room
        step = "downloading and extracting" if self.stream_downloads else "downloading"
        try:
            if destination.exists():
                await asyncio.to_thread(shutil.rmtree, destination)
            if self.stream_downloads:
                record.version = await asyncio.to_thread(
                    self._stream_in, record.target or None, destination / "model", limit)
            else:
                record.version = await asyncio.to_thread(self._store_version, record.target)
                await asyncio.to_thread(self.source.fetch, record.target or None, archive)
                step = "extracting"
                await asyncio.to_thread(extract_archive, archive, destination / "model", limit)
        except BaseException as exc:
            record.state = ModelState.NEW
            await asyncio.to_thread(shutil.rmtree, destination, True)  # nothing half-written
            self._raise_download_failure(record, exc, step, limit, room)
            raise
        finally:
            archive.unlink(missing_ok=True)
        elapsed = time.monotonic() - started
        self.metrics.record("ModelDownloadingTime", elapsed * 1e6)
        self.downloads += 1
        record.artifact_dir = destination
        record.store_version, record.store_checked = record.version, time.monotonic()
        record.size = await asyncio.to_thread(tree_size, destination)
        record.state = ModelState.ON_DISK
        # The one line per model a download logs when no terminal shows a bar (store.py).
        log.info("model=%s step=download seconds=%.3f size=%d", self.name_of(record.target),
                 elapsed, record.size)
        self._emit("downloaded", record.target, seconds=elapsed, size=record.size)
        await self._make_disk_room(record)

    def _stream_in(self, target: str | None, destination: Path,
                   limit: int | None) -> str | None:
        """Extract the object while it downloads: no ``.tar.gz`` on disk, no wait between steps.

        The temporary folder sits in the artifacts folder as ``.download-<key>-*`` until the
        archive is complete, then becomes ``<key>/model``; on any failure it is deleted.
        Returns the version of the object read (``sources``), when the store says it.
        """
        with self.source.open(target) as stream:
            extract_stream(stream, destination, limit, staging_parent=self.artifacts_dir,
                           staging_prefix=f".download-{destination.parent.name}-")
            version = getattr(stream, "version", None)
        return version if isinstance(version, str) else None

    def _store_version(self, target: str) -> str | None:
        version_of = getattr(self.source, "version", None)
        return version_of(target or None) if version_of is not None else None

    def _check_store_soon(self, record: ModelRecord) -> None:
        """Same key, new bytes: ask the store (off the request path, at most once per
        ``store_check_s``) whether the object behind a model it serves has changed. SageMaker
        keeps serving the copy it loaded until that copy is evicted (unloaded and deleted from
        the instance's disk), so does the emulator; it says so in the log and on the page."""
        now = time.monotonic()
        if record.version is None or now - record.store_checked < self.store_check_s:
            return
        record.store_checked = now
        task = asyncio.get_running_loop().create_task(self._check_store(record))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _check_store(self, record: ModelRecord) -> None:
        try:
            found = await asyncio.to_thread(self._store_version, record.target)
        except Exception:  # noqa: BLE001 - a failed check changes nothing; the next one retries
            return
        if found is None or found == record.store_version:
            return
        record.store_version = found
        if not record.store_changed:
            return
        log.warning("model=%s step=store-changed served=%s store=%s (the object in the model "
                    "store was overwritten; as on SageMaker the endpoint keeps serving the copy "
                    "it loaded until that copy is evicted from memory and deleted from disk; "
                    "upload new bytes under a new TargetModel name to serve them at once)",
                    self.name_of(record.target), record.version, found)
        self._emit("store-changed", record.target, served=record.version, store=found)

    def _raise_download_failure(self, record: ModelRecord, exc: BaseException, step: str,
                                limit: int | None, room: int | None) -> None:
        """Turn a failure outside the model into a ModelError that says what to fix."""
        target = record.target or "(the endpoint's model)"
        if isinstance(exc, ArchiveTooLarge) and room is not None and limit == room:
            assert self.disk.capacity_bytes is not None
            raise ModelLoadFailed(failures.INSUFFICIENT_STORAGE, failures.body(
                failures.over_disk_budget(target, limit, self.disk.capacity_bytes))) from None
        if isinstance(exc, DiskFull) or failures.is_no_space(exc):
            raise ModelLoadFailed(failures.INSUFFICIENT_STORAGE, failures.body(
                failures.disk_full(target, str(self.artifacts_dir), step, str(exc)))) from None
        if isinstance(exc, StoreUnavailable):
            raise ModelLoadFailed(failures.STORE_UNAVAILABLE, failures.body(
                failures.store_unavailable(target, self.source.location, str(exc)))) from None

    async def _make_disk_room(self, record: ModelRecord) -> None:
        wanted = self._wanted_on_disk(record)
        try:
            victims = self.disk.victims(record.size, exclude=wanted) or []
        except DoesNotFit:
            victims = None
        if victims is None:
            log.warning("model=%s step=disk-evict outcome=over-budget (everything else is in use)",
                        self.name_of(record.target))
            victims = []
        # Every victim is forgotten before the first await: a victim list chosen here must not
        # meet a victim that another request has pinned, or another deletion has taken, since.
        doomed = [self._forget_artifact(self.records[target]) for target in victims]
        self.disk.add(record.target, record.size)
        for folder in doomed:
            await self._remove_folder(folder)

    async def _make_room(self, record: ModelRecord) -> None:
        """Reserve memory for ``record``, unloading LRU models that nobody is using."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.load_timeout_s
        while True:
            changed = self._changed.next()  # taken before looking: no change can be missed
            async with self._memory_lock:
                # Never a victim: a model someone waits for, or one not (yet) loaded, whose
                # unload would wait for its load to end (a stuck load would starve us).
                spared = frozenset(t for t, r in self.records.items() if t != record.target
                                   and (r.demand or r.state is not ModelState.LOADED))
                try:
                    victims = self.memory.victims(record.memory_size, exclude=spared)
                except DoesNotFit as exc:
                    assert self.memory.capacity_bytes is not None
                    raise ModelLoadFailed(failures.INSUFFICIENT_STORAGE, failures.body(
                        failures.out_of_memory(record.target, record.memory_size,
                                               self.memory.capacity_bytes,
                                               record.measured is not None))) from exc
                if victims is not None:
                    unloads = [self._start_unload(self.records[t], "lru", record.target)
                               for t in victims]
                    self.memory.add(record.target, record.memory_size)  # the reservation
                    self.disk.pin(record.target)
                    break
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ModelLoadFailed(507, '{"error":"out of memory: every loaded model is '
                                           'serving requests"}')
            await asyncio.wait((changed,), timeout=remaining)  # never cancels the shared future
        if not unloads:
            return
        if self._load_may_overlap_unloads():
            await asyncio.gather(*(self._unload_accepted[t] for t in victims))
        else:
            await asyncio.gather(*unloads)

    def _load_may_overlap_unloads(self) -> bool:
        """May a load start before the unloads that make room for it have completed?

        Triton's Python backend takes about a second to unload even a trivial model (its stub
        polls for the finalize message once a second, then its health thread sleeps 300 ms before
        it exits), so waiting for the unload doubles the cost of a miss under a full budget.
        A count budget (--max-loaded-models) counts the models that serve or are loading: a
        victim whose unload Triton has accepted serves no more, so the load may start then [U].
        A byte budget (--memory-budget) stands for memory, which is free only once the unload
        has completed: there the load waits for it, as before.
        """
        return self.overlap_count_evictions and self.memory.capacity_bytes is None

    # --- taking models out ------------------------------------------------------------------

    def _start_unload(self, record: ModelRecord, reason: str = "requested",
                      making_room_for: str | None = None) -> asyncio.Task[None]:
        self.memory.remove(record.target)
        record.state = ModelState.UNLOADING
        self._emit("unloading", record.target, reason=reason, **(
            {"for": making_room_for} if making_room_for is not None else {}))
        accepted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._unload(record, accepted))
        self._unloads[record.target] = task
        self._unload_accepted[record.target] = accepted

        def finished(_task: asyncio.Task[None]) -> None:
            self._unloads.pop(record.target, None)
            self._unload_accepted.pop(record.target, None)
            if not accepted.done():  # cancelled before Triton answered
                accepted.cancel()

        task.add_done_callback(finished)
        return task

    async def _unload(self, record: ModelRecord, accepted: asyncio.Future[None]) -> None:
        def accept() -> None:
            if not accepted.done():
                accepted.set_result(None)

        started = time.monotonic()
        try:
            if record.entry:
                await self._unload_in_triton(record, accept)
            # Its stubs have exited: drop their records, or the registry (read on every stub
            # poll) grows by two files per load as models come and go.
            if self._stub_registry.is_dir():
                await asyncio.to_thread(stubs.forget, self._stub_registry, record.installed)
        except (TritonError, TritonUnreachable, asyncio.TimeoutError) as exc:
            log.warning("model=%s step=unload outcome=failed error=%s",
                        self.name_of(record.target), exc)
        finally:
            accept()  # refused or failed: nothing more to wait for before loading
        elapsed = time.monotonic() - started
        await asyncio.to_thread(repository.uninstall, record.installed, self.triton_repository)
        record.state = ModelState.ON_DISK
        self.disk.unpin(record.target)
        self.unloads += 1
        self.metrics.record("ModelUnloadingTime", elapsed * 1e6)
        self.metrics.set_loaded_model_count(self.loaded_count())
        log.info("model=%s step=unload seconds=%.3f", self.name_of(record.target), elapsed)
        self._emit("unloaded", record.target, seconds=elapsed)
        self._changed.notify()

    async def _unload_in_triton(self, record: ModelRecord, accept: Callable[[], None]) -> None:
        """Unload ``record``'s Triton model and wait until Triton has completed it.

        ``accept`` is called at Triton's 200 (it serves the model no more from then on).

        The wait reads Triton's repository index, which fails ("failed to stat file") when a
        model folder is removed while Triton lists them: such a failure after the 200 is not the
        unload's, and the unload is asked for again (UNLOAD_WAIT_RETRIES; Triton accepts the
        unload of a model it is already unloading, and the wait starts over).
        """
        assert record.entry is not None
        for attempt in range(UNLOAD_WAIT_RETRIES + 1):
            accepted = False

            def on_accepted() -> None:
                nonlocal accepted
                accepted = True
                accept()

            try:
                await self.triton.unload(record.entry, dependents=True,
                                         timeout=self.load_timeout_s, on_accepted=on_accepted)
                return
            except TritonError as exc:
                if not accepted or exc.status == 504 or attempt == UNLOAD_WAIT_RETRIES:
                    raise
                log.info("model=%s step=unload outcome=wait-again error=%s",
                         self.name_of(record.target), exc)

    async def _delete_from_disk(self, record: ModelRecord) -> None:
        await self._remove_folder(self._forget_artifact(record))

    def _forget_artifact(self, record: ModelRecord) -> Path | None:
        """Take ``record`` off the disk at once (no await); returns the folder to remove.

        The folder is renamed out of the way first: a request for the same model meanwhile
        downloads it afresh into ``<key>`` without the removal deleting what it writes.
        """
        self.disk.remove(record.target)
        folder, record.artifact_dir = record.artifact_dir, None
        record.state = ModelState.NEW
        log.info("model=%s step=disk-evict size=%d", self.name_of(record.target), record.size)
        self._emit("deleted", record.target, size=record.size)
        if not record.demand:
            self.records.pop(record.target, None)
        if folder is None:
            return None
        doomed = folder.with_name(f".deleting-{folder.name}-{secrets.token_hex(4)}")
        try:
            folder.rename(doomed)
        except OSError:
            return folder
        return doomed

    async def _remove_folder(self, folder: Path | None) -> None:
        if folder is not None:
            await asyncio.to_thread(shutil.rmtree, folder, True)

    async def _evict_completely(self, record: ModelRecord) -> None:
        async with self._memory_lock:
            if record.target not in self.memory or self.memory.is_pinned(record.target):
                return
            task = self._start_unload(record, "cache disabled")
        await task
        if record.state is ModelState.ON_DISK and not record.demand:
            await self._delete_from_disk(record)

    async def unload(self, target: str) -> bool:
        """Unload one model on request (keeps it on disk). False if it was not loaded."""
        record = self.records.get(target)
        if record is None:
            return False
        async with self._memory_lock:
            if target not in self.memory or self.memory.is_pinned(target):
                return False
            task = self._start_unload(record)
        await task
        return True

    def triton_recycling(self, target: str, reason: str) -> None:
        """The instance is replacing its Triton (``target``'s load caused it): no model is
        served by the old one from now on (each reloads on demand) and loads wait for the new
        one. The requests under way in the old one finish there (the instance waits for them)."""
        self._triton_up.clear()
        self._triton_epoch += 1
        self._recycle = (target, time.monotonic())
        self.recycles += 1
        self._emit("recycling", target, reason=reason)
        self._forget_loaded("triton recycled")

    def triton_recycle_failed(self) -> None:
        """The launcher could not replace its Triton: loads go to the one there is."""
        self._recycle = None
        self._triton_up.set()

    async def triton_restarted(self) -> None:
        """Triton came back empty: everything is on disk only and reloads on demand."""
        self._forget_loaded("triton restarted")
        self._wedged.clear()
        self._triton_epoch += 1
        recycle, self._recycle = self._recycle, None
        self._triton_up.set()
        if recycle is not None:
            target, started = recycle
            seconds = time.monotonic() - started
            log.warning("model=%s step=recycled seconds=%.3f (its instance's Triton was "
                        "replaced; models reload on demand)", self.name_of(target), seconds)
            self._emit("recycled", target, seconds=seconds)
        self._changed.notify()

    def _forget_loaded(self, reason: str) -> None:
        """Every loaded model is on disk only (a load under way keeps its reservation: it is
        asked again of the new Triton, or fails and gives it back)."""
        for target in list(self.memory.keys_lru_first()):
            record = self.records.get(target)
            if record is None or record.state is not ModelState.LOADED:
                continue
            self.memory.remove(target)
            self.disk.unpin(target)
            record.state = ModelState.ON_DISK
            self._emit("unloaded", target, reason=reason)
        self.metrics.set_loaded_model_count(self.loaded_count())

    async def close(self) -> None:
        for task in (list(self._loads.values()) + list(self._unloads.values())
                     + list(self._background)):
            task.cancel()

    # --- introspection ----------------------------------------------------------------------

    def process_killed(self, triton_model: str, reason: str) -> str | None:
        """A model's process was killed for memory (the instance's watch): say it, naming the
        TargetModel whose Triton model it was. Its next answer is Triton's "not healthy", which
        takes it out as any dead stub (``_infer_failed``). The TargetModel, or None."""
        target = next((t for t, r in self.records.items() if triton_model in r.installed), None)
        name = self.name_of(target) if target is not None else triton_model
        log.warning("model=%s step=oom-kill reason=%r", name, reason)
        self._emit("oom-killed", target if target is not None else triton_model, reason=reason)
        return target

    def loaded_file_bytes(self) -> int:
        """The extracted files' bytes of the models counted in memory (beside the measured)."""
        return sum(r.size for t, r in self.records.items() if t in self.memory)

    def loaded_count(self) -> int:
        return sum(1 for t in self.memory.keys_lru_first()
                   if self.records[t].state is ModelState.LOADED)

    def describe(self) -> list[dict[str, Any]]:
        lru = self.memory.keys_lru_first()
        rows = []
        for target, record in self.records.items():
            entry = self.memory.get(target)
            rows.append({
                "TargetModel": target,
                "State": record.state.value,
                "OnDisk": record.artifact_dir is not None and record.artifact_dir.is_dir(),
                "Loaded": record.state is ModelState.LOADED,
                "Pinned": bool(entry and entry.pins),
                "InFlight": entry.pins if entry else 0,
                "SizeBytes": record.size,
                "MeasuredBytes": record.measured,
                "StoreChanged": record.store_changed,
                "MemoryBytes": entry.size if entry else record.memory_size,
                "LruPosition": lru.index(target) if target in lru else None,
                "TritonModel": record.entry,
                "LastUsed": record.last_used,
            })
        return sorted(rows, key=lambda r: (r["LruPosition"] is None, r["LruPosition"] or 0))
