"""An endpoint for inference components, as the runtime sees it (issue #30 item 4, its errors).

Such an endpoint hosts no model of its own: each call names an inference component
(``X-Amzn-SageMaker-Inference-Component``). This object answers what SageMaker's front end
answers before any copy is reached: the header missing, a component the endpoint does not have,
one with no copy. Copies are not serving processes yet (docs/inference-components.md), so a
call that would reach one is answered ServiceUnavailable saying so, never a made-up result.

The component's state comes from the control plane (``emulator.control.inference_components``)
through ``ComponentLookup``: this module knows nothing above the hosting layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from emulator.contract import runtime, runtime_errors
from emulator.hosting.deployment import SplitEndpoint
from emulator.hosting.endpoint import HostedInstance, InvokeResult
from emulator.hosting.routing import Router
from emulator.hosting.spec import EndpointSpec, VariantSpec
from emulator.metrics import EndpointMetrics


@dataclass(frozen=True)
class ComponentState:
    """What a call needs to know of a component: its status and how many copies it has."""

    status: str
    copies: int


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
                 lookup: ComponentLookup) -> None:
        super().__init__(EndpointSpec(name, ()), work_dir, _no_instances, router,
                         region_account, invocation_timeout_s)
        self._lookup = lookup

    @property
    def is_multi_model(self) -> bool:
        return False

    @property
    def instances(self) -> list[HostedInstance]:
        return []

    async def invoke(self, request: runtime.InvokeRequest) -> InvokeResult:
        component = request.inference_component
        if component is None:
            raise runtime_errors.inference_component_required()
        state = self._lookup(self.name, component)
        if state is None:
            raise runtime_errors.inference_component_not_found(component, self.name)
        if state.copies == 0:  # Creating, Failed, or scaled to zero
            raise runtime_errors.inference_component_no_capacity(component, state.status)
        raise runtime_errors.inference_component_copies_not_served()
