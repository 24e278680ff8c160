"""One instance of a production variant: its own Triton, disk cache, budgets and model manager.

``Instance.invoke`` is the container call of one request: bring the model in (multi-model) or
use the one model (single-model), send the request to Triton, and turn what the container says
into SageMaker's answer. It knows nothing of other instances or variants: the router chose it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from emulator.contract import multi_container, runtime, runtime_errors, sessions
from emulator.hosting.spec import ContainerSpec
from emulator.instance_types import Budget, lookup, machine_memory_bytes
from emulator.manager.extract import UnsafeArchive
from emulator.manager.model_manager import ModelManager
from emulator.manager.records import ModelLoadFailed, ModelNotReady, ModelState
from emulator.manager.repository import SEPARATOR, InvalidModelRepository
from emulator.manager.sources import FolderSource, ObjectNotFound
from emulator.metrics import InstanceMetrics
from emulator.public_names import public_text
from emulator.triton.client import TritonClient, TritonUnreachable
from emulator.triton.launcher import TritonLauncher
from emulator.triton.memory import MemoryProbe

log = logging.getLogger(__name__)

# SingleModel endpoints have one model; the manager keys it by this TargetModel.
SINGLE_MODEL = ""
# How SageMaker's messages name the one container of a single-container endpoint.
PRIMARY = "primary"
# [U] A recycle lets the inferences under way in the old Triton finish first (their models are
# healthy: a stuck load does not hold them up), for at most this long.
RECYCLE_DRAIN_S = 5.0
# How often an instance with a known InstanceType checks its Triton's memory against the type's
# (the emulator's stand-in for the kernel's OOM killer; docs/memory.md).
OOM_POLL_S = 0.25


def public_name(entry: str) -> str:
    """A single-model container's model as SageMaker's Triton names it in an answer: its own
    name, not the namespaced one it is installed under (``add_one--e3b0c442...`` -> ``add_one``).
    """
    return entry.rpartition(SEPARATOR)[0] or entry


class InstanceStartFailed(Exception):
    """The instance's container did not become healthy (CreateEndpoint -> Failed)."""


@dataclass(frozen=True)
class ErrorContext:
    """What a ModelError names: the endpoint, where its logs would be."""

    endpoint: str
    region: str
    account: str
    container: str = PRIMARY  # a multi-container endpoint's errors name the container

    @property
    def log_stream_arn(self) -> str:
        return runtime_errors.log_stream_arn(self.region, self.account, self.endpoint)

    def model_error(self, status: int, body: str) -> runtime_errors.ModelError:
        if self.container != PRIMARY:
            return multi_container.container_model_error(
                status, body, self.container, self.endpoint, self.region, self.account,
                self.log_stream_arn)
        return runtime_errors.model_error(status, body, self.endpoint, self.region, self.account,
                                  self.log_stream_arn)

    def timed_out(self) -> runtime_errors.ModelError:
        if self.container != PRIMARY:
            return self.model_error(0, multi_container.container_timed_out(self.container))
        return runtime_errors.invocation_timed_out(self.endpoint, self.region, self.account,
                                           self.log_stream_arn)


@dataclass(frozen=True)
class ContainerAnswer:
    body: bytes
    content_type: str
    custom_attributes: str | None
    model_latency_s: float
    cache_hit: bool
    # Multi-container endpoints: (container, seconds) of every container the request went
    # through, in order (CloudWatch's ContainerLatency).
    container_latencies: tuple[tuple[str, float], ...] = ()
    # A SageMaker container's stateful-session answer: the session it opened ("<id>;
    # Expires=<time>") and the one it closed (``contract.sessions``).
    new_session: str | None = None
    closed_session: str | None = None


class Instance:
    def __init__(self, instance_id: str, container: ContainerSpec, launcher: TritonLauncher,
                 triton: TritonClient, manager: ModelManager, metrics: InstanceMetrics,
                 work_dir: Path, errors_context: ErrorContext, load_timeout_s: float,
                 budget: Budget | None = None) -> None:
        self.id = instance_id
        self.container = container
        self.launcher = launcher
        self.triton = triton
        self.manager = manager
        self.metrics = metrics
        self.work_dir = work_dir
        self._errors = errors_context
        self._load_timeout_s = load_timeout_s
        # Where the memory budget came from (--memory-budget, the InstanceType or none).
        memory_budget = manager.usage().memory_budget_bytes
        self.budget = budget or Budget(memory_budget, None,
                                       "--memory-budget" if memory_budget else "none")
        self.in_flight = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()
        # The requests waiting on Triton for each TargetModel, and why some were cut short.
        self._calling: dict[str, set[asyncio.Task[object]]] = {}
        self._cut_short: dict[asyncio.Task[object], str] = {}
        self._recycling: asyncio.Task[None] | None = None
        self._memory_watch: asyncio.Task[None] | None = None
        launcher.on_restart = self._triton_restarted
        manager.add_observer(self._model_event)
        manager.request_recycle = self._recycle_soon

    # --- what the router reads --------------------------------------------------------------

    def has_loaded(self, target: str) -> bool:
        return self.manager.state_of(target) is ModelState.LOADED

    def is_bringing_in(self, target: str) -> bool:
        return self.manager.state_of(target) in (ModelState.DOWNLOADING, ModelState.LOADING)

    def has_on_disk(self, target: str) -> bool:
        return self.manager.is_on_disk(target)

    def free_fraction(self) -> float:
        """How much of the memory budget is free, 0..1 (1 without a budget)."""
        return self.manager.usage().free_fraction()

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        await self.launcher.start()
        self._rebind()
        probe, limit = self.manager.memory_probe, self.oom_limit
        if probe is not None and limit is not None:
            self.manager.hard_memory_limit = limit  # its evictions then keep under it
            self._memory_watch = asyncio.get_running_loop().create_task(
                self._watch_memory(probe, limit), name=f"oom-watch:{self.id}")
        if not self.container.is_multi_model:
            # A SingleModel container loads its model at start-up; failing that, it never
            # becomes healthy and CreateEndpoint fails with the reason.
            try:
                async with self.manager.acquire(SINGLE_MODEL, self._load_timeout_s):
                    pass
            except (ModelLoadFailed, InvalidModelRepository, UnsafeArchive, ObjectNotFound) as exc:
                raise InstanceStartFailed(
                    f"The primary container failed to start: {exc}") from exc

    async def drain(self, timeout_s: float) -> None:
        """Take no new requests (the router skips it) and wait for those in flight."""
        self.draining = True
        # stop anyway: a request still running past the timeout gets an error
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)

    async def stop(self) -> None:
        if self._recycling is not None:
            self._recycling.cancel()
        if self._memory_watch is not None:
            self._memory_watch.cancel()
        await self.manager.close()
        # Close our keep-alive connections first: Triton waits for open connections on exit.
        await self.triton.close()
        await self.launcher.stop()

    def _model_event(self, step: str, target: str, details: dict[str, object]) -> None:
        """A model taken out (its Python stub died): answer the requests still waiting on it.

        Triton never answers requests queued to an instance whose stub is dead; left alone they
        would each wait for the invocation timeout. They get the error the request that met
        the dead stub got [U] (docs/contract.md).
        """
        if step != "taken-out":
            return
        current = asyncio.current_task()  # the request that met the dead stub: already answered
        for task in self._calling.get(target, ()):
            if task is not current and task not in self._cut_short:
                self._cut_short[task] = str(details.get("reason", ""))
                task.cancel()

    def _rebind(self) -> None:
        self.triton.rebind(self.launcher.http_url, self.launcher.shared_memory_dir,
                           getattr(self.launcher, "grpc_address", None))

    async def _triton_restarted(self) -> None:
        self._rebind()
        await self.manager.triton_restarted()

    @property
    def recycling(self) -> bool:
        return self._recycling is not None and not self._recycling.done()

    def _recycle_soon(self, target: str, reason: str) -> None:
        """The manager's ``request_recycle``: replace this instance's Triton (once at a time)."""
        if not self.recycling and not self.draining:
            self._recycling = asyncio.get_running_loop().create_task(
                self._recycle(target, reason), name=f"recycle:{self.id}")

    async def _recycle(self, target: str, reason: str) -> None:
        """Replace a Triton that cannot recover, as SageMaker replaces an unhealthy instance.

        No model is served by the old Triton from now on and loads wait for the new one
        (``triton_recycling``); the inferences under way finish first (RECYCLE_DRAIN_S), then
        the old Triton is ended and the launcher's watchdog starts the new one, whose
        ``on_restart`` opens it to loads (``_triton_restarted``). Requests meanwhile wait as on
        a cold start, within their own timeout (docs/isolation.md).
        """
        self.manager.triton_recycling(target, reason)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RECYCLE_DRAIN_S
        while self._calling and loop.time() < deadline:
            await asyncio.sleep(0.01)
        try:
            recycled = await self.launcher.recycle(reason)
        except Exception:  # the launcher's bug: keep serving from the Triton there is
            log.exception("instance %s: its Triton could not be recycled", self.id)
            recycled = False
        if not recycled:
            self.manager.triton_recycle_failed()

    # --- the request path -------------------------------------------------------------------

    async def invoke(self, request: runtime.InvokeRequest, target: str | None, started: float,
                     timeout_s: float) -> ContainerAnswer:
        self.in_flight += 1
        self._idle.clear()
        try:
            return await self._invoke(request, target or SINGLE_MODEL, started, timeout_s)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    async def _invoke(self, request: runtime.InvokeRequest, target: str, started: float,
                      timeout_s: float) -> ContainerAnswer:
        try:
            async with self.manager.acquire(target, timeout_s) as model:
                assert model.entry is not None
                try:
                    headers = runtime.triton_request_headers(request.content_type,
                                                             len(request.body))
                    if request.session_id is not None:  # a stateful session's call
                        headers[sessions.H_CONTAINER_SESSION_ID] = request.session_id
                    runtime.screen_body(request.body, runtime.binary_header_length(headers))
                except runtime.ContainerRejected as exc:
                    raise self._errors.model_error(exc.status, exc.body) from None
                remaining = max(timeout_s - (time.monotonic() - started), 0.001)
                infer_started = time.monotonic()
                task = asyncio.current_task()
                assert task is not None
                calling = self._calling.setdefault(target, set())
                calling.add(task)
                try:
                    response = await self.manager.infer(model, request.body, headers,
                                                        timeout=remaining)
                except asyncio.TimeoutError:
                    raise self._errors.timed_out() from None
                except asyncio.CancelledError:
                    reason = self._cut_short.pop(task, None)
                    if reason is None:
                        raise  # cancelled for another reason (a client gone, a stop)
                    if sys.version_info >= (3, 11):
                        task.uncancel()  # answered: this task is not being cancelled
                    raise self._errors.model_error(500, reason) from None
                finally:
                    calling.discard(task)
                    if not calling:
                        self._calling.pop(target, None)
                model_latency = time.monotonic() - infer_started
        except ObjectNotFound:
            source = self.manager.source
            stored = (await asyncio.to_thread(source.listing)  # off the loop: a folder walk
                      if target and isinstance(source, FolderSource) else None)
            error = runtime_errors.target_model_not_found(
                target or self.container.model_data, source.location, stored)
            log.info("model=%s step=not-found hint=%r", target, error.hint)
            raise error from None
        except ModelNotReady:
            raise runtime_errors.model_not_ready(target or self._errors.endpoint) from None
        except ModelLoadFailed as exc:
            raise self._errors.model_error(exc.status, exc.body) from None
        except (InvalidModelRepository, UnsafeArchive) as exc:
            raise self._errors.model_error(
                400, f'{{"error":"failed to load model: {exc}"}}') from None
        except TritonUnreachable as exc:
            # [U] what a client sees when the container dies mid-request.
            raise self._errors.model_error(
                500, f'{{"error":"container is unreachable: {exc}"}}') from None
        if response.status != 200:  # Triton's message, in the names the client knows
            answered = self._errors.model_error(response.status, public_text(
                response.body.decode(errors="replace"), self.manager.triton_repository,
                model.record.installed, model.entry, target or public_name(model.entry)))
            answered.model_latency_s = model_latency  # the model answered, with an error
            raise answered
        body, header_length = runtime.rename_model(
            response.body, runtime.binary_header_length(response.headers), model.entry,
            target or public_name(model.entry))
        return ContainerAnswer(
            body=body, content_type=runtime.sagemaker_content_type(header_length),
            custom_attributes=response.headers.get("X-Amzn-SageMaker-Custom-Attributes"),
            model_latency_s=model_latency, cache_hit=model.cache_hit)

    @property
    def oom_limit(self) -> int | None:
        """The instance type's whole memory, past which a process is killed (None: no type)."""
        known = lookup(self.budget.instance_type) if self.budget.instance_type else None
        return known.memory_bytes if known else None

    async def _watch_memory(self, probe: MemoryProbe, limit: int) -> None:
        """Kill the largest model process once the Triton's processes hold more than the
        instance has, as the kernel's OOM killer does there: the model's next answer is then
        Triton's "Stub process ... is not healthy", and the model is taken out and reloads on
        demand (docs/isolation.md), as users see it on SageMaker."""
        while True:
            await asyncio.sleep(OOM_POLL_S)
            try:
                killed = await asyncio.to_thread(probe.oom_kill, limit)
            except Exception:  # a failed check must not end the watch
                log.exception("instance %s: memory check failed", self.id)
                continue
            if killed is not None:
                self.manager.process_killed(
                    killed.model, f"out of memory: the instance's processes held "
                    f"{killed.total_bytes} bytes, more than the {limit} bytes of "
                    f"{self.budget.instance_type}; the largest model process (pid {killed.pid}, "
                    f"{killed.process_bytes} bytes, instance {killed.instance}) was killed")

    @property
    def publishes_gpu_metrics(self) -> bool:
        """A known CPU instance type publishes no GPU metrics, as on SageMaker, whatever GPUs
        this machine has; a GPU type, or an instance with no known type, publishes what NVML
        sees."""
        known = lookup(self.budget.instance_type) if self.budget.instance_type else None
        return known is None or known.gpus > 0

    def memory_utilization(self) -> dict[str, float]:
        """MemoryUtilization and GPUMemoryUtilization as the instance would publish them: what
        its Triton's processes hold (measured, docs/memory.md) in percent of the instance's
        memory (its type's; else its budget; else this machine's) and GPU memory. Empty when
        nothing can be measured (an external Triton: the sampler's figures stand)."""
        probe = self.manager.memory_probe
        if probe is None:
            return {}
        figures: dict[str, float] = {}
        total = probe.total_bytes()
        if total is not None:
            whole = self.budget.instance_bytes or machine_memory_bytes()
            figures["MemoryUtilization"] = 100.0 * total / whole
        gpu = probe.gpu_bytes()
        if gpu is not None and self.budget.instance_gpu_bytes:
            figures["GPUMemoryUtilization"] = 100.0 * gpu / self.budget.instance_gpu_bytes
        return figures

    def describe(self) -> dict[str, object]:
        usage = self.manager.usage()
        return {
            "InstanceId": self.id,
            "TritonUrl": self.launcher.http_url,
            "TritonRecycling": self.recycling,
            "TritonRecycles": self.manager.recycles,
            "SharedMemoryBodies": self.triton.shared_bodies,
            "Draining": self.draining,
            "InFlight": self.in_flight,
            "InstanceType": self.budget.instance_type,
            "MemoryBudgetBytes": usage.memory_budget_bytes,
            "MemoryBudgetSource": self.budget.source,
            "MemoryBudgetBeyondMachine": self.budget.beyond_machine,
            "GpuMemoryBudgetBytes": self.budget.gpu_memory_bytes,
            "GpuLoadedBytes": usage.gpu_loaded_bytes,  # measured, as GPU eviction counts
            "MaxLoadedModels": usage.max_loaded_models,
            "DiskBudgetBytes": usage.disk_budget_bytes,
            "LoadedBytes": usage.loaded_bytes,  # as eviction counts them: measured
            "LoadedFileBytes": usage.loaded_file_bytes,
            "MemoryMeasured": self.manager.memory_probe is not None,
            "DiskBytes": usage.disk_bytes,
            "LoadedModelCount": self.metrics.loaded_model_count,
            "Utilization": dict(self.metrics.latest),
            "Models": self.manager.describe(),
        }
