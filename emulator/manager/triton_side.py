"""The Triton side of loads and unloads: what the model manager asks of its Triton, and how.

One job: talking to Triton about models. Installing an artifact into Triton's repository under
namespaced names (``repository.py``), asking for the load and watching the model's Python stubs
while it runs (a stub that dies at import leaves Triton's load pending for ever: it fails here
promptly), asking for the unload and waiting it out, abandoning a copy whose stub died (Triton
can unload neither), measuring what a load made Triton and the stubs hold (``MemoryProbe``), the
inference that Triton's lookup race answers wrongly (resent), and recycling: loads Triton cannot
finish each hold one of its few load threads, so the instance is asked to replace its Triton
(``request_recycle``) and loads wait for the new one.

Why apart: Triton's quirks (its lookup race, its unload's index failures, its load threads, its
zombie stubs) are facts about Triton 2.51, measured; the coordinator decides *when* to load and
unload, this module knows *how* Triton must be asked. It reads records but keeps no books of
memory or disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from emulator.contract.body import Body
from emulator.manager import failures, repository
from emulator.manager.events import Events, log
from emulator.manager.records import ModelLoadFailed, ModelRecord
from emulator.public_names import public_text
from emulator.triton import environments, stubs
from emulator.triton.client import (
    ResponseHeaders,
    TritonClient,
    TritonError,
    TritonResponse,
    TritonUnreachable,
)
from emulator.triton.memory import MemoryProbe
from emulator.triton.releases import DEFAULT_RELEASE, RELEASES, Release

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
# The answer's text (``ModelRepositoryManager::FindModelIdentifier``: "Request for unknown
# model: '<name>' is not found") and its statuses: 400 as a rule, 404 where the lookup fails on
# a path that maps Triton's NOT_FOUND to HTTP's (met on a busy machine: the same text, answered
# 404). Only its start is matched: the name in it is read from the map being re-assigned, and
# was once a few bytes of garbage, the rest of the text cut off ('f\ufffd6...').
LOOKUP_RACE_ANSWER = b"Request for unknown model: '"
LOOKUP_RACE_STATUSES = (400, 404)
# Triton 2.51 runs at most this many model loads at once (the default of its
# --model-load-thread-count; measured: with four loads that never end, a fifth never starts).
TRITON_LOAD_THREADS = 4
# A decoupled model (``model_transaction_policy { decoupled: true }``) loads, and every request
# to it is refused with this text: Triton's HTTP endpoints serve no decoupled model. KServe's
# frontend answers it 501; Triton's SageMaker server, 400 (SageMakerMMEHandleInfer).
DECOUPLED_ANSWER = b"HTTP end point doesn't support models with decoupled transaction policy"
DECOUPLED_STATUS = 501
# Told that this Triton cannot recover: ``request_recycle(target, reason)`` (the instance's).
RecycleRequest = Callable[[str, str], None]
# Triton's repository index fails ("failed to stat file") when a model folder is removed while
# it lists them; an unload whose wait for completion meets that asks again, at most this often.
UNLOAD_WAIT_RETRIES = 3


class StubDied(Exception):
    """A Python stub of the model being loaded died at import (Triton keeps the load pending)."""

    def __init__(self, instances: list[str]) -> None:
        super().__init__(", ".join(instances))
        self.instances = instances


# What a load may fail with here; ``load_failed`` turns each into the container's answer.
LOAD_ERRORS = (TritonError, TritonUnreachable, asyncio.TimeoutError, StubDied)


class TritonSide:
    def __init__(self, *, triton: TritonClient, triton_repository: Path, events: Events,
                 load_timeout_s: float, memory_probe: MemoryProbe | None,
                 single_model: bool, default_model: str | None, gpus_available: bool,
                 instance_gpus: int | None = None, release: Release | None = None) -> None:
        self.triton = triton
        self.repository = triton_repository
        self.events = events
        self.load_timeout_s = load_timeout_s
        self.memory_probe = memory_probe
        # SingleModel endpoints: serve's start-up rules pick the model (read_single_model_layout).
        self.single_model = single_model
        self.default_model = default_model
        self.gpus_available = gpus_available
        # The GPUs of the endpoint's InstanceType (None: no InstanceType, every group loads).
        self.instance_gpus = instance_gpus
        # The SageMaker Triton release the endpoint's image runs: a Python model's environment
        # is held against it (its Python, glibc, libstdc++, numpy).
        self.release = release or RELEASES[DEFAULT_RELEASE]
        # Triton names of entries whose every inference the release's Triton answers with an
        # error (an environment with numpy 2): that answer.
        self._refused_outputs: dict[str, bytes] = {}
        self.stub_registry = stubs.registry_for(triton_repository)
        self.lookup_retries = 0  # inferences resent after Triton's lookup race
        self._background: set[asyncio.Task[Any]] = set()
        # Recycling: who replaces this Triton, the loads it will never finish (Triton names),
        # set while a Triton is up to take loads, bumped at each replacement.
        self.request_recycle: RecycleRequest | None = None
        self._wedged: set[str] = set()
        self._up = asyncio.Event()
        self._up.set()
        self._epoch = 0
        self._recycle: tuple[str, float] | None = None  # (target, started) of the one under way
        self.recycles = 0

    # --- the repository ---------------------------------------------------------------------

    async def install(self, record: ModelRecord) -> None:
        """Install ``record``'s extracted artifact into Triton's repository under this
        generation's names; sets ``installed`` and ``entry``."""
        assert record.artifact_dir is not None
        extracted = record.artifact_dir / "model"
        if self.single_model:
            layout = await asyncio.to_thread(repository.read_single_model_layout, extracted,
                                             self.default_model)
        else:
            layout = await asyncio.to_thread(repository.read_layout, extracted)
        entry_name = None if self.single_model else record.target
        refusal = repository.gpu_refusal(layout, self.instance_gpus, entry_name)
        if refusal is not None:
            log.warning("model=%s step=load outcome=refused reason=%r fix=\"serve it on an "
                        "instance type with GPUs (ml.g5.xlarge ...) or make its instance "
                        "groups KIND_CPU\"", self.events.name_of(record.target), refusal)
            raise ModelLoadFailed(400, json.dumps({"error": refusal}, separators=(",", ":")))
        # What the release's Triton makes of the models' version folders and environments.
        problems = await asyncio.to_thread(repository.environment_problems, layout,
                                           self.release)
        refusal = (repository.version_refusal(layout, entry_name)
                   or repository.environment_refusal(layout, problems, entry_name))
        if refusal is not None:
            log.warning("model=%s step=load outcome=refused reason=%r",
                        self.events.name_of(record.target), refusal)
            raise ModelLoadFailed(400, json.dumps({"error": refusal}, separators=(",", ":")))
        refused_outputs = repository.outputs_refusal(layout, problems)
        record.gpu_on_cpu = not self.gpus_available and repository.asks_for_gpu(layout)
        record.installed = await asyncio.to_thread(
            repository.install, layout, record.triton_key, self.repository, self.gpus_available)
        record.entry = repository.namespaced(layout.entry, record.triton_key)
        if refused_outputs is not None:
            log.warning("model=%s step=load outcome=outputs-refused reason=%r",
                        self.events.name_of(record.target), refused_outputs.decode())
            self._refused_outputs[record.entry] = refused_outputs

    async def uninstall(self, names: list[str]) -> None:
        for name in names:
            self._refused_outputs.pop(name, None)
        await asyncio.to_thread(repository.uninstall, names, self.repository)

    # --- loads ------------------------------------------------------------------------------

    async def load(self, record: ModelRecord) -> int:
        """Load ``record`` once a Triton is up to take it; a load that a recycle of Triton cut
        short (the old one was ended under it) is asked again of the new one, once. Returns
        the epoch of the Triton that loaded it (``serves``).

        Raises one of LOAD_ERRORS."""
        attempts = 2
        for attempt in range(1, attempts + 1):
            epoch = await self._ready()
            try:
                await self._load_in_triton(record)
            except TritonUnreachable:
                if attempt == attempts or self._epoch == epoch:
                    raise
            else:
                # Loaded, unless by a Triton that a recycle has meanwhile given up (it is ended
                # once the requests under way are done): then by the new one too.
                if attempt == attempts or self._epoch == epoch:
                    return epoch
            log.info("model=%s step=load outcome=again reason=\"Triton was recycled during "
                     "the load\"", self.events.name_of(record.target))
        raise AssertionError("the last attempt returns or raises")

    def serves(self, epoch: int) -> bool:
        """Whether the Triton of ``epoch`` (``load``'s answer) is still the one serving: no
        recycle or restart since."""
        return self._epoch == epoch

    async def _ready(self) -> int:
        """Wait while Triton is being recycled (within the load timeout); its epoch then."""
        if not self._up.is_set():
            try:
                await asyncio.wait_for(self._up.wait(), self.load_timeout_s)
            except asyncio.TimeoutError:
                raise TritonUnreachable("Triton was being recycled and did not come back within "
                                        f"{self.load_timeout_s:g}s") from None
        return self._epoch

    async def _load_in_triton(self, record: ModelRecord) -> None:
        """Ask Triton to load; fail early (``StubDied``) if a stub of the model dies at import."""
        assert record.entry is not None
        if not self.stub_registry.is_dir():  # not the embedded launcher: no stub records
            await self.triton.load(record.entry, timeout=self.load_timeout_s)
            return
        stubs.forget(self.stub_registry, record.installed)
        load = asyncio.ensure_future(self.triton.load(record.entry, timeout=self.load_timeout_s))
        watch = asyncio.ensure_future(self._stub_death(record.installed))
        try:
            await asyncio.wait({load, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not load.done():
                raise StubDied(watch.result())
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
            dead = await asyncio.to_thread(stubs.zombies, self.stub_registry, models)
            for stub in dead:
                first_seen.setdefault(stub.pid, now)
            lasting = [s.instance for s in dead if now - first_seen[s.pid] >= ZOMBIE_GRACE_S]
            if lasting:
                return lasting

    def load_failed(self, record: ModelRecord, exc: BaseException) -> ModelLoadFailed:
        """The answer a container gives for a load that failed with ``exc`` (one of
        LOAD_ERRORS). A load Triton goes on with (it timed out, or its stub died) is abandoned
        first: Triton keeps those names LOADING, and each holds one of its load threads."""
        if isinstance(exc, (asyncio.TimeoutError, StubDied)):
            wedged = record.entry
            self.abandon(record)  # never reuse those names
            self._wedged_load(record.target, wedged, timed_out=not isinstance(exc, StubDied))
        if isinstance(exc, TritonError):
            oom = any(marker in exc.body for marker in OOM_MARKERS)
            return ModelLoadFailed(507 if oom else 400, public_text(  # names a client knows
                exc.body, self.repository, record.installed, record.entry, record.target))
        if isinstance(exc, StubDied):
            return ModelLoadFailed(failures.LOAD_FAILED, failures.body(
                failures.stub_died_loading(record.target, exc.instances)))
        if isinstance(exc, asyncio.TimeoutError):
            return ModelLoadFailed(500, failures.body(
                failures.load_timed_out(record.target, self.load_timeout_s)))
        return ModelLoadFailed(500, f'{{"error":"model load did not complete: {exc!r}"}}')

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
        log.warning("model=%s step=recycle-triton reason=%r", self.events.name_of(target), reason)
        if self.request_recycle is not None:
            self.request_recycle(target, reason)

    # --- memory measurement -----------------------------------------------------------------

    async def triton_bytes(self) -> int | None:
        """What Triton's process holds now (None: nothing can be measured)."""
        probe = self.memory_probe
        return None if probe is None else await asyncio.to_thread(probe.triton_bytes)

    async def triton_gpu_bytes(self) -> int | None:
        """The GPU memory Triton's own processes hold now, its models' stubs apart (None: no
        GPU NVML sees, or no probe)."""
        probe = self.memory_probe
        return None if probe is None else await asyncio.to_thread(probe.triton_gpu_bytes)

    async def held_after_load(self, record: ModelRecord,
                              gpu: bool = False) -> tuple[int, int] | None:
        """(Triton's bytes, the model's own stubs' bytes) now that ``record`` is loaded; of GPU
        memory with ``gpu``. None: nothing can be measured."""
        probe = self.memory_probe
        if probe is None:
            return None
        triton, own = ((probe.triton_gpu_bytes, probe.own_gpu_bytes) if gpu
                       else (probe.triton_bytes, probe.own_bytes))
        after = await asyncio.to_thread(triton)
        mine = await asyncio.to_thread(own, record.installed)
        return None if after is None else (after, mine)

    # --- unloads ----------------------------------------------------------------------------

    async def unload(self, record: ModelRecord, accept: Callable[[], None]) -> float:
        """Unload ``record`` from Triton and its repository; the seconds Triton took.

        ``accept`` is called once Triton serves the model no more, or the unload failed (then
        there is nothing more to wait for). A failure is logged, never raised: the model is out
        of the manager's books either way.
        """
        started = time.monotonic()
        try:
            if record.entry:
                await self.unload_in_triton(record, accept)
            # Its stubs have exited: drop their records, or the registry (read on every stub
            # poll) grows by two files per load as models come and go.
            if self.stub_registry.is_dir():
                await asyncio.to_thread(stubs.forget, self.stub_registry, record.installed)
        except (TritonError, TritonUnreachable, asyncio.TimeoutError) as exc:
            log.warning("model=%s step=unload outcome=failed error=%s",
                        self.events.name_of(record.target), exc)
        finally:
            accept()  # refused or failed: nothing more to wait for before loading
        elapsed = time.monotonic() - started
        await self.uninstall(record.installed)
        return elapsed

    async def unload_in_triton(self, record: ModelRecord, accept: Callable[[], None]) -> None:
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
                                         timeout=self.load_timeout_s, on_accepted=on_accepted,
                                         also=record.installed)  # an ensemble's steps
                return
            except TritonError as exc:
                if not accepted or exc.status == 504 or attempt == UNLOAD_WAIT_RETRIES:
                    raise
                log.info("model=%s step=unload outcome=wait-again error=%s",
                         self.events.name_of(record.target), exc)

    def abandon(self, record: ModelRecord) -> None:
        """Leave Triton's copy of ``record`` behind; its next load uses new names.

        The unload is still asked for (it frees the healthy steps of an ensemble) but never
        awaited: Triton's unload of a model whose stub is dead does not complete.
        """
        names, entry = list(record.installed), record.entry
        record.generation += 1
        if entry:
            self.spawn(self._unload_quietly(entry), f"abandon:{entry}")
        log.warning("model=%s step=abandon triton_names=%s (its Python stub died)",
                    self.events.name_of(record.target), ",".join(names))

    async def _unload_quietly(self, entry: str) -> None:
        with contextlib.suppress(TritonError, TritonUnreachable, asyncio.TimeoutError):
            await self.triton.unload(entry, dependents=True, timeout=self.load_timeout_s)

    def spawn(self, coro: Any, name: str) -> None:
        """Run ``coro`` in the background (cancelled by ``close``)."""
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- inferences -------------------------------------------------------------------------

    async def infer(self, entry: str, body: bytes | Body, headers: Mapping[str, str],
                    timeout: float, name: str,
                    still_held: Callable[[], bool]) -> TritonResponse:
        """Send one inference to Triton's model ``entry``; Triton's answer.

        An answer of Triton's lookup race (LOOKUP_RACE_DELAYS_S) for a model the request holds
        loaded (``still_held``) is not the model's: the request is sent again, within
        ``timeout`` overall. ``name``: the model as logs name it.
        """
        refused = self._refused_outputs.get(entry)
        if refused is not None:  # the model runs; the release's Triton answers its outputs so
            return TritonResponse(environments.NUMPY2_STATUS,
                                  ResponseHeaders({"content-type": "application/json"}), refused)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        response = await self.triton.infer(entry, body, headers, timeout=timeout)
        if response.status not in LOOKUP_RACE_STATUSES:  # the common answer: nothing to look at
            if response.status == DECOUPLED_STATUS and DECOUPLED_ANSWER in response.body:
                # Triton's SageMaker server refuses a decoupled model before running it and
                # answers that refusal 400, where its KServe frontend answers 501.
                return dataclasses.replace(response, status=400)
            return response
        for pause in LOOKUP_RACE_DELAYS_S:
            # The request holds the model loaded: whatever name the answer says is unknown,
            # the lookup raced.
            if not (response.status in LOOKUP_RACE_STATUSES and still_held()
                    and LOOKUP_RACE_ANSWER in response.body) \
                    or loop.time() + pause >= deadline:
                break
            self.lookup_retries += 1
            log.info("model=%s step=infer outcome=resent pause=%.2f reason=%r (Triton's lookup "
                     "raced a load or unload)", name, pause,
                     response.body[:200].decode(errors="replace"))
            await asyncio.sleep(pause)
            response = await self.triton.infer(entry, body, headers,
                                               timeout=max(deadline - loop.time(), 0.001))
        return response

    # --- recycling --------------------------------------------------------------------------

    def recycling(self, target: str) -> None:
        """The instance is replacing its Triton: loads wait for the new one."""
        self._up.clear()
        self._epoch += 1
        self._recycle = (target, time.monotonic())
        self.recycles += 1

    def recycle_failed(self) -> None:
        """The launcher could not replace its Triton: loads go to the one there is."""
        self._recycle = None
        self._up.set()

    def restarted(self) -> tuple[str, float] | None:
        """Triton came back empty: loads go to it. The recycle it ends (its target and its
        seconds), if one was under way."""
        self._wedged.clear()
        self._epoch += 1
        recycle, self._recycle = self._recycle, None
        self._up.set()
        if recycle is None:
            return None
        target, started = recycle
        return target, time.monotonic() - started

    def close(self) -> None:
        for task in list(self._background):
            task.cancel()
