"""The copies of one inference component: each copy is its own serving instance.

A copy is built and started exactly as one instance of a single-model endpoint is
(``hosting.factory.InstanceFactory.build``: an embedded Triton behind the model manager, or a
SageMaker container under the docker launcher): the component's model becomes a one-instance
variant (``CopyTarget.variant``). Nothing here launches a process itself.

``ComponentCopies.apply`` moves the copies to a target, one change at a time: new copies start
in parallel and join routing only once ready; removed copies (the newest first [U]) leave
routing at once, finish what they have in flight, then stop. A new specification (an
UpdateInferenceComponent) starts copies of the new model before the old ones drain [U].

A call that names the component is served by ``Endpoint.invoke`` with the copies as its
serving group (``hosting.serving_group``). Routing among ready copies follows the variant's
``RoutingConfig.RoutingStrategy``: LEAST_OUTSTANDING_REQUESTS (AWS's default: fewest requests
in flight, ties in turn) or RANDOM.

Metrics, in namespace AWS/SageMaker under the one dimension ``InferenceComponentName`` (as AWS
publishes an inference component's invocation metrics): Invocations, Invocation4XXErrors,
Invocation5XXErrors, InvocationModelErrors, InvocationsPerCopy (1 / ready copies per call),
ModelLatency and OverheadLatency (Microseconds), NoCapacityInvocationFailures (a call that found
no copy) and ConcurrentRequestsPerCopy (the component's requests in flight per ready copy:
sampled as each call arrives, this one included, and every CONCURRENCY_TICK_S of the emulated
clock, 0 when idle [U: AWS samples it on its own clock]). With EnableEnhancedMetrics each
call's Invocations, Invocation4XXErrors, Invocation5XXErrors, InvocationModelErrors,
ModelLatency and OverheadLatency are also published under the copy that answered it
(``component_tally.container_dimensions``: its InstanceId and ContainerId).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from emulator.clock import Clock, Ticks
from emulator.contract import runtime
from emulator.contract.routing_config import PrefixAwareConfig
from emulator.faults.table import FaultTable
from emulator.hosting import affinity, instance_faults
from emulator.hosting.call_record import CallRecord
from emulator.hosting.component_tally import DIMENSION
from emulator.hosting.routing import LeastOutstandingRequests, RandomChoice
from emulator.hosting.serving_group import DRAIN_TIMEOUT_S, ServingUnit
from emulator.hosting.sessions import SessionTable
from emulator.hosting.spec import ContainerSpec, EndpointSpec, VariantSpec
from emulator.metrics import (
    MICROSECONDS,
    NONE,
    PER_INSTANCE_INVOCATION_METRICS,
    EndpointMetrics,
    MetricSink,
)
from emulator.transitions import TransitionTable

log = logging.getLogger(__name__)

LEAST_OUTSTANDING_REQUESTS = "LEAST_OUTSTANDING_REQUESTS"
RANDOM = "RANDOM"
NAMESPACE = "AWS/SageMaker"
# Metric name -> unit. [U] units of the two AWS documents without one (counts: None).
COMPONENT_METRICS: dict[str, str] = {
    "Invocations": NONE,
    "InvocationsPerCopy": NONE,
    "Invocation4XXErrors": NONE,
    "Invocation5XXErrors": NONE,
    "InvocationModelErrors": NONE,
    "ModelLatency": MICROSECONDS,
    "OverheadLatency": MICROSECONDS,
    "NoCapacityInvocationFailures": NONE,
    "ConcurrentRequestsPerCopy": NONE,
}
# ConcurrentRequestsPerCopy is also published on this tick of the emulated clock (seconds),
# 0 when idle, so the high-resolution target tracking (10-second datapoints) sees an idle
# component and scales it in [U: AWS does not document its sampling; 10 s is the metric's
# resolution]. InvocationsPerCopy stays per call, as AWS publishes invocation metrics only
# when calls come.
CONCURRENCY_TICK_S = 10.0

Copy = ServingUnit  # built and served exactly as an instance of a variant is
CopyBuilder = Callable[[EndpointSpec, VariantSpec, str, Path, EndpointMetrics], Awaitable[Copy]]
# (component name, copy id) -> the dimensions of the copy's own series, None when its endpoint
# publishes none (EnableEnhancedMetrics off).
CopyDimensions = Callable[[str, str], "Mapping[str, str] | None"]


class ComponentMetrics:
    """A component's metrics (``COMPONENT_METRICS``) into the metric store, under its one
    dimension, and each call's invocation metrics under the copy that answered it when
    ``copy_dimensions`` gives that copy's series; its calls' ``CallSink``."""

    __slots__ = ("_component", "_copy_dimensions", "_dimensions", "_sink")

    def __init__(self, sink: MetricSink | None, component: str,
                 copy_dimensions: CopyDimensions | None = None) -> None:
        self._sink = sink
        self._component = component
        self._dimensions = {DIMENSION: component}
        self._copy_dimensions = copy_dimensions

    def record_now(self, samples: Sequence[tuple[str, float]],
                   unit_id: str | None = None) -> None:
        if self._sink is None:
            return
        self._sink.record_many(self._dimensions, [
            (NAMESPACE, COMPONENT_METRICS[name], name, value) for name, value in samples])
        dimensions = self._copy_series(unit_id)
        if dimensions is not None:
            per_copy = [(NAMESPACE, COMPONENT_METRICS[name], name, value)
                        for name, value in samples if name in PER_INSTANCE_INVOCATION_METRICS]
            if per_copy:
                self._sink.record_many(dimensions, per_copy)

    def _copy_series(self, unit_id: str | None) -> Mapping[str, str] | None:
        """The series of the copy that answered (None: none answered, or none published)."""
        if unit_id is None or self._copy_dimensions is None:
            return None
        return self._copy_dimensions(self._component, unit_id)

    def record_soon(self, samples: Sequence[tuple[str, float]],
                    unit_id: str | None = None) -> None:
        """``record_now`` once the event loop's current step (which writes the answer) is done."""
        asyncio.get_running_loop().call_soon(self.record_now, samples, unit_id)

    def record_container_latencies(self, latencies: Sequence[tuple[str, float]]) -> None:
        """Not published: a component's metrics have no ContainerLatency."""


@dataclass(frozen=True)
class CopyTarget:
    """What a component's copies should be: the model of each (a one-instance variant of the
    component's endpoint) and how many, and how calls are spread over them.
    ``variant.startup_timeout_s`` is the Specification's
    ``StartupParameters.ContainerStartupHealthCheckTimeoutInSeconds``, ``download_timeout_s``
    its ``ModelDataDownloadTimeoutInSeconds`` (None: unbounded)."""

    variant: VariantSpec
    copies: int
    routing: str = LEAST_OUTSTANDING_REQUESTS
    download_timeout_s: float | None = field(default=None, kw_only=True)
    # RoutingStrategy PREFIX_AWARE: its PrefixAwareRoutingConfig (``hosting.prefix_routing``).
    prefix: PrefixAwareConfig | None = field(default=None, kw_only=True)


class CopyStartTimeout(Exception):
    """A copy did not download its model, or did not become ready, within its
    StartupParameters' timeout."""


class _StartPhases:
    """Which phase a copy's start is in, from its model manager's events: the model's download
    and extraction (``downloading`` .. ``downloaded``), or the rest (the serving process
    starting, the model loading: what the health check waits for)."""

    def __init__(self) -> None:
        self.downloading = False
        self.changed = asyncio.Event()

    def observe(self, step: str, target: str, details: Mapping[str, object]) -> None:
        if step in ("downloading", "downloaded"):
            self.downloading = step == "downloading"
            self.changed.set()


async def start_within(copy: Copy, download_timeout_s: float | None,
                       health_timeout_s: float | None) -> None:
    """``copy.start()``, failed with CopyStartTimeout naming the timeout exceeded: the model's
    download and extraction within ``download_timeout_s``, and the rest of the start (the
    serving process up, the model loaded: ready for /ping) within ``health_timeout_s``, the
    download's time not counted [U: on AWS the download precedes the container's start; here
    a Triton copy starts its process first, then downloads its model]."""
    phases = _StartPhases()
    manager = getattr(copy, "manager", None)  # a Triton copy; a container's download is built
    if manager is not None:
        manager.add_observer(phases.observe)
    loop = asyncio.get_running_loop()
    start = asyncio.ensure_future(copy.start())
    health_used = 0.0
    try:
        while True:
            downloading, since = phases.downloading, loop.time()
            limit = download_timeout_s if downloading else (
                None if health_timeout_s is None else health_timeout_s - health_used)
            phases.changed.clear()
            change = asyncio.ensure_future(phases.changed.wait())
            done, _ = await asyncio.wait({start, change}, timeout=limit,
                                         return_when=asyncio.FIRST_COMPLETED)
            change.cancel()
            if start in done:
                start.result()
                return
            if not done:  # the phase's time is up
                if downloading:
                    raise CopyStartTimeout(
                        f"the model data was not downloaded and extracted within "
                        f"ModelDataDownloadTimeoutInSeconds ({download_timeout_s:g} s)")
                raise CopyStartTimeout(
                    f"the container did not pass its health check within "
                    f"ContainerStartupHealthCheckTimeoutInSeconds ({health_timeout_s:g} s)")
            if not downloading:
                health_used += loop.time() - since
    finally:
        if not start.done():
            start.cancel()
            await asyncio.gather(start, return_exceptions=True)


class ComponentCopies:
    def __init__(self, endpoint: str, name: str, work_dir: Path, build: CopyBuilder,
                 sink: MetricSink | None, seed: int | None = None,
                 check: Callable[[ContainerSpec], None] | None = None,
                 clock: Clock | None = None, copy_suffix: str = "",
                 copy_dimensions: CopyDimensions | None = None) -> None:
        self.endpoint = endpoint
        self._check = check
        # A rolling update's new copies carry its generation (copy-1-green1): never read as
        # the copies they replace (copy-1).
        self.copy_suffix = copy_suffix
        self.name = name
        self.work_dir = work_dir
        self._build = build
        self._sink = sink
        self.metrics = ComponentMetrics(sink, name, copy_dimensions)
        self._least_outstanding = LeastOutstandingRequests()
        self._random = RandomChoice(seed)
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self.faults: FaultTable | None = None  # the endpoint's fault rules (capacity)
        self.transitions: TransitionTable | None = None  # how a copy's start goes
        self.target: CopyTarget | None = None
        self._specs: dict[str, VariantSpec] = {}  # copy id -> the model it serves
        self.ready: list[Copy] = []  # in routing, oldest first
        self.failure: str | None = None  # why the last start failed (None: it did not)
        self.in_flight = 0
        self.sessions = SessionTable()  # stateful sessions on these copies
        # Instance metrics (model loading and the like) of the copies: kept, not published.
        self._instance_metrics: dict[str, EndpointMetrics] = {}
        # The emulated clock ConcurrentRequestsPerCopy is ticked on (None: only per call).
        self._clock = clock
        self._ticker: asyncio.Task[None] | None = None

    # --- the copies -------------------------------------------------------------------------

    async def apply(self, target: CopyTarget) -> None:
        """Start or stop copies until ``target`` holds; raises if a copy fails to start (the
        copies already serving keep serving)."""
        async with self._lock:
            self.target = target
            keep = [c for c in self.ready if self._specs[c.id] == target.variant]
            outdated = [c for c in self.ready if c not in keep]
            missing = max(target.copies - len(keep), 0)
            extra = keep[target.copies:][::-1] if len(keep) > target.copies else []
            if missing:
                try:
                    if self._check is not None:  # a missing artifact fails before any process
                        await asyncio.to_thread(self._check, target.variant.container)
                    await self._start(target.variant, missing, target.download_timeout_s)
                except Exception as exc:  # a cancel (a shutdown) is no failure of the copies
                    self.failure = str(exc) or type(exc).__name__
                    raise
            self.failure = None
            await self._remove(outdated + extra)

    async def stop(self) -> None:
        """Every copy out of routing, drained, stopped (DeleteInferenceComponent, DeleteEndpoint,
        shutdown)."""
        async with self._lock:
            self.target = None
            if self._ticker is not None:
                self._ticker.cancel()
                self._ticker = None
            await self._remove(list(self.ready))

    async def _start(self, variant: VariantSpec, count: int,
                     download_timeout_s: float | None = None) -> None:
        await instance_faults.provisioned(self.faults, self.endpoint, variant.name, self.name)
        built: list[Copy] = []

        async def one() -> None:
            if self.transitions is not None:  # a test's rule: later, never, or Failed
                await self.transitions.copy_started(self.name)
            copy_id = f"copy-{next(self._ids)}{self.copy_suffix}"
            metrics = self._instance_metrics[copy_id] = EndpointMetrics(
                self.endpoint, variant.name)
            building = self._build(EndpointSpec(self.endpoint, (variant,)), variant,
                                   f"{self.name}/{copy_id}", self.work_dir / copy_id, metrics)
            try:  # a SageMaker container's model data is downloaded as it is built
                copy = await asyncio.wait_for(building, download_timeout_s)
            except asyncio.TimeoutError:
                raise CopyStartTimeout(
                    f"the model data was not downloaded and extracted within "
                    f"ModelDataDownloadTimeoutInSeconds ({download_timeout_s:g} s)") from None
            self._specs[copy.id] = variant
            built.append(copy)
            await start_within(copy, download_timeout_s, variant.startup_timeout_s)

        starts = [asyncio.ensure_future(one()) for _ in range(count)]
        try:
            results = await asyncio.gather(*starts, return_exceptions=True)
        except BaseException:  # cancelled (a shutdown): no copy started here is left running
            for start in starts:
                start.cancel()
            await asyncio.gather(*starts, return_exceptions=True)
            await asyncio.shield(asyncio.gather(*(self._stop_copy(c) for c in built),
                                                return_exceptions=True))
            raise
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            await asyncio.gather(*(self._stop_copy(c) for c in built), return_exceptions=True)
            raise failure
        self.ready.extend(built)  # only now do calls reach them
        if self._ticker is None and self._clock is not None and self._sink is not None:
            self._ticker = asyncio.ensure_future(self._publish_concurrency(self._clock))
        log.info("inference component %s: %d copies started (%d ready)", self.name, count,
                 len(self.ready))

    async def _remove(self, copies: Sequence[Copy]) -> None:
        for copy in copies:  # out of routing at once; what they have in flight finishes
            if copy in self.ready:
                self.ready.remove(copy)
        await asyncio.gather(*(self._drain_and_stop(c) for c in copies), return_exceptions=True)

    async def _drain_and_stop(self, copy: Copy) -> None:
        await copy.drain(DRAIN_TIMEOUT_S)
        await self._stop_copy(copy)

    async def _stop_copy(self, copy: Copy) -> None:
        try:
            await copy.stop()
        finally:
            self._specs.pop(copy.id, None)
            await asyncio.to_thread(shutil.rmtree, copy.work_dir, True)
            log.info("inference component %s: copy %s stopped", self.name, copy.id)

    # --- the request path -------------------------------------------------------------------

    def choose(self, request: runtime.InvokeRequest | None = None) -> tuple[Copy, str | None]:
        """The copy for the call and how it was chosen (``hosting.affinity``: its session's
        copy, its prefix's with PREFIX_AWARE; None: by LEAST_OUTSTANDING_REQUESTS or RANDOM)."""
        copies = [c for c in self.ready if not c.draining]
        if not copies:
            raise LookupError("no ready copy")
        target = self.target
        routing = target.routing if target is not None else LEAST_OUTSTANDING_REQUESTS
        strategy = self._random if routing == RANDOM else self._least_outstanding
        if request is None:
            return strategy.choose(copies), None
        return affinity.choose(copies, request, self.sessions,
                               target.prefix if target is not None else None, self.endpoint,
                               lambda: strategy.choose(copies))

    # A ServingGroup (``hosting.serving_group``) for the calls that name the component.

    reports_cache_hit = False  # a copy serves its one model, loaded before it is ready

    def arrive(self, started: float) -> CallRecord:
        """Count a call in: InvocationsPerCopy and ConcurrentRequestsPerCopy (this call
        included) by the ready copies."""
        self.in_flight += 1
        ready = max(len(self.ready), 1)
        return CallRecord(self.metrics, started, "InvocationsPerCopy", ready,
                          ("ConcurrentRequestsPerCopy", self.in_flight / ready))

    def route(self, request: runtime.InvokeRequest) -> tuple[Copy, None, str | None]:
        copy, routed_by = self.choose(request)
        return copy, None, routed_by

    def leave(self) -> None:
        self.in_flight -= 1

    async def _publish_concurrency(self, clock: Clock) -> None:
        """ConcurrentRequestsPerCopy every CONCURRENCY_TICK_S emulated seconds while the
        component has ready copies (0 when none is in flight), on a grid of its own: at a fast
        clock the period is a few real milliseconds, and a late tick must not shift the rest."""
        ticks = Ticks(clock.now)
        while True:
            await clock.sleep_until(ticks.next(clock.real_duration(CONCURRENCY_TICK_S)))
            if self.ready:
                self.metrics.record_now(
                    [("ConcurrentRequestsPerCopy", self.in_flight / len(self.ready))])

    def describe(self) -> Mapping[str, object]:
        return {"ReadyCopies": [c.id for c in self.ready], "InFlight": self.in_flight,
                "Failure": self.failure, "Sessions": self.describe_sessions()}

    def describe_sessions(self) -> list[dict[str, object]]:
        """The open sessions on these copies (those of copies gone closed first)."""
        self.sessions.forget_members_except({c.id for c in self.ready})
        return self.sessions.describe()
