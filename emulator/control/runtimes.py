"""What the control plane needs of the endpoint registry (``emulator.hosting.endpoint_registry``):
an endpoint's runtime started, replaced, resized and stopped, and guarded deployments'
generations (``emulator.control.deployments.Generations``)."""

from __future__ import annotations

from typing import Any, Protocol

from emulator.control.deployments import Generations
from emulator.hosting.component_copies import CopyTarget
from emulator.hosting.components import ComponentLookup
from emulator.hosting.spec import EndpointSpec, MetricsOptions


class EndpointRuntimes(Generations, Protocol):
    async def create(self, spec: EndpointSpec) -> Any: ...

    async def delete(self, name: str) -> Any: ...

    async def replace(self, spec: EndpointSpec) -> Any: ...

    async def resize(self, spec: EndpointSpec) -> Any: ...

    def get(self, name: str) -> Any: ...

    def names(self) -> list[str]: ...

    async def drop_green(self, name: str) -> None: ...

    async def create_for_components(self, name: str, lookup: ComponentLookup,
                                    metrics: MetricsOptions) -> Any: ...

    def configure_metrics(self, name: str, metrics: MetricsOptions) -> None: ...

    async def start_component_green(self, name: str, copies: dict[str, CopyTarget],
                                    metrics: MetricsOptions) -> Any: ...
