"""An alarm action to run, and the handlers that run them: what the alarm store hands to SNS,
to Application Auto Scaling and to deployments, apart from the store so that those handlers
need not import it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ActionCall:
    """One alarm action to run: the ARN, and the alarm as it is at that moment."""

    arn: str
    alarm_name: str
    alarm_arn: str
    state: str
    reason: str
    reason_data: str | None
    config: dict[str, Any]
    repeated: bool  # a repeat while the alarm stays in ALARM, not a state change
    value: float | None  # the most recent datapoint (step scaling's bounds are against it)
    transitioned: float  # when the alarm entered ``state``, real epoch seconds
    old_state: str


# Runs one round's calls of its kind together (so that Auto Scaling can take the largest of
# several policies' capacities); one result per call: None, or why it failed.
ActionHandler = Callable[[list[ActionCall]], Awaitable[list[str | None]]]
