"""All endpoints by name; the single place that starts, reshapes and stops them."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import shutil
import time
from pathlib import Path
from typing import Any, Protocol

from emulator.background import ShieldedTasks, cancel_and_wait
from emulator.clock import Clock, Ticks
from emulator.contract.data_capture import CaptureRules
from emulator.faults.table import FaultTable
from emulator.hosting.call_log import CallLog
from emulator.hosting.component_copies import CopyTarget
from emulator.hosting.components import ComponentEndpoint, ComponentLookup
from emulator.hosting.data_capture import DataCapture
from emulator.hosting.deployment import SplitEndpoint
from emulator.hosting.endpoint import Endpoint, InstanceBuilder
from emulator.hosting.routing import Router
from emulator.hosting.spec import (
    DEFAULT_PUBLISH_PERIOD_S,
    ContainerSpec,
    EndpointSpec,
    MetricsOptions,
)
from emulator.hosting.utilization import UtilizationSampler
from emulator.manager.model_manager import ModelManager
from emulator.manager.sources import source_for
from emulator.metrics import SAMPLED_AT, MetricSink
from emulator.s3_objects import S3Objects
from emulator.settings import Settings
from emulator.supervision import STOPPING_AT_ONCE
from emulator.transitions import TransitionTable

log = logging.getLogger(__name__)


def publish_period_s(endpoint: SplitEndpoint) -> int:
    """The endpoint's MetricPublishFrequencyInSeconds (its config's, for models or for
    inference components alike)."""
    period = getattr(endpoint, "publish_period_s", DEFAULT_PUBLISH_PERIOD_S)
    return period if isinstance(period, int) and period > 0 else DEFAULT_PUBLISH_PERIOD_S


class DeploymentView(Protocol):
    """A deployment in progress as the live page shows it (``emulator.control.deployments``)."""

    def describe(self) -> dict[str, Any]: ...


class EndpointRegistry:
    def __init__(self, settings: Settings, build_instance: InstanceBuilder,
                 sink: MetricSink | None = None, sample_period_s: float = 60.0,
                 faults: FaultTable | None = None, clock: Clock | None = None,
                 transitions: TransitionTable | None = None,
                 call_log: CallLog | None = None, s3: S3Objects | None = None) -> None:
        self.settings = settings
        # Where data capture writes (the server's S3 client, shared with asynchronous inference).
        self._s3 = s3 if s3 is not None else S3Objects(settings.s3_endpoint_url, settings.region)
        self.transitions = transitions  # a copy's start is held as its rule says
        self._clock = clock  # the utilization sampler waits on it (an advance wakes it)
        self.faults = faults  # the fault rules every endpoint's calls are checked against
        self.call_log = call_log  # mme serve --record: every endpoint's calls, one line each
        self._build_instance = build_instance
        self._router = Router(settings.routing_seed)
        self._sink = sink
        self._endpoints: dict[str, SplitEndpoint] = {}
        # The generations' draw: seeded with the router so tests and benchmarks are exact.
        self._generation_draw = random.Random(settings.routing_seed)
        # Deployments in progress, by endpoint name, for the live page.
        self.deployments: dict[str, DeploymentView] = {}
        self._green_numbers: dict[str, int] = {}  # deployments started, by endpoint name
        self._sample_period_s = sample_period_s
        self._sampler_task: asyncio.Task[None] | None = None
        self._samplers: dict[int, UtilizationSampler] = {}
        # Stops under way: they outlive the request that started them (a shutdown cancels it).
        self._stopping = ShieldedTasks()

    def get(self, name: str) -> SplitEndpoint | None:
        return self._endpoints.get(name)

    def names(self) -> list[str]:
        return sorted(self._endpoints)

    def all(self) -> list[SplitEndpoint]:
        return [self._endpoints[n] for n in self.names()]

    async def _start(self, spec: EndpointSpec, generation: str = "",
                     instance_suffix: str = "") -> SplitEndpoint:
        s = self.settings
        for variant in spec.variants:  # a missing bucket or prefix fails before any Triton starts
            for container in variant.containers:
                if not container.model_data:  # a container without model data (pipelines)
                    continue
                source = source_for(container.model_data, s.s3_endpoint_url, s.region)
                await asyncio.to_thread(source.check, not container.is_multi_model)
        work_dir = s.cache_dir / "endpoints" / (spec.name + generation)
        if work_dir.exists():  # a previous run's cache: models reload on demand
            await asyncio.to_thread(shutil.rmtree, work_dir)
        work_dir.mkdir(parents=True)
        endpoint = SplitEndpoint(spec, work_dir, self._build_instance, self._router,
                                 (s.region, s.account_id), s.invocation_timeout_s, self._sink,
                                 instance_suffix)
        endpoint.draw = self._generation_draw
        endpoint.faults = self.faults
        endpoint.call_log = self.call_log
        if spec.capture_config is not None:
            endpoint.capture = DataCapture(CaptureRules.of(spec.capture_config), spec.name,
                                           self._s3.put, random.Random(s.routing_seed))
        try:
            await endpoint.start()
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, work_dir, True)
            raise
        self._ensure_sampler()
        return endpoint

    async def create(self, spec: EndpointSpec) -> SplitEndpoint:
        if spec.name in self._endpoints:
            raise ValueError(f"endpoint {spec.name} already exists")
        endpoint = await self._start(spec)
        self._endpoints[spec.name] = endpoint
        return endpoint

    async def create_for_components(self, name: str, lookup: ComponentLookup,
                                    metrics: MetricsOptions) -> SplitEndpoint:
        """An endpoint for inference components: no process of its own; its calls are
        answered by its components' rules (``emulator.hosting.components``); its metrics are
        published as its config's MetricsConfig says (``metrics``)."""
        if name in self._endpoints:
            raise ValueError(f"endpoint {name} already exists")
        work_dir = self.settings.cache_dir / "endpoints" / name
        if work_dir.exists():  # a previous run's copies: they start again from the artifact
            await asyncio.to_thread(shutil.rmtree, work_dir)
        endpoint = self._component_endpoint(name, work_dir, lookup, metrics)
        self._endpoints[name] = endpoint
        self._ensure_sampler()  # its copies' utilization, on the instances' tick
        return endpoint

    def _component_endpoint(self, name: str, work_dir: Path, lookup: ComponentLookup,
                            metrics: MetricsOptions, copy_suffix: str = "") -> ComponentEndpoint:
        s = self.settings
        endpoint = ComponentEndpoint(name, work_dir, self._router, (s.region, s.account_id),
                                     s.invocation_timeout_s, lookup, self._build_instance,
                                     self._sink, s.routing_seed, self._check_artifact,
                                     clock=self._clock or Clock(s.clock_scale),
                                     copy_suffix=copy_suffix)
        endpoint.faults = self.faults
        endpoint.call_log = self.call_log
        endpoint.transitions = self.transitions
        endpoint.metrics_options = metrics
        endpoint.draw = self._generation_draw
        return endpoint

    async def start_component_green(self, name: str, copies: dict[str, CopyTarget],
                                    metrics: MetricsOptions) -> ComponentEndpoint:
        """A guarded UpdateEndpoint of an endpoint for components: the new fleet, each
        component's copies (``copies``) started whole beside the running ones; it takes no
        traffic until ``shift``. Raises (nothing left running) if a copy cannot start."""
        blue = self._endpoints.get(name)
        if not isinstance(blue, ComponentEndpoint):
            raise LookupError(f"endpoint {name} is not running for inference components")
        await self.drop_green(name)
        number = self._green_numbers[name] = self._green_numbers.get(name, 0) + 1
        work_dir = self.settings.cache_dir / "endpoints" / f"{name}.green.{time.monotonic_ns()}"
        green = self._component_endpoint(name, work_dir, blue.lookup, metrics,
                                         copy_suffix=f"-bg{number}")
        try:
            await asyncio.gather(*(green.apply_copies(component, target)
                                   for component, target in copies.items()))
        except BaseException:
            await self._stop_surviving(green)
            raise
        if self._endpoints.get(name) is not blue:  # deleted while the copies started
            await self._stop_surviving(green)
            raise LookupError(f"endpoint {name} was deleted during the deployment")
        blue.green, blue.green_share = green, 0.0
        return green

    def configure_metrics(self, name: str, metrics: MetricsOptions) -> None:
        """An endpoint for components publishes as its new config's MetricsConfig says (an
        UpdateEndpoint); nothing to do for any other endpoint, or one that is gone."""
        endpoint = self._endpoints.get(name)
        if isinstance(endpoint, ComponentEndpoint):
            endpoint.metrics_options = metrics

    def _check_artifact(self, container: ContainerSpec) -> None:
        """A copy's model data exists (raises ObjectNotFound saying where it looked)."""
        if container.model_data:
            source_for(container.model_data, self.settings.s3_endpoint_url,
                       self.settings.region).check(not container.is_multi_model)

    async def apply_copies(self, endpoint_name: str, component: str,
                           target: CopyTarget | None) -> None:
        """A component's copies to ``target`` (None: all stopped); the control plane's hook
        (``emulator.control.inference_components``). Nothing to do once the endpoint is gone:
        its copies stopped with it."""
        endpoint = self._endpoints.get(endpoint_name)
        if isinstance(endpoint, ComponentEndpoint):
            await endpoint.apply_copies(component, target)

    async def replace(self, spec: EndpointSpec) -> SplitEndpoint:
        """A new deployment: start it whole, switch traffic to it, then drain and stop the old."""
        old = self._endpoints.get(spec.name)
        endpoint = await self._start(spec, generation=f".{time.monotonic_ns()}")
        self._endpoints[spec.name] = endpoint
        if old is not None:
            await self._stop_surviving(old)
        return endpoint

    async def resize(self, spec: EndpointSpec) -> Endpoint:
        """The same deployment with new weights and instance counts (no restart of the rest)."""
        endpoint = self._endpoints.get(spec.name)
        if endpoint is None:
            raise LookupError(f"endpoint {spec.name} is not running")
        await endpoint.resize(spec)
        return endpoint

    async def delete(self, name: str, keep_files: bool = False) -> None:
        """Stop the endpoint (and a deployment's new generation beside it) and remove its
        folder; ``keep_files`` leaves its instances' folders (their models) on disk."""
        endpoint = self._endpoints.pop(name, None)
        self.deployments.pop(name, None)
        self._green_numbers.pop(name, None)
        if endpoint is not None:
            green = endpoint.green
            endpoint.green, endpoint.green_share = None, 0.0
            for stopped in (endpoint, green):
                if stopped is not None:
                    stopped.keep_files = keep_files
            # The stops are tasks from this step on: a cancel of the caller cannot lose them.
            stops = [self._stop_task(e) for e in (endpoint, green) if e is not None]
            await asyncio.shield(asyncio.gather(*stops))

    # --- the default endpoint's store: --watch and --preload --------------------------------

    def _managers(self, name: str) -> list[tuple[str, ModelManager]]:
        """(instance id, model manager) of every instance of the endpoint, both generations."""
        endpoint = self._endpoints.get(name)
        generations = [endpoint, endpoint.green] if endpoint is not None else []
        return [(instance.id, manager) for generation in generations if generation is not None
                for instance in generation.instances
                if isinstance(manager := getattr(instance, "manager", None), ModelManager)]

    def store_changed(self, name: str, target: str) -> None:
        """The store's object for ``target`` changed: each instance of endpoint ``name`` loads
        the new version at its next call (``ModelManager.store_changed``)."""
        for _instance, manager in self._managers(name):
            manager.store_changed(target)

    async def preload(self, name: str, target: str) -> list[tuple[str, float]]:
        """Load ``target`` on every instance of endpoint ``name`` now, side by side; (instance
        id, seconds) of each."""
        async def one(instance: str, manager: ModelManager) -> tuple[str, float]:
            started = time.monotonic()
            await manager.preload(target)
            return instance, time.monotonic() - started

        return list(await asyncio.gather(*(one(i, m) for i, m in self._managers(name))))

    # --- deployments: a second generation beside the first ----------------------------------

    async def start_green(self, spec: EndpointSpec) -> SplitEndpoint:
        """Start the new generation whole beside the running one; it takes no traffic until
        ``shift``. A previous green (a deployment resumed) is stopped first."""
        blue = self._endpoints.get(spec.name)
        if blue is None:
            raise LookupError(f"endpoint {spec.name} is not running")
        await self.drop_green(spec.name)
        # Green's instances carry its generation in their names (i-1-green1, then green2 for
        # the next deployment, rolled back or not); blue's keep theirs.
        number = self._green_numbers[spec.name] = self._green_numbers.get(spec.name, 0) + 1
        green = await self._start(spec, generation=f".green.{time.monotonic_ns()}",
                                  instance_suffix=f"-green{number}")
        if self._endpoints.get(spec.name) is not blue:  # deleted while green started
            await self._stop_surviving(green)
            raise LookupError(f"endpoint {spec.name} was deleted during the deployment")
        blue.green, blue.green_share = green, 0.0
        return green

    def green(self, name: str) -> Endpoint | None:
        blue = self._endpoints.get(name)
        return blue.green if blue is not None else None

    def shift(self, name: str, share: float) -> None:
        """Send ``share`` (0-1) of the endpoint's calls to its green generation."""
        blue = self._endpoints.get(name)
        if blue is not None and blue.green is not None:
            blue.green_share = max(0.0, min(1.0, share))

    def traffic_share(self, name: str) -> float:
        blue = self._endpoints.get(name)
        return blue.green_share if blue is not None and blue.green is not None else 0.0

    async def resize_generation(self, name: str, green: bool, count: int) -> None:
        """A rolling update's move: the green (or blue) generation to ``count`` instances per
        variant; new ones start before they take traffic, removed ones drain first."""
        blue = self._endpoints.get(name)
        endpoint = (blue.green if green else blue) if blue is not None else None
        if endpoint is None:
            raise LookupError(f"endpoint {name} has no {'green' if green else 'blue'} generation")
        await endpoint.resize(endpoint.spec.with_capacities(
            {v.name: (None, count) for v in endpoint.spec.variants}))

    async def drop_green(self, name: str) -> None:
        """A rollback: every new call goes to blue at once, then green drains and stops."""
        blue = self._endpoints.get(name)
        if blue is None or blue.green is None:
            return
        green = blue.green
        blue.green, blue.green_share = None, 0.0
        await self._stop_surviving(green)

    def promote(self, name: str) -> SplitEndpoint | None:
        """Green becomes the endpoint; the old generation is returned, out of the registry but
        still serving what it has, for ``retire`` after the termination wait."""
        blue = self._endpoints.get(name)
        if blue is None or blue.green is None:
            return None
        green = blue.green
        assert isinstance(green, SplitEndpoint)
        blue.green, blue.green_share = None, 0.0
        self._endpoints[name] = green
        return blue

    async def retire(self, endpoint: Endpoint) -> None:
        """Drain and stop a generation the registry no longer lists."""
        await self._stop_surviving(endpoint)

    async def _stop_surviving(self, endpoint: Endpoint) -> None:
        """Stop an endpoint the registry no longer lists; cancelling the caller does not cancel
        the stop, and ``close()`` waits for it, so no Triton or cache folder is left behind."""
        await asyncio.shield(self._stop_task(endpoint))

    def _stop_task(self, endpoint: Endpoint) -> asyncio.Future[None]:
        return self._stopping.start(self._stop(endpoint), name=f"stop {endpoint.work_dir.name}")

    @staticmethod
    async def _stop(endpoint: Endpoint) -> None:
        await endpoint.stop()
        if not endpoint.keep_files:
            await asyncio.to_thread(shutil.rmtree, endpoint.work_dir, True)

    async def clear(self, keep_files: bool = False) -> int:
        """Every endpoint stopped and forgotten, with every stop under way awaited (a reset:
        no Triton is left running); ``keep_files`` as for ``delete``. How many there were."""
        names = self.names()
        at_once = STOPPING_AT_ONCE.set(True)  # their processes are killed, not asked to exit
        try:
            await asyncio.gather(*(self.delete(name, keep_files) for name in names))
        finally:
            STOPPING_AT_ONCE.reset(at_once)
        await self._stopping.drain()
        self.deployments.clear()
        self._green_numbers.clear()
        return len(names)

    async def close(self) -> None:
        if self._sampler_task is not None:
            await cancel_and_wait(self._sampler_task)
        await asyncio.gather(*(self.delete(name) for name in self.names()))
        # Stops whose callers were cancelled (a DeleteEndpoint at shutdown).
        await self._stopping.drain()

    # --- instance utilization ---------------------------------------------------------------

    def _ensure_sampler(self) -> None:
        if self._sampler_task is None or self._sampler_task.done():
            self._sampler_task = asyncio.create_task(self._sample_forever(), name="utilization")

    async def _sample_forever(self) -> None:
        """Each endpoint's utilization every MetricPublishFrequencyInSeconds (emulated; 60 s
        unless its config says otherwise): the loop ticks at the largest period that divides
        every endpoint's, and samples those whose period has run out. The ticks keep to their
        own grid (``Ticks``): a sample that runs late does not stretch the periods after it."""
        real_per_emulated_s = self._sample_period_s / DEFAULT_PUBLISH_PERIOD_S
        waited: dict[str, int] = {}  # emulated seconds since each endpoint's last sample
        ticks = Ticks(self._clock.now if self._clock is not None else time.time)
        while True:
            periods = {e.name: publish_period_s(e) for e in self.all()}
            tick = math.gcd(*periods.values()) if periods else DEFAULT_PUBLISH_PERIOD_S
            tick_at = ticks.next(tick * real_per_emulated_s)
            if self._clock is not None:
                await self._clock.sleep_until(tick_at)
            else:
                await asyncio.sleep(max(0.0, tick_at - time.time()))
            due = []
            for name, period in periods.items():
                waited[name] = waited.get(name, 0) + tick
                if waited[name] >= period:
                    waited[name] -= period
                    due.append(name)
            waited = {name: waited[name] for name in periods}
            if not due:
                continue
            stamp = SAMPLED_AT.set(tick_at)  # to_thread runs the sample in this context
            try:
                await asyncio.to_thread(self.sample_utilization, due)
            except Exception:  # a failed sample must not stop the next ones
                log.exception("utilization sample failed")
            finally:
                SAMPLED_AT.reset(stamp)

    def sample_utilization(self, names: list[str] | None = None) -> None:
        """One sample of the utilization metrics of every instance (of the endpoints named;
        None: all of them). Also called by tests."""
        now = time.monotonic()
        seen: dict[int, UtilizationSampler] = {}
        for endpoint in self.all():
            if names is not None and endpoint.name not in names:
                previous = {id(i): self._samplers[id(i)] for v in endpoint.variants
                            for i in v.instances if id(i) in self._samplers}
                seen.update(previous)  # not due: keep its CPU bases
                continue
            if isinstance(endpoint, ComponentEndpoint):  # its copies' normalized utilization
                endpoint.sample_utilization(now)
            for variant in endpoint.variants:
                for instance in list(variant.instances):
                    sampler = seen[id(instance)] = self._samplers.get(id(instance),
                                                                      UtilizationSampler())
                    pid = getattr(instance.launcher, "pid", None)
                    usage = instance.manager.usage()
                    figures = sampler.sample(
                        pid if isinstance(pid, int) else None, now, usage.disk_bytes,
                        usage.disk_budget_bytes, Path(instance.work_dir))
                    # Memory as measured against the instance's own memory (docs/memory.md).
                    figures.update(getattr(instance, "memory_utilization", dict)())
                    if not getattr(instance, "publishes_gpu_metrics", True):
                        figures.pop("GPUUtilization", None)
                        figures.pop("GPUMemoryUtilization", None)
                    # One LoadedModelCount sample per instance and period, so that, as in
                    # CloudWatch, its Sum adds the instances up and its Average is per instance.
                    figures["LoadedModelCount"] = instance.metrics.loaded_model_count
                    for name, value in figures.items():
                        instance.metrics.sample(name, value)
        self._samplers = seen
