"""An endpoint for inference components, as the runtime sees it.

Such an endpoint hosts no model of its own: each call names an inference component
(``X-Amzn-SageMaker-Inference-Component``) and is served by one of that component's copies,
each its own serving instance (``hosting.component_copies``). This object answers what
SageMaker's front end answers before a copy is reached (the header missing, a component the
endpoint does not have, one with no copy) and otherwise hands the call to the component.

The control plane (``emulator.control.inference_components``) decides how many copies each
component has (placement) and calls ``apply_copies`` through the registry; a call's view of
the component comes from it through ``ComponentLookup``: this module knows nothing above the
hosting layer.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

from emulator.background import ShieldedTasks
from emulator.clock import Clock
from emulator.contract import runtime, runtime_errors
from emulator.hosting.component_copies import (
    ComponentCopies,
    ComponentMetrics,
    CopyBuilder,
    CopyTarget,
)
from emulator.hosting.component_tally import ComponentTally, container_dimensions
from emulator.hosting.copy_utilization import (
    ComponentGroup,
    CopyUtilization,
    copy_instances,
    label_of,
)
from emulator.hosting.copy_utilization import describe as describe_component
from emulator.hosting.deployment import SplitEndpoint
from emulator.hosting.endpoint import HostedInstance
from emulator.hosting.instance import ErrorContext
from emulator.hosting.placement import Reservation
from emulator.hosting.routing import Router
from emulator.hosting.serving_group import ServingGroup
from emulator.hosting.spec import ContainerSpec, EndpointSpec, MetricsOptions, VariantSpec
from emulator.metrics import EndpointMetrics, MetricSink
from emulator.transitions import TransitionTable


@dataclass(frozen=True)
class ComponentState:
    """What a call needs to know of a component: its status, how many copies it has placed,
    the variant it is on (its answers name it) and its name as created (metrics carry it)."""

    status: str
    copies: int
    variant: str = "AllTraffic"
    name: str = ""
    # For the metrics and the page (``hosting.copy_utilization``): copies asked for, placed
    # copies per instance, and what each copy reserves.
    desired_copies: int = 0
    placement: tuple[int, ...] = ()
    reservation: Reservation | None = None


# The status of a component being deleted (its copies are stopping; none may start).
_DELETING = "Deleting"

@dataclass(frozen=True)
class RollingTarget(CopyTarget):
    """A batch of a rolling update (``emulator.control.component_updates``): ``copies`` of the
    new ``variant`` beside ``outgoing_copies`` of the ``outgoing`` (old) one. A plain
    ``CopyTarget`` afterwards ends the update: the side whose specification it names stays."""

    outgoing: VariantSpec | None = None
    outgoing_copies: int = 0

    @classmethod
    def of(cls, incoming: CopyTarget, copies: int, outgoing: VariantSpec,
           outgoing_copies: int) -> RollingTarget:
        """``copies`` copies of ``incoming`` (all its settings kept) beside ``outgoing_copies``
        of ``outgoing``."""
        return cls(**{**_settings(incoming), "copies": copies}, outgoing=outgoing,
                   outgoing_copies=outgoing_copies)

    def sides(self) -> tuple[CopyTarget, CopyTarget]:
        """The new side's target and the old side's, each a plain ``CopyTarget``."""
        if self.outgoing is None:
            raise ValueError("a rolling update's target names the outgoing specification")
        new = CopyTarget(**_settings(self))
        return new, CopyTarget(**{**_settings(self), "variant": self.outgoing,
                                  "copies": self.outgoing_copies})


def _settings(target: CopyTarget) -> dict[str, Any]:
    """A target's members as ``CopyTarget`` has them (whatever members it gains)."""
    return {f.name: getattr(target, f.name) for f in fields(CopyTarget)}


# (endpoint name, component name) -> the component's state, or None if the endpoint has none
# of that name.
ComponentLookup = Callable[[str, str], "ComponentState | None"]


async def _no_instances(endpoint: EndpointSpec, variant: VariantSpec, instance_id: str,
                        work_dir: Path, metrics: EndpointMetrics) -> NoReturn:
    raise AssertionError("an endpoint for inference components has no variant of models")


class ComponentEndpoint(SplitEndpoint):
    """No variant of models; every call is for one of its components."""

    transitions: TransitionTable | None = None  # how its copies' starts go (the registry's)

    def __init__(self, name: str, work_dir: Path, router: Router,
                 region_account: tuple[str, str], invocation_timeout_s: float,
                 lookup: ComponentLookup, build_copy: CopyBuilder | None = None,
                 sink: MetricSink | None = None, seed: int | None = None,
                 check_artifact: Callable[[ContainerSpec], None] | None = None,
                 clock: Clock | None = None, copy_suffix: str = "") -> None:
        super().__init__(EndpointSpec(name, ()), work_dir, _no_instances, router,
                         region_account, invocation_timeout_s)
        self._lookup = lookup
        # A guarded UpdateEndpoint's new fleet names its copies apart (copy-1-bg1): never read
        # as the running fleet's copies (copy-1).
        self.copy_suffix = copy_suffix
        self._build_copy = build_copy
        # Every component metric goes through the tally (running statistics for /metrics and
        # the page) on to the CloudWatch store.
        self.tally = ComponentTally(sink)
        self._metric_sink = self.tally
        self._utilization = CopyUtilization()
        self._seed = seed
        self._check_artifact = check_artifact
        self._clock = clock  # the emulated clock: the copies' metric tick
        self._components: dict[str, ComponentCopies] = {}  # by lowercased component name
        # The new specification's copies of a component in a rolling update, beside its own.
        self._incoming: dict[str, ComponentCopies] = {}
        # Deleted components' copies stopping: a cancel of the delete (a shutdown) leaves them
        # running here, and ``stop`` waits for them, so no Triton is left unreaped.
        self._stopping = ShieldedTasks()
        self._update_ids = itertools.count(1)
        self._generation_draw = random.Random(seed)
        self._update_locks: dict[str, asyncio.Lock] = {}
        # Its endpoint config's MetricsConfig (the control plane sets it as the config changes).
        self.metrics_options = MetricsOptions()
        # The instance each copy is on in its own series: where it was first seen placed.
        self._copy_instances: dict[str, str] = {}

    @property
    def is_multi_model(self) -> bool:
        return False

    @property
    def lookup(self) -> ComponentLookup:
        """How a call learns of a component (the control plane's records)."""
        return self._lookup

    @property
    def publish_period_s(self) -> int:
        """MetricPublishFrequencyInSeconds: the copies' utilization period (emulated s)."""
        return self.metrics_options.publish_period_s

    @property
    def instances(self) -> list[HostedInstance]:
        return [c for copies in [*self._components.values(), *self._incoming.values()]
                for c in copies.ready]

    # --- copies -----------------------------------------------------------------------------

    def _copies(self, component: str) -> ComponentCopies:
        key = component.lower()
        copies = self._components.get(key)
        if copies is None:
            if self._build_copy is None:
                raise RuntimeError("this endpoint was built without a copy builder")
            copies = self._components[key] = ComponentCopies(
                self.name, component, self.work_dir / key, self._build_copy, self._metric_sink,
                self._seed, clock=self._clock, copy_suffix=self.copy_suffix,
                copy_dimensions=self.copy_dimensions)
            copies.faults, copies.transitions = self.faults, self.transitions
        return copies

    async def apply_copies(self, component: str, target: CopyTarget | None) -> None:
        """Move a component's copies to ``target`` (None: stop them all and forget it)."""
        key = component.lower()
        if target is None:
            async with self._update_lock(key):  # a rolling update's batch (or end) first
                copies = self._components.pop(key, None)
                incoming = self._incoming.pop(key, None)
                await self._stopping.run(asyncio.gather(*(c.stop() for c in (copies, incoming)
                                                          if c is not None)))
                self._forget_copies(key)  # a component of that name again numbers from 1
            return
        state = self._lookup(self.name, component)
        if state is None or state.status == _DELETING:
            return  # a change queued before the delete: no copy may start after it
        if not isinstance(target, RollingTarget) and key not in self._incoming:
            await self._copies(component).apply(target)
            return
        async with self._update_lock(key):  # one batch (or the end) at a time, then a delete
            state = self._lookup(self.name, component)
            if state is None or state.status == _DELETING:
                return  # deleted while this waited: nothing may start now
            if isinstance(target, RollingTarget):
                await self._roll(component, target)
            elif key in self._incoming:
                await self._settle(component, target)
            else:  # the update ended while this waited
                await self._copies(component).apply(target)

    def _update_lock(self, key: str) -> asyncio.Lock:
        """Serializes a component's rolling-update batches, the update's end and its delete, so
        that no copy starts on a side already stopped."""
        return self._update_locks.setdefault(key, asyncio.Lock())

    async def _roll(self, component: str, target: RollingTarget) -> None:
        """One batch of a rolling update: the side that grows first (its new copies join
        routing once ready), then the side that shrinks (its copies leave routing, drain, stop),
        so a call always finds a ready copy."""
        new_target, old_target = target.sides()
        key = component.lower()
        old = self._copies(component)
        new = self._incoming.get(key)
        if new is None:
            assert self._build_copy is not None  # self._copies refused otherwise
            number = next(self._update_ids)
            new = self._incoming[key] = ComponentCopies(
                self.name, component, self.work_dir / f"{key}.update-{number}",
                self._build_copy, self._metric_sink, self._seed, self._check_artifact,
                clock=self._clock, copy_suffix=f"{self.copy_suffix}-green{number}",
                copy_dimensions=self.copy_dimensions)
            new.faults, new.transitions = self.faults, self.transitions
        steps = [(new, new_target), (old, old_target)]
        if target.copies < len(new.ready):  # a rollback batch: the old side grows first
            steps.reverse()
        for copies, goal in steps:
            await copies.apply(goal)

    async def _settle(self, component: str, target: CopyTarget) -> None:
        """The end of a rolling update: the side whose specification ``target`` names becomes
        the component's copies (to the target's count); the other drains and stops."""
        key = component.lower()
        old, new = self._copies(component), self._incoming[key]
        if new.target is not None and new.target.variant == target.variant:
            await new.apply(target)
            self._components[key] = new
            self._incoming.pop(key, None)
            await old.stop()
        else:
            await old.apply(target)
            self._incoming.pop(key, None)
            await new.stop()

    async def stop(self) -> None:
        """DeleteEndpoint or shutdown: every copy of every component drains and stops."""
        components = [*self._components.values(), *self._incoming.values()]
        self._components, self._incoming = {}, {}
        await asyncio.gather(*(c.stop() for c in components), return_exceptions=True)
        await self._stopping.drain()  # stops of deleted components their delete left running

    def component_groups(self) -> list[ComponentGroup]:
        """Each component with copies here, what the control plane says of it, and its copies
        (a rolling update's new ones second)."""
        return [self._group(key, copies) for key, copies in list(self._components.items())]

    def _group(self, key: str, copies: ComponentCopies) -> ComponentGroup:
        incoming = self._incoming.get(key)
        state = self._lookup(self.name, copies.name)
        variant = (state.variant if state else copies.target.variant.name
                   if copies.target is not None else "")
        return ComponentGroup(
            copies.name, variant, state.status if state else None,
            state.desired_copies if state else 0, state.copies if state else 0,
            state.placement if state else (), state.reservation if state else None,
            (copies, incoming) if incoming is not None else (copies,))

    def copy_dimensions(self, component: str, copy_id: str) -> dict[str, str] | None:
        """The dimensions of a copy's own series (``component_tally.container_dimensions``),
        None unless the endpoint's config has EnableEnhancedMetrics (or the component is gone)."""
        if not self.metrics_options.enhanced:
            return None
        key = component.lower()
        copies = self._components.get(key)
        if copies is None:
            return None
        group = self._group(key, copies)
        return container_dimensions(self.name, group.variant, group.name,
                                    self._instance_of(group, copy_id), label_of(copy_id))

    def _instance_of(self, group: ComponentGroup, copy_id: str) -> str:
        """The instance a copy is on in its series: where it was placed when first seen, so
        that a copy's series stays one as others come and go [U: on AWS a container never
        moves]; a copy seen before any slot was placed for it is on the component's last
        placed instance (``i-1`` with none) [U]."""
        found = self._copy_instances.get(copy_id)
        if found is None:
            placed = copy_instances(group)
            found = placed.get(copy_id) or next(reversed(placed.values()), "i-1")
            self._copy_instances[copy_id] = found
        return found

    def _forget_copies(self, key: str) -> None:
        self._copy_instances = {copy_id: instance for copy_id, instance
                                in self._copy_instances.items()
                                if copy_id.split("/", 1)[0].lower() != key}

    def sample_utilization(self, now: float) -> None:
        """One utilization sample of every ready copy (the registry's periodic tick)."""
        self._utilization.sample(self.component_groups(), now, self.tally, self.metrics_options,
                                 self.copy_dimensions)

    def describe(self) -> dict[str, object]:
        return {"Variants": {}, "InferenceComponents": {
            c.name: describe_component(c, self.tally.statistics(c.name))
            for c in self.component_groups()}}

    # --- the request path -------------------------------------------------------------------

    def serving_group(self, request: runtime.InvokeRequest) -> tuple[ServingGroup, str]:
        """The named component's copies (``Endpoint.invoke`` serves the call from them) and
        the variant the component is on."""
        copies, state = self.serving_copies(request)
        return copies, state.variant

    @property
    def invocation_timeout_s(self) -> float:
        return self._timeout_s

    @property
    def errors(self) -> ErrorContext:
        """What a ModelError of this endpoint names (a streamed call's container errors)."""
        return ErrorContext(self.name, self._region, self._account)

    def serving_copies(self, request: runtime.InvokeRequest
                       ) -> tuple[ComponentCopies, ComponentState]:
        """The copies that serve this call (a rolling update's new or old ones, by their ready
        copies) and the component's state; raises what SageMaker answers before a copy is
        reached. InvokeEndpoint and InvokeEndpointWithResponseStream route alike."""
        component = request.inference_component
        if component is None:
            raise runtime_errors.inference_component_required()
        state = self._lookup(self.name, component)
        if state is None:
            raise runtime_errors.inference_component_not_found(component, self.name)
        component = state.name or component
        copies = self._components.get(component.lower())
        incoming = self._incoming.get(component.lower())
        session_id = request.session_id
        if incoming is not None and session_id in incoming.sessions:
            copies = incoming  # a session opened on a rolling update's new copies stays there
        elif incoming is not None and incoming.ready and not (
                copies is not None and session_id in copies.sessions):
            # A rolling update: both sides serve, by their ready copies.
            old_ready = len(copies.ready) if copies is not None else 0
            if self._generation_draw.random() * (old_ready + len(incoming.ready)) >= old_ready:
                copies = incoming
        # No ready copy: Creating, Failed, scaled to zero, or copies still starting (a scale-out
        # from zero, a restart): the call fails at once, as AWS's do during a cold start.
        if copies is None or not copies.ready:
            self._count_no_capacity(component)
            if copies is not None and copies.failure is not None and state.copies > 0:
                raise runtime_errors.inference_component_copies_failed(component,
                                                                       copies.failure)
            raise runtime_errors.inference_component_no_capacity(component, state.status)
        return copies, state

    def _count_no_capacity(self, component: str) -> None:
        """NoCapacityInvocationFailures, with the call counted as a 4XX invocation [U]."""
        ComponentMetrics(self._metric_sink, component).record_now([
            ("Invocations", 1), ("Invocation4XXErrors", 1), ("Invocation5XXErrors", 0),
            ("NoCapacityInvocationFailures", 1)])
