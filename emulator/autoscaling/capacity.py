"""How Application Auto Scaling reaches a SageMaker variant: through SageMaker's own API.

As on AWS, the autoscaler reads ``DescribeEndpoint`` and writes
``UpdateEndpointWeightsAndCapacities``; the control plane does the rest (Updating -> InService,
instances started or drained).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class ControlPlane(Protocol):
    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class VariantCapacity:
    desired: int
    current: int
    status: str  # the endpoint's EndpointStatus


class CapacityError(Exception):
    """SageMaker refused (unknown endpoint, an update in progress ...): its message."""


class SageMakerVariants:
    def __init__(self, control: ControlPlane) -> None:
        self.control = control

    async def capacity(self, endpoint: str, variant: str) -> VariantCapacity | None:
        """None when the endpoint or the variant does not exist."""
        try:
            described = await self.control.handle("DescribeEndpoint", {"EndpointName": endpoint})
        except Exception as exc:  # noqa: BLE001 - ControlPlaneError: no such endpoint
            if getattr(exc, "status", 500) == 400:
                return None
            raise
        for item in described.get("ProductionVariants") or []:
            if item.get("VariantName") == variant:
                current = int(item.get("CurrentInstanceCount") or 0)
                desired = int(item.get("DesiredInstanceCount") or current)
                return VariantCapacity(desired, current, described.get("EndpointStatus", ""))
        return None

    async def set_desired(self, endpoint: str, variant: str, count: int) -> None:
        try:
            await self.control.handle("UpdateEndpointWeightsAndCapacities", {
                "EndpointName": endpoint,
                "DesiredWeightsAndCapacities": [
                    {"VariantName": variant, "DesiredInstanceCount": count}],
            })
        except Exception as exc:  # noqa: BLE001 - ControlPlaneError carries SageMaker's message
            raise CapacityError(getattr(exc, "message", str(exc))) from exc
