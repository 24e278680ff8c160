"""One CloudWatch alarm and one item of its history, as the alarm store keeps them; the states and
kinds; when an alarm is evaluated; the StateReason a composite alarm gets. Data only: the store
(``alarms.py``) changes them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from emulator.cloudwatch import evaluation

OK, ALARM, INSUFFICIENT_DATA = "OK", "ALARM", "INSUFFICIENT_DATA"
STATES = (OK, ALARM, INSUFFICIENT_DATA)
METRIC_ALARM, COMPOSITE_ALARM = "MetricAlarm", "CompositeAlarm"
INITIAL_REASON = "Unchecked: Initial alarm creation"


def evaluation_interval(config: dict[str, Any]) -> float:
    """Emulated seconds between two evaluations: every minute, every period when the period
    is shorter (high-resolution alarms), as CloudWatch evaluates."""
    return float(min(60, evaluation.period_of(config)))


@dataclass
class HistoryItem:
    alarm_name: str
    alarm_type: str
    timestamp: float  # real epoch seconds
    item_type: str  # ConfigurationUpdate | StateUpdate | Action
    summary: str
    data: str  # JSON text, as AWS writes HistoryData
    id: int = 0  # increasing: the order items were written in (NextToken pages by it)


@dataclass
class Alarm:
    """One alarm. ``config`` holds the Put*Alarm parameters as accepted (AlarmName excluded)."""

    name: str
    arn: str
    alarm_type: str
    config: dict[str, Any]
    state: str = INSUFFICIENT_DATA
    reason: str = INITIAL_REASON
    reason_data: str | None = None
    state_updated: float = 0.0  # real epoch seconds
    state_transitioned: float = 0.0
    config_updated: float = 0.0
    tags: dict[str, str] = field(default_factory=dict)
    # The last moment its repeating actions (Auto Scaling policies) ran, real epoch seconds.
    last_repeat: float = 0.0
    value: float | None = None  # the most recent datapoint of the last evaluation

    @property
    def actions_enabled(self) -> bool:
        return bool(self.config.get("ActionsEnabled", True))

    def actions_for(self, state: str) -> list[str]:
        member = {OK: "OKActions", ALARM: "AlarmActions",
                  INSUFFICIENT_DATA: "InsufficientDataActions"}[state]
        return list(self.config.get(member) or [])


def composite_reason(children: list[Alarm], state: str) -> tuple[str, str]:
    """A composite alarm's StateReason and StateReasonData, as CloudWatch writes them: the
    child that changed last, and every child's state."""
    if not children:
        return f"The alarm rule evaluates to {state == ALARM}.", json.dumps(
            {"triggeringAlarms": []})  # [U] wording
    latest = max(children, key=lambda a: a.state_transitioned)
    when = datetime.fromtimestamp(latest.state_transitioned, tz=timezone.utc).strftime(
        "%A %d %B, %Y %H:%M:%S UTC")
    reason = f"{latest.arn} transitioned to {latest.state} at {when}"
    data = {"triggeringAlarms": [{
        "arn": a.arn, "state": {"value": a.state, "timestamp": datetime.fromtimestamp(
            a.state_transitioned, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
            + "+0000"}} for a in children]}
    return reason, json.dumps(data, separators=(",", ":"))
