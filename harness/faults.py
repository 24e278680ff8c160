"""The emulator's fault rules from Python: make chosen calls fail or slow down, then stop.

``FaultRules(url)`` speaks ``/_emulator/faults`` (docs/faults.md has every field)::

    faults = FaultRules("http://127.0.0.1:8080")
    rule = faults.add({"error": "ThrottlingException"}, match={"target_model": "bert*"}, count=2)
    ...                      # the next two InvokeEndpoint calls of bert*.tar.gz are throttled
    faults.fired(rule)       # -> 2
    faults.remove(rule)

In a pytest suite, the plugin's ``mme_faults`` fixture is a ``FaultRules`` on the session's
emulator whose rules are removed after each test, pass or fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.emulator_routes import RouteRefused, call

PATH = "/_emulator/faults"


class FaultRuleRefused(RouteRefused):
    """The emulator refused a rule; the message is its word on what to fix."""


class FaultRules:
    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.added: list[str] = []  # the ids this object added, for ``remove_added``

    def add(self, fault: Mapping[str, Any], *, match: Mapping[str, Any] | None = None,
            probability: float = 1.0, count: int | None = None,
            expires_in_s: float | None = None, seed: int = 0) -> str:
        """Put a rule in force; returns its id. ``FaultRuleRefused`` says why one is not."""
        rule: dict[str, Any] = {"match": dict(match or {}), "fault": dict(fault),
                                "probability": probability, "seed": seed}
        if count is not None:
            rule["count"] = count
        if expires_in_s is not None:
            rule["expires_in_s"] = expires_in_s
        rule_id = str(self._call("POST", PATH, rule)["id"])
        self.added.append(rule_id)
        return rule_id

    def rules(self) -> list[dict[str, Any]]:
        """Every rule, as given, with its state and how often it matched and fired."""
        return list(self._call("GET", PATH)["faults"])

    def fired(self, rule_id: str) -> int:
        """How many calls the rule has broken so far."""
        return next(int(r["fired"]) for r in self.rules() if r["id"] == rule_id)

    def remove(self, rule_id: str) -> None:
        self._call("DELETE", f"{PATH}/{rule_id}")
        if rule_id in self.added:
            self.added.remove(rule_id)

    def remove_added(self) -> None:
        """Remove every rule this object added (a rule already removed is skipped)."""
        for rule_id in list(self.added):
            try:
                self.remove(rule_id)
            except FaultRuleRefused:
                self.added.remove(rule_id)

    def clear(self) -> int:
        """Remove every rule in force, whoever added it; returns how many there were."""
        self.added.clear()
        return int(self._call("DELETE", PATH)["deleted"])

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        return call(self.url, method, path, body, self.timeout_s, FaultRuleRefused)
