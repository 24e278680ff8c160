"""What AWS allows in CloudWatch's name fields, checked before anything is stored (the
PutMetricAlarm, PutCompositeAlarm and PutMetricData references):

- ``AlarmName``: UTF-8, no ASCII control character;
- ``Namespace``: ASCII, no control character (and not starting with ``:``: the model's pattern);
- ``MetricName``: no ASCII control character;
- a dimension's ``Name``: ASCII, at least one non-whitespace character, not starting with ``:``,
  no control character; its ``Value``: ASCII, at least one non-whitespace character, no control
  character.

A control character stored in a name would also make the query protocol's XML unreadable.
"""

from __future__ import annotations

import re
from typing import Any

from emulator.cloudwatch.cloudwatch_errors import invalid

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_name(value: str | None, parameter: str, ascii_only: bool = False) -> None:
    if value is None:
        return
    found = _CONTROL.search(value)
    if found is not None:
        raise invalid(f"The value for parameter {parameter} must not contain ASCII control "
                      f"characters; it has U+{ord(found.group()):04X} at position "
                      f"{found.start() + 1}.")
    if ascii_only and not value.isascii():
        raise invalid(f"The value for parameter {parameter} must contain only ASCII "
                      "characters.")


def check_dimensions(items: list[dict[str, str]] | None, where: str) -> None:
    for index, item in enumerate(items or [], start=1):
        for part in ("Name", "Value"):
            value, parameter = item.get(part), f"{where}.member.{index}.{part}"
            check_name(value, parameter, ascii_only=True)
            if value is not None and not value.strip():
                raise invalid(f"The value for parameter {parameter} must include at least one "
                              "non-whitespace character.")
        if str(item.get("Name", "")).startswith(":"):
            raise invalid(f"The value for parameter {where}.member.{index}.Name must not start "
                          "with a colon (:).")


def check_metric_names(config: dict[str, Any]) -> None:
    """A metric alarm's namespace, metric name and dimensions, its ``Metrics`` included."""
    check_name(config.get("Namespace"), "Namespace", ascii_only=True)
    check_name(config.get("MetricName"), "MetricName")
    check_dimensions(config.get("Dimensions"), "Dimensions")
    for index, query in enumerate(config.get("Metrics") or [], start=1):
        metric = (query.get("MetricStat") or {}).get("Metric") or {}
        where = f"Metrics.member.{index}.MetricStat.Metric"
        check_name(metric.get("Namespace"), f"{where}.Namespace", ascii_only=True)
        check_name(metric.get("MetricName"), f"{where}.MetricName")
        check_dimensions(metric.get("Dimensions"), f"{where}.Dimensions")
