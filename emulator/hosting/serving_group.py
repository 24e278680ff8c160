"""What serves one call on an endpoint: a production variant's instances, or one inference
component's copies.

``Endpoint.invoke`` asks its endpoint for the call's group and, from there on, knows no
difference between the two: the group counts the call in (its ``CallRecord``, with the group's
per-unit metric and dimensions), picks the unit that serves it by its own strategy (the
variant's router; the copies' LEAST_OUTSTANDING_REQUESTS or RANDOM) or raises what SageMaker
answers when none can, and counts the call out.
"""

from __future__ import annotations

from typing import Protocol

from emulator.contract import runtime
from emulator.hosting.call_record import CallRecord
from emulator.hosting.instance import Instance
from emulator.hosting.multi_container import MultiContainerInstance
from emulator.hosting.sessions import SessionTable

# One serving unit: an instance of a variant, or a copy of a component (built alike: a Triton
# behind the model manager, or containers).
ServingUnit = Instance | MultiContainerInstance

# [U] How long a removed unit (an instance scaled in, a copy) may take to finish the requests it
# has in flight.
DRAIN_TIMEOUT_S = 120.0


class ServingGroup(Protocol):
    @property
    def reports_cache_hit(self) -> bool:
        """Whether an answer says if its model was already loaded (X-Mme-Model-Cache-Hit)."""

    def arrive(self, started: float) -> CallRecord:
        """Count a call in: its arrival samples, under the group's metrics."""

    @property
    def sessions(self) -> SessionTable:
        """The group's open stateful sessions (``hosting.sessions``)."""

    def route(self, request: runtime.InvokeRequest
              ) -> tuple[ServingUnit, str | None, str | None]:
        """The unit that serves the call, the model it is asked for (TargetModel) and how the
        unit was chosen when not by the group's default strategy (``hosting.affinity``: a
        session, PREFIX_AWARE); raises the SageMakerError that SageMaker answers when the call
        cannot be served."""

    def leave(self) -> None:
        """Count the call out (answered, failed or cut short)."""
