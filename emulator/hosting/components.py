"""An endpoint for inference components, as the runtime sees it (issue #30 items 3 and 4).

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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from emulator.contract import runtime, runtime_errors
from emulator.hosting.component_copies import ComponentCopies, CopyBuilder, CopyTarget
from emulator.hosting.component_copies import record as record_metrics
from emulator.hosting.deployment import SplitEndpoint
from emulator.hosting.endpoint import HostedInstance, InvokeResult
from emulator.hosting.routing import Router
from emulator.hosting.spec import ContainerSpec, EndpointSpec, VariantSpec
from emulator.metrics import EndpointMetrics, MetricSink


@dataclass(frozen=True)
class ComponentState:
    """What a call needs to know of a component: its status, how many copies it has placed,
    the variant it is on (its answers name it) and its name as created (metrics carry it)."""

    status: str
    copies: int
    variant: str = "AllTraffic"
    name: str = ""


# The status of a component being deleted (its copies are stopping; none may start).
_DELETING = "Deleting"

# (endpoint name, component name) -> the component's state, or None if the endpoint has none
# of that name.
ComponentLookup = Callable[[str, str], "ComponentState | None"]


async def _no_instances(endpoint: EndpointSpec, variant: VariantSpec, instance_id: str,
                        work_dir: Path, metrics: EndpointMetrics) -> NoReturn:
    raise AssertionError("an endpoint for inference components has no variant of models")


class ComponentEndpoint(SplitEndpoint):
    """No variant of models; every call is for one of its components."""

    def __init__(self, name: str, work_dir: Path, router: Router,
                 region_account: tuple[str, str], invocation_timeout_s: float,
                 lookup: ComponentLookup, build_copy: CopyBuilder | None = None,
                 sink: MetricSink | None = None, seed: int | None = None,
                 check_artifact: Callable[[ContainerSpec], None] | None = None) -> None:
        super().__init__(EndpointSpec(name, ()), work_dir, _no_instances, router,
                         region_account, invocation_timeout_s)
        self._lookup = lookup
        self._build_copy = build_copy
        self._metric_sink = sink
        self._seed = seed
        self._check_artifact = check_artifact
        self._components: dict[str, ComponentCopies] = {}  # by lowercased component name

    @property
    def is_multi_model(self) -> bool:
        return False

    @property
    def instances(self) -> list[HostedInstance]:
        return [c for copies in self._components.values() for c in copies.ready]

    # --- copies -----------------------------------------------------------------------------

    def _copies(self, component: str) -> ComponentCopies:
        key = component.lower()
        copies = self._components.get(key)
        if copies is None:
            if self._build_copy is None:
                raise RuntimeError("this endpoint was built without a copy builder")
            copies = self._components[key] = ComponentCopies(
                self.name, component, self.work_dir / key, self._build_copy, self._metric_sink,
                self._seed)
        return copies

    async def apply_copies(self, component: str, target: CopyTarget | None) -> None:
        """Move a component's copies to ``target`` (None: stop them all and forget it)."""
        if target is None:
            copies = self._components.pop(component.lower(), None)
            if copies is not None:
                await copies.stop()
            return
        state = self._lookup(self.name, component)
        if state is None or state.status == _DELETING:
            return  # a change queued before the delete: no copy may start after it
        await self._copies(component).apply(target)

    async def stop(self) -> None:
        """DeleteEndpoint or shutdown: every copy of every component drains and stops."""
        components, self._components = list(self._components.values()), {}
        await asyncio.gather(*(c.stop() for c in components), return_exceptions=True)

    def describe(self) -> dict[str, object]:
        return {"Variants": {}, "InferenceComponents": {c.name: dict(c.describe())
                                        for c in self._components.values()}}

    # --- the request path -------------------------------------------------------------------

    async def invoke(self, request: runtime.InvokeRequest) -> InvokeResult:
        started = time.monotonic()
        component = request.inference_component
        if component is None:
            raise runtime_errors.inference_component_required()
        state = self._lookup(self.name, component)
        if state is None:
            raise runtime_errors.inference_component_not_found(component, self.name)
        component = state.name or component
        copies = self._components.get(component.lower())
        # No ready copy: Creating, Failed, scaled to zero, or copies still starting (a scale-out
        # from zero, a restart): the call fails at once, as AWS's do during a cold start.
        if copies is None or not copies.ready:
            self._count_no_capacity(component)
            if copies is not None and copies.failure is not None and state.copies > 0:
                raise runtime_errors.inference_component_copies_failed(component,
                                                                       copies.failure)
            raise runtime_errors.inference_component_no_capacity(component, state.status)
        body, headers = await copies.invoke(request, started, self._timeout_s, state.variant)
        return InvokeResult(body, headers)

    def _count_no_capacity(self, component: str) -> None:
        """NoCapacityInvocationFailures, with the call counted as a 4XX invocation [U]."""
        record_metrics(self._metric_sink, component, [
            ("Invocations", 1), ("Invocation4XXErrors", 1), ("Invocation5XXErrors", 0),
            ("NoCapacityInvocationFailures", 1)])
