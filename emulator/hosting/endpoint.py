"""An endpoint as SageMaker hosts it: production variants, each a pool of instances.

``Endpoint.invoke`` is the behaviour behind ``POST /endpoints/{name}/invocations``. It splits the
work as SageMaker does: what the front end decides (TargetVariant, TargetModel present or not) is
a ValidationError; the router picks the variant and the instance; the instance makes the
container call. Metrics are recorded per variant.

``Endpoint.resize`` is the one update path for capacities and weights: new instances start (in
parallel) before traffic reaches them; removed instances stop taking traffic, finish what they
have in flight, then stop.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from emulator.contract import runtime, runtime_errors
from emulator.hosting.instance import Instance
from emulator.hosting.invocation_outcome import failed_call_samples
from emulator.hosting.multi_container import MultiContainerInstance, check_container_hostname
from emulator.hosting.routing import Router
from emulator.hosting.spec import EndpointSpec, VariantSpec
from emulator.metrics import EndpointMetrics, ExtraSeries, MetricSink

log = logging.getLogger(__name__)

# One instance of a variant: a Triton behind the model manager, or several containers.
HostedInstance = Instance | MultiContainerInstance

# Builds and starts nothing: returns a ready-to-start instance (see ``hosting.factory``).
InstanceBuilder = Callable[[EndpointSpec, VariantSpec, str, Path, EndpointMetrics],
                           Awaitable[HostedInstance]]

# [U] How long a removed instance may take to finish the requests it has in flight.
DRAIN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class InvokeResult:
    body: bytes
    headers: dict[str, str]


class Variant:
    def __init__(self, spec: VariantSpec, metrics: EndpointMetrics, work_dir: Path,
                 instance_suffix: str = "") -> None:
        self.spec = spec
        self.metrics = metrics
        self.work_dir = work_dir
        self.instances: list[HostedInstance] = []
        self._next_index = 1
        # A deployment's new fleet names its instances after it (``i-1-green1``), so that its
        # events, metrics and failures are never read as the running fleet's (``i-1``).
        self.instance_suffix = instance_suffix

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def weight(self) -> float:
        return self.spec.weight

    def serving(self) -> list[HostedInstance]:
        return [i for i in self.instances if not i.draining]

    def new_instance_id(self) -> str:
        instance_id = f"i-{self._next_index}{self.instance_suffix}"
        self._next_index += 1
        return instance_id


class Endpoint:
    def __init__(self, spec: EndpointSpec, work_dir: Path, build_instance: InstanceBuilder,
                 router: Router, error_context_account: tuple[str, str],
                 invocation_timeout_s: float, sink: MetricSink | None = None,
                 instance_suffix: str = "") -> None:
        self.spec = spec
        self.instance_suffix = instance_suffix
        self.work_dir = work_dir
        self._build_instance = build_instance
        self._router = router
        self._region, self._account = error_context_account
        self._timeout_s = invocation_timeout_s
        self._sink = sink
        self.variants: list[Variant] = [self._variant(v) for v in spec.variants]
        self._resize_lock = asyncio.Lock()

    def _variant(self, spec: VariantSpec) -> Variant:
        series = ExtraSeries(config_name=self.spec.config_name,
                             enhanced=self.spec.enhanced_metrics,
                             host_metrics=self.spec.detailed_observability)
        metrics = EndpointMetrics(self.spec.name, spec.name, self._sink, series)
        return Variant(spec, metrics, self.work_dir / spec.name, self.instance_suffix)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def instances(self) -> list[HostedInstance]:
        return [i for v in self.variants for i in v.instances]

    def variant(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)

    @property
    def publish_period_s(self) -> int:
        """MetricPublishFrequencyInSeconds: the utilization metrics' period (emulated s)."""
        return self.spec.publish_period_s

    @property
    def is_multi_model(self) -> bool:
        return self.variants[0].spec.container.is_multi_model

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every variant's instances in parallel; on any failure stop them all."""
        try:
            await asyncio.gather(*(self._add_instances(v, v.spec.instance_count)
                                   for v in self.variants))
        except BaseException:
            await self.stop()
            raise

    async def _add_instances(self, variant: Variant, count: int) -> None:
        built: list[HostedInstance] = []

        async def one() -> None:
            instance_id = variant.new_instance_id()
            instance = await self._build_instance(self.spec, variant.spec, instance_id,
                                                  variant.work_dir / instance_id, variant.metrics)
            built.append(instance)
            await instance.start()

        results = await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            await asyncio.gather(*(self._remove(variant, i, drain=False) for i in built),
                                 return_exceptions=True)
            raise failure
        variant.instances.extend(built)  # only now does the router see them
        for instance in built:
            log.info("endpoint=%s variant=%s instance=%s step=start triton=%s", self.name,
                     variant.name, instance.id, instance.launcher.http_url)

    async def _remove(self, variant: Variant, instance: HostedInstance, drain: bool = True) -> None:
        if drain:
            await instance.drain(DRAIN_TIMEOUT_S)
        if instance in variant.instances:
            variant.instances.remove(instance)
        try:
            await instance.stop()
        finally:
            variant.metrics.forget_instance(instance.id)
            await asyncio.to_thread(shutil.rmtree, instance.work_dir, True)
        log.info("endpoint=%s variant=%s instance=%s step=stop", self.name, variant.name,
                 instance.id)

    async def stop(self) -> None:
        """Let requests in flight finish, then stop every instance."""
        await asyncio.gather(*(self._remove(v, i) for v in self.variants
                               for i in list(v.instances)), return_exceptions=True)

    async def resize(self, spec: EndpointSpec) -> None:
        """Apply new weights and instance counts: start what is added, then drain what goes."""
        async with self._resize_lock:
            by_name = {v.name: v for v in self.variants}
            removals: list[tuple[Variant, HostedInstance]] = []
            additions = []
            for new in spec.variants:
                variant = by_name[new.name]
                current = len(variant.instances)
                if new.instance_count > current:
                    additions.append(self._add_instances(variant, new.instance_count - current))
                elif new.instance_count < current:
                    # [U] The newest instances go first: the oldest keep their warm caches.
                    for instance in variant.instances[new.instance_count:]:
                        instance.draining = True
                        removals.append((variant, instance))
            try:
                await asyncio.gather(*additions)
            except BaseException:
                for _, instance in removals:
                    instance.draining = False
                raise
            for new in spec.variants:  # weights switch once the new instances serve
                by_name[new.name].spec = new
            self.spec = spec
            await asyncio.gather(*(self._remove(v, i) for v, i in removals))

    # --- the request path -------------------------------------------------------------------

    def _choose_variant(self, request: runtime.InvokeRequest) -> Variant:
        if request.target_variant is not None:
            variant = self.variant(request.target_variant)
            if variant is None:
                raise runtime_errors.variant_not_found(request.target_variant, self.name)
            return variant
        variant = self._router.variant(self.variants)
        if variant is None:
            raise runtime_errors.no_variant_weight(self.name)
        return variant

    async def invoke(self, request: runtime.InvokeRequest) -> InvokeResult:
        started = time.monotonic()
        variant = self._choose_variant(request)
        metrics = variant.metrics
        # Recorded at the end, in one batch: a call counts once it is answered (or cut short).
        # Answered calls are recorded after the answer is written (``record_soon``).
        samples: list[tuple[str, float]] = [
            ("Invocations", 1), ("InvocationsPerInstance", 1 / max(len(variant.instances), 1))]
        instance: HostedInstance | None = None
        try:
            target = request.target_model
            multi_model = variant.spec.container.is_multi_model
            if multi_model and target is None:
                raise runtime_errors.missing_target_model(request.request_id)
            if not multi_model and target is not None:
                raise runtime_errors.not_multi_model(self.name)
            check_container_hostname(variant.spec, request, self.name)
            serving = variant.serving()
            if not serving:  # every instance is draining: a moment of a scale-in [U]
                raise runtime_errors.ServiceUnavailable(
                    f"Variant {variant.name} of endpoint {self.name} has no instance in service.")
            instance = self._router.instance(serving, target)
            answer = await instance.invoke(request, target, started, self._timeout_s)
        except runtime_errors.SageMakerError as exc:
            samples += failed_call_samples(exc, time.monotonic() - started)
            metrics.record_soon(samples, instance.id if instance is not None else None)
            raise
        except BaseException:  # cancelled (the client left, a stop): counted, not answered
            metrics.record_many(samples)
            metrics.record_series(samples, instance.id if instance is not None else None)
            raise
        samples += (
            ("Invocation4XXErrors", 0), ("Invocation5XXErrors", 0), ("InvocationModelErrors", 0),
            ("ModelLatency", answer.model_latency_s * 1e6),
            ("OverheadLatency", (time.monotonic() - started - answer.model_latency_s) * 1e6))
        metrics.record_soon(samples, instance.id)  # after the answer is written (record_soon)
        for container, seconds in answer.container_latencies:
            metrics.record("ContainerLatency", seconds * 1e6, {"ContainerName": container})
        headers = runtime.add_emulator_headers(
            runtime.response_headers(request.request_id, variant.name, answer.content_type,
                                     answer.custom_attributes),
            f"{variant.name}/{instance.id}", answer.model_latency_s, answer.cache_hit)
        return InvokeResult(answer.body, headers)

    def describe(self) -> dict[str, object]:
        return {
            "Variants": {
                v.name: {
                    "Weight": v.weight,
                    "DesiredInstanceCount": v.spec.instance_count,
                    "CurrentInstanceCount": len(v.serving()),
                    "Instances": [i.describe() for i in v.instances],
                }
                for v in self.variants
            }
        }
