"""An alarm's rule or metric math, parsed once (at Put, or when a stored alarm is loaded) and
kept beside the alarm: evaluation reads these programs, never the text again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from emulator.cloudwatch import alarm_rule, metric_math

COMPOSITE_ALARM = "CompositeAlarm"


class CompileError(ValueError):
    """A rule or expression that does not parse: the message says which and why."""


@dataclass(frozen=True)
class Compiled:
    rule: alarm_rule.Rule | None = None  # a composite alarm's
    expressions: Mapping[str, metric_math.Program] = field(default_factory=dict)  # query id ->


def compile_alarm(alarm_type: str, config: Mapping[str, Any]) -> Compiled:
    try:
        if alarm_type == COMPOSITE_ALARM:
            return Compiled(rule=alarm_rule.parse(str(config["AlarmRule"])))
        return Compiled(expressions={
            str(q["Id"]): metric_math.parse(str(q["Expression"]))
            for q in config.get("Metrics") or [] if q.get("Expression")})
    except (alarm_rule.RuleError, metric_math.MathError) as exc:
        raise CompileError(str(exc)) from exc
