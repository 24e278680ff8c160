"""An endpoint as SageMaker hosts it: production variants, each a pool of instances.

``Endpoint.invoke`` is the behaviour behind ``POST /endpoints/{name}/invocations``, for every
kind of endpoint. It splits the work as SageMaker does: the endpoint names the call's serving
group (``serving_group``: the variant TargetVariant or the router's weights pick; an endpoint
for inference components, the named component's copies); the group refuses what its front end
refuses (TargetModel present or not, no unit in service) and picks the unit; the unit makes the
container call. Each call is counted once, in its group's metrics (``hosting.call_record``).
The answer is an ``InvokeResult``: the runtime's route encodes it on the wire.

``Endpoint.resize`` is the one update path for capacities and weights: new instances start (in
parallel) before traffic reaches them; removed instances stop taking traffic, finish what they
have in flight, then stop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from emulator.contract import runtime, runtime_errors
from emulator.contract import sessions as session_wire
from emulator.contract.routing_config import RANDOM
from emulator.faults.rules import (
    INVOKE,
    RUNTIME,
    CallFacts,
    ErrorAnswer,
    InstanceFault,
    Latency,
    ModelErrorAnswer,
)
from emulator.faults.table import FaultTable
from emulator.hosting import affinity, instance_faults
from emulator.hosting.call_log import CallLog
from emulator.hosting.call_record import CallRecord
from emulator.hosting.data_capture import DataCapture
from emulator.hosting.instance import ContainerAnswer
from emulator.hosting.multi_container import check_container_hostname, manages_sessions
from emulator.hosting.routing import Router
from emulator.hosting.serving_group import DRAIN_TIMEOUT_S, ServingGroup, ServingUnit
from emulator.hosting.sessions import SessionTable
from emulator.hosting.spec import EndpointSpec, VariantSpec
from emulator.metrics import EndpointMetrics, ExtraSeries, MetricSink

log = logging.getLogger(__name__)

# One instance of a variant: a Triton behind the model manager, or several containers.
HostedInstance = ServingUnit

# Builds and starts nothing: returns a ready-to-start instance (see ``hosting.factory``).
InstanceBuilder = Callable[[EndpointSpec, VariantSpec, str, Path, EndpointMetrics],
                           Awaitable[HostedInstance]]


@dataclass(frozen=True, slots=True)
class InvokeResult:
    """An answered InvokeEndpoint, before the wire: what the model answered and who served it
    (the runtime's route encodes it as SageMaker's response and the emulator's headers)."""

    body: bytes
    content_type: str
    custom_attributes: str | None
    variant: str  # the production variant the answer names
    unit_id: str  # the instance (or component copy) that answered
    model_latency_s: float
    cache_hit: bool | None  # None: not reported (a component's copy has no model cache)
    generation: str | None = None  # during a deployment: "green" when the new fleet answered
    routed_by: str | None = None  # how the unit was chosen beyond the default (X-Mme-Routed-By)
    new_session: str | None = None  # NewSessionId: "<id>; Expires=<time>"
    closed_session: str | None = None  # ClosedSessionId


class Variant:
    """A production variant: a ``ServingGroup`` whose units are instances chosen by the
    endpoint's router, counted in InvocationsPerInstance."""

    reports_cache_hit = True

    def __init__(self, spec: VariantSpec, metrics: EndpointMetrics, work_dir: Path,
                 endpoint_name: str, router: Router, instance_suffix: str = "") -> None:
        self.spec = spec
        self.metrics = metrics
        self.endpoint_name = endpoint_name
        self._router = router
        self.work_dir = work_dir
        self.instances: list[HostedInstance] = []
        self._next_index = 1
        # A deployment's new fleet names its instances after it (``i-1-green1``), so that its
        # events, metrics and failures are never read as the running fleet's (``i-1``).
        self.instance_suffix = instance_suffix
        self.sessions = SessionTable()  # stateful sessions on its instances

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

    def arrive(self, started: float) -> CallRecord:
        return CallRecord(self.metrics, started, "InvocationsPerInstance", len(self.instances))

    def route(self, request: runtime.InvokeRequest
              ) -> tuple[HostedInstance, str | None, str | None]:
        """What the front end refuses (TargetModel present or not, an unknown container
        hostname, no instance in service), else the router's instance for the TargetModel."""
        target = request.target_model
        multi_model = self.spec.container.is_multi_model
        if multi_model and target is None:
            raise runtime_errors.missing_target_model(request.request_id)
        if not multi_model and target is not None:
            raise runtime_errors.not_multi_model(self.endpoint_name)
        check_container_hostname(self.spec, request, self.endpoint_name)
        serving = self.serving()
        if not serving:  # every instance is draining: a moment of a scale-in [U]
            raise runtime_errors.ServiceUnavailable(
                f"Variant {self.name} of endpoint {self.endpoint_name} has no instance in "
                "service.")
        spec = self.spec
        router = self._router
        instance, routed_by = affinity.choose(
            serving, request, self.sessions, None if multi_model else spec.prefix,
            self.endpoint_name,
            (lambda: router.random_instance(serving)) if spec.routing == RANDOM
            and not multi_model else (lambda: router.instance(serving, target)))
        return instance, target, routed_by

    def leave(self) -> None:
        """Nothing to count out: an instance counts its own calls in flight."""

    def describe_sessions(self) -> list[dict[str, object]]:
        """The open sessions (those of instances gone closed first)."""
        self.sessions.forget_members_except({i.id for i in self.serving()})
        return self.sessions.describe()


class Endpoint:
    # The fault rules a test put in force (set by the registry; None: never any).
    faults: FaultTable | None = None
    # ``mme serve --record``: where each call's line goes as it ends (None: not recording).
    call_log: CallLog | None = None
    # The config's DataCaptureConfig at work (set by the registry; None: nothing captured).
    capture: DataCapture | None = None
    # Stopped instances leave their folders (downloaded and extracted models) on disk: set by
    # the registry for a reset that keeps the model cache.
    keep_files: bool = False

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
        return Variant(spec, metrics, self.work_dir / spec.name, self.spec.name, self._router,
                       self.instance_suffix)

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
        await instance_faults.provisioned(self.faults, self.name, variant.name)
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
            if not self.keep_files:
                await asyncio.to_thread(shutil.rmtree, instance.work_dir, True)
        log.info("endpoint=%s variant=%s instance=%s step=stop", self.name, variant.name,
                 instance.id)

    async def stop(self) -> None:
        """Let requests in flight finish, then stop every instance."""
        await asyncio.gather(*(self._remove(v, i) for v in self.variants
                               for i in list(v.instances)), return_exceptions=True)
        if self.capture is not None:  # every answered call is in: its last file is written
            await self.capture.close()

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

    def serving_group(self, request: runtime.InvokeRequest) -> tuple[ServingGroup, str]:
        """The group that serves the call and the production variant its answer names:
        TargetVariant's, else the router's draw by weight."""
        session_id = request.session_id
        if (session_id is not None and request.target_variant is None
                and session_id != session_wire.NEW_SESSION):
            # [U] a call in a session goes to the session's variant (TargetVariant unneeded).
            held = next((v for v in self.variants if session_id in v.sessions), None)
            if held is not None:
                return held, held.name
        if request.target_variant is not None:
            variant = self.variant(request.target_variant)
            if variant is None:
                raise runtime_errors.variant_not_found(request.target_variant, self.name)
            return variant, variant.name
        variant = self._router.variant(self.variants)
        if variant is None:
            raise runtime_errors.no_variant_weight(self.name)
        return variant, variant.name

    async def invoke(self, request: runtime.InvokeRequest) -> InvokeResult:
        started = time.monotonic()
        group, variant = self.serving_group(request)
        call = group.arrive(started)  # a call counts once it is answered (or cut short)
        if self.call_log is not None:
            call.log_to(self.call_log, request, variant)
        unit: ServingUnit | None = None
        session: affinity.SessionCall | None = None
        try:
            unit, target, routed_by = group.route(request)
            if request.session_id is not None:
                session = affinity.SessionCall.of(request, self.name, manages_sessions(unit))
                request = session.request
            faults = self.faults
            if session is not None and session.control is not None:
                answer = session.control_answer()  # the session manager's, not the model's
            elif faults is not None and faults.armed:  # a test put fault rules in force
                answer = await self._invoke_unless_faulted(faults, request, unit, target,
                                                           variant, started)
            else:
                answer = await unit.invoke(request, target, started,
                                           request.timeout_s or self._timeout_s)
        except runtime_errors.SageMakerError as exc:
            call.failed(exc, unit.id if unit is not None else None)
            raise
        except BaseException:  # cancelled (the client left, a stop): counted, not answered
            call.cut_short(unit.id if unit is not None else None)
            raise
        finally:
            group.leave()
        call.answered(answer, unit.id)
        if self.capture is not None:
            self.capture.offer(request, answer, variant)
        new_session = closed_session = None
        if session is not None:
            new_session, closed_session = session.settle(group.sessions, unit.id, answer)
        return InvokeResult(answer.body, answer.content_type, answer.custom_attributes, variant,
                            unit.id, answer.model_latency_s,
                            answer.cache_hit if group.reports_cache_hit else None,
                            routed_by=routed_by, new_session=new_session,
                            closed_session=closed_session)

    async def _invoke_unless_faulted(self, faults: FaultTable, request: runtime.InvokeRequest,
                                     unit: ServingUnit, target: str | None, variant: str,
                                     started: float) -> ContainerAnswer:
        """The unit's answer, unless a fault rule fires for the call: then the error it names
        (counted as that answer would be), or the unit's answer that much later."""
        fired = faults.draw(CallFacts(RUNTIME, INVOKE, self.name, variant, unit.id, target,
                                      request.inference_component))
        timeout_s = request.timeout_s or self._timeout_s
        if fired is None:
            return await unit.invoke(request, target, started, timeout_s)
        fault = fired.fault
        if isinstance(fault, ErrorAnswer):
            raise runtime_errors.error_class(fault.code, fault.status)(fault.message)
        if isinstance(fault, ModelErrorAnswer):  # as if the container had answered it
            raise runtime_errors.model_error(
                fault.status, fault.message, self.name, self._region, self._account,
                runtime_errors.log_stream_arn(self._region, self._account, self.name))
        if isinstance(fault, InstanceFault):  # its Triton crashes or hangs under the call
            await instance_faults.apply(fault, unit, unit.id)
            return await unit.invoke(request, target, started, timeout_s)
        if not isinstance(fault, Latency):  # a load or a download: drawn where they happen
            return await unit.invoke(request, target, started, timeout_s)
        await asyncio.sleep(fired.delay_s)
        answer = await unit.invoke(request, target, started, timeout_s)
        if fault.on_model:  # the model's part took longer: ModelLatency moves, not overhead
            answer = dataclasses.replace(answer,
                                         model_latency_s=answer.model_latency_s + fired.delay_s)
        return answer

    def describe(self) -> dict[str, object]:
        return {
            "Variants": {
                v.name: {
                    "Weight": v.weight,
                    "DesiredInstanceCount": v.spec.instance_count,
                    "CurrentInstanceCount": len(v.serving()),
                    "Instances": [i.describe() for i in v.instances],
                    "RoutingStrategy": v.spec.routing,
                    "Sessions": v.describe_sessions(),
                }
                for v in self.variants
            }
        }
