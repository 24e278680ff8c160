"""How Application Auto Scaling reaches SageMaker: through SageMaker's own API.

As on AWS, the autoscaler reads ``DescribeEndpoint`` and writes
``UpdateEndpointWeightsAndCapacities`` for a variant; for an inference component it reads
``DescribeInferenceComponent`` and writes ``UpdateInferenceComponentRuntimeConfig`` (the
component goes Updating -> InService). The control plane does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from emulator.autoscaling import rules


class ControlPlane(Protocol):
    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class VariantCapacity:
    desired: int
    current: int
    status: str  # the endpoint's EndpointStatus, or the component's InferenceComponentStatus
    # An inference component's change is fulfilled once it is InService, whether or not every
    # copy found room (pending copies wait for an instance: ManagedInstanceScaling's part) [U].
    component: bool = False

    @property
    def settled(self) -> bool:
        return self.status == "InService" and (self.component or self.current == self.desired)


class CapacityError(Exception):
    """SageMaker refused (unknown endpoint, an update in progress ...): its message."""


class SageMakerVariants:
    def __init__(self, control: ControlPlane) -> None:
        self.control = control

    async def capacity(self, endpoint: str, variant: str) -> VariantCapacity | None:
        """None when the endpoint or the variant does not exist."""
        try:
            described = await self.control.handle("DescribeEndpoint", {"EndpointName": endpoint})
        except Exception as exc:  # ControlPlaneError: no such endpoint
            if getattr(exc, "status", 500) == 400:
                return None
            raise
        for item in described.get("ProductionVariants") or []:
            if item.get("VariantName") == variant:
                current = int(item.get("CurrentInstanceCount") or 0)
                desired = int(item.get("DesiredInstanceCount") or current)
                return VariantCapacity(desired, current, described.get("EndpointStatus", ""))
        return None

    async def scales_to_zero(self, resource_id: str) -> bool:
        """A variant of an asynchronous endpoint (its config has an AsyncInferenceConfig): it
        may be registered with MinCapacity 0 (AWS's "Autoscale an asynchronous endpoint")."""
        if rules.COMPONENT_RESOURCE.fullmatch(resource_id) or \
                not rules.VARIANT_RESOURCE.fullmatch(resource_id):
            return False
        endpoint = resource_id.split("/", 3)[1]
        try:
            described = await self.control.handle("DescribeEndpoint", {"EndpointName": endpoint})
        except Exception:  # noqa: BLE001 - no such endpoint: its own error comes later
            return False
        return bool(described.get("AsyncInferenceConfig"))

    async def set_desired(self, endpoint: str, variant: str, count: int) -> None:
        try:
            await self.control.handle("UpdateEndpointWeightsAndCapacities", {
                "EndpointName": endpoint,
                "DesiredWeightsAndCapacities": [
                    {"VariantName": variant, "DesiredInstanceCount": count}],
            })
        except Exception as exc:  # ControlPlaneError carries SageMaker's message
            raise CapacityError(getattr(exc, "message", str(exc))) from exc

    async def of(self, resource_id: str) -> VariantCapacity | None:
        """The capacity of a scalable target's resource; None when it does not exist."""
        found = rules.COMPONENT_RESOURCE.fullmatch(resource_id)
        if found is not None:
            return await self.component_capacity(found.group(1))
        _, endpoint, _, variant = resource_id.split("/", 3)
        return await self.capacity(endpoint, variant)

    async def set_resource_desired(self, resource_id: str, count: int) -> None:
        found = rules.COMPONENT_RESOURCE.fullmatch(resource_id)
        if found is None:
            _, endpoint, _, variant = resource_id.split("/", 3)
            await self.set_desired(endpoint, variant, count)
            return
        try:
            await self.control.handle("UpdateInferenceComponentRuntimeConfig", {
                "InferenceComponentName": found.group(1),
                "DesiredRuntimeConfig": {"CopyCount": count}})
        except Exception as exc:  # ControlPlaneError carries SageMaker's message
            raise CapacityError(getattr(exc, "message", str(exc))) from exc

    async def component_capacity(self, name: str) -> VariantCapacity | None:
        """None when the inference component does not exist."""
        try:
            described = await self.control.handle("DescribeInferenceComponent",
                                                  {"InferenceComponentName": name})
        except Exception as exc:  # ControlPlaneError: no such component
            if getattr(exc, "status", 500) == 400:
                return None
            raise
        runtime = described.get("RuntimeConfig") or {}
        return VariantCapacity(int(runtime.get("DesiredCopyCount") or 0),
                               int(runtime.get("CurrentCopyCount") or 0),
                               described.get("InferenceComponentStatus", ""), component=True)
