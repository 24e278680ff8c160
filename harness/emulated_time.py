"""The emulator's clock and transition rules from Python (docs/faults.md, "Time and
transitions"): advance the emulated clock, and say how an endpoint's, a component's or a copy's
Creating, Updating or Deleting goes::

    time = EmulatedTime("http://127.0.0.1:8080")
    time.transition("endpoint", "slow-*", "Creating", duration_s=300)
    ...                       # CreateEndpoint("slow-1"): Creating until 300 emulated seconds pass
    time.advance(300)         # they pass now (alarms evaluate, bakes and cooldowns end)
    time.clear_transitions()

In a pytest suite, the plugin's ``mme_time`` fixture is one on the session's emulator whose
transition rules are removed after each test, pass or fail.
"""

from __future__ import annotations

from typing import Any

from harness.emulator_routes import RouteRefused, call

ADVANCE = "/_emulator/clock/advance"
TRANSITIONS = "/_emulator/transitions"


class EmulatedTime:
    def __init__(self, url: str, timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s  # an advance of days wakes many timers

    def advance(self, seconds: float) -> dict[str, Any]:
        """Move the emulated clock ``seconds`` on; answered once what fell due has run."""
        return call(self.url, "POST", ADVANCE, {"seconds": seconds}, self.timeout_s)

    def transition(self, resource: str, name: str, status: str, *,
                   duration_s: float | None = None, failed: str | None = None,
                   never: bool = False) -> dict[str, Any]:
        """A rule: ``resource`` (endpoint, inference-component, copy) named ``name`` (a glob)
        in ``status`` takes ``duration_s`` emulated seconds, ends Failed with the reason
        ``failed``, or ``never`` ends. ``RouteRefused`` says why one could never apply."""
        rule: dict[str, Any] = {"resource": resource, "name": name, "status": status}
        if never:
            rule["never"] = True
        if duration_s is not None:
            rule["duration_s"] = duration_s
        if failed is not None:
            rule.update(outcome="Failed", reason=failed)
        if len(rule) == 3:
            rule["duration_s"] = 0
        return call(self.url, "PUT", TRANSITIONS, rule, self.timeout_s)

    def transitions(self) -> list[dict[str, Any]]:
        return list(call(self.url, "GET", TRANSITIONS, None, self.timeout_s)["transitions"])

    def clear_transitions(self) -> int:
        return int(call(self.url, "DELETE", TRANSITIONS, None, self.timeout_s)["deleted"])


__all__ = ["EmulatedTime", "RouteRefused"]
