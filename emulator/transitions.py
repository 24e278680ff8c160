"""Transition rules: how long a resource's Creating, Updating or Deleting takes, and how it ends.

A test puts a rule (``PUT /_emulator/transitions``, docs/faults.md) for a kind of resource
(``endpoint``, ``inference-component``, or ``copy``: the start of each copy of the components a
name matches, its ``Creating``), a name (a glob, case-insensitive) and a transitional status;
from then on each such transition that starts is held by the rule before its work runs:

- ``duration_s``: it waits that many emulated seconds first (``emulator/clock.py``: an advance of
  the clock passes them), then the work runs as always (a Create starts its instances);
- ``never``: it stays in that status until the resource is deleted (or the emulator stops);
- ``outcome: Failed``: after ``duration_s`` (0 if not given) it ends ``Failed`` with ``reason``
  as its FailureReason, and the work is not done (a Create starts nothing).

The rule in force is the one put last that matches; putting a rule for the same resource, name
and status replaces it. A transition already held keeps the rule it started with.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.clock import Clock

# "copy": the start of each copy of the inference components the name matches (its Creating).
RESOURCES = ("endpoint", "inference-component", "copy")
COPY = "copy"
STATUSES = ("Creating", "Updating", "Deleting")
FAILED = "Failed"
DEFAULT_REASON = "The transition was set to fail (PUT /_emulator/transitions)."
_KEYS = {"resource", "name", "status", "duration_s", "outcome", "reason", "never"}


class CopyStartFailed(Exception):
    """A copy's start ended Failed by a transition rule (the message is its reason)."""


class TransitionError(ValueError):
    """A rule that could never apply (the message says what to fix)."""


@dataclass(frozen=True)
class TransitionRule:
    resource: str
    name: str  # a glob over the resource's name, case-insensitive
    status: str
    duration_s: float = 0.0  # emulated seconds
    outcome: str | None = None  # FAILED, or None: the work decides
    reason: str | None = None  # the FailureReason with outcome Failed
    never: bool = False

    def matches(self, resource: str, name: str, status: str) -> bool:
        return (resource == self.resource and status == self.status
                and fnmatch.fnmatchcase(name.lower(), self.name.lower()))

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"resource": self.resource, "name": self.name,
                               "status": self.status}
        if self.never:
            doc["never"] = True
        else:
            doc["duration_s"] = self.duration_s
        if self.outcome is not None:
            doc["outcome"], doc["reason"] = self.outcome, self.reason
        return doc


def parse_transition(data: object) -> TransitionRule:
    """A rule from its JSON form; ``TransitionError`` for one that could never apply."""
    if not isinstance(data, dict):
        raise TransitionError('Send a JSON object: {"resource": "endpoint", "name": "my-*", '
                              '"status": "Creating", "duration_s": 30}.')
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise TransitionError(f"Unknown field(s) {', '.join(unknown)}; a rule has "
                              f"{', '.join(sorted(_KEYS))}.")
    resource = _choice(data, "resource", RESOURCES)
    status = _choice(data, "status", ("Creating",) if resource == COPY else STATUSES)
    name = data.get("name", "*")
    if not isinstance(name, str) or not name:
        raise TransitionError('"name" is the resource\'s name or a glob ("*" for every one).')
    if not {"duration_s", "outcome", "never"} & set(data):
        raise TransitionError('Say how the transition goes: "duration_s" (emulated seconds), '
                              '"outcome": "Failed" (with "reason") or "never": true.')
    never = data.get("never", False)
    if not isinstance(never, bool):
        raise TransitionError('"never" is true or false.')
    outcome = data.get("outcome")
    if outcome is not None and outcome != FAILED:
        raise TransitionError(f'"outcome" can only be "{FAILED}" (without it the transition '
                              "ends as its work decides).")
    if never and (outcome is not None or "duration_s" in data):
        raise TransitionError('A transition that "never" ends has no "outcome" nor '
                              '"duration_s"; send one or the other.')
    reason = data.get("reason")
    if reason is not None and (outcome is None or not isinstance(reason, str)):
        raise TransitionError('"reason" is the FailureReason (a string) of "outcome": "Failed".')
    return TransitionRule(resource, name, status, _duration(data.get("duration_s", 0.0)),
                          outcome, (reason or DEFAULT_REASON)[:1024] if outcome else None,
                          never)


def _choice(data: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = data.get(key)
    if value not in allowed:
        raise TransitionError(f'"{key}" must be one of {", ".join(allowed)}; got {value!r}.')
    return str(value)


def _duration(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise TransitionError(f'"duration_s" is a number of emulated seconds >= 0; got '
                              f"{value!r}.")
    return float(value)


class TransitionTable:
    """The rules in force, and the holding of a transition by its rule."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self._rules: list[TransitionRule] = []

    def put(self, rule: TransitionRule) -> dict[str, Any]:
        """Add ``rule``, replacing one for the same resource, name and status."""
        self._rules = [r for r in self._rules if (r.resource, r.name.lower(), r.status)
                       != (rule.resource, rule.name.lower(), rule.status)]
        self._rules.append(rule)
        return rule.to_doc()

    def describe(self) -> list[dict[str, Any]]:
        return [r.to_doc() for r in self._rules]

    def clear(self) -> int:
        count, self._rules = len(self._rules), []
        return count

    def match(self, resource: str, name: str, status: str) -> TransitionRule | None:
        """The rule put last that matches, if any."""
        for rule in reversed(self._rules):
            if rule.matches(resource, name, status):
                return rule
        return None

    async def copy_started(self, component: str) -> None:
        """A copy of ``component`` starts: held as a ``copy`` rule says; its outcome Failed
        is raised (``CopyStartFailed``) for the start to fail with."""
        rule = self.match(COPY, component, "Creating")
        if rule is None:
            return
        await self.hold(rule)
        if rule.outcome == FAILED:
            raise CopyStartFailed(rule.reason or DEFAULT_REASON)

    async def hold(self, rule: TransitionRule) -> None:
        """Wait as the rule says: its duration on the emulated clock, or for ever."""
        if rule.never:
            await asyncio.get_running_loop().create_future()  # until cancelled
        elif rule.duration_s:
            await self.clock.sleep(rule.duration_s)


def held(table: TransitionTable, rule: TransitionRule, work: Awaitable[None],
         fail: Callable[[str], None], holding: set[str], key: str) -> Awaitable[None]:
    """``work`` behind ``rule``: ``key`` is in ``holding`` while the rule holds it; with the
    outcome Failed, ``fail(reason)`` instead of the work."""

    async def run() -> None:
        holding.add(key)
        try:
            await table.hold(rule)
        except BaseException:
            _close(work)
            raise
        finally:
            holding.discard(key)
        if rule.outcome == FAILED:
            _close(work)
            fail(rule.reason or DEFAULT_REASON)
            return
        await work

    return run()


def _close(work: Awaitable[None]) -> None:
    """A coroutine that will never run is closed (no "never awaited" warning)."""
    close = getattr(work, "close", None)
    if callable(close):
        close()


def read_rules_file(path: Path) -> list[TransitionRule]:
    """``--transitions FILE``: a JSON list of rules, each as ``PUT /_emulator/transitions``
    takes it; ``TransitionError`` names the entry that could never apply."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TransitionError(f"--transitions {path}: not a JSON file ({exc})") from None
    if not isinstance(data, list):
        raise TransitionError(f"--transitions {path}: a JSON list of rules, e.g. "
                              '[{"resource": "endpoint", "name": "*", "status": "Creating", '
                              '"duration_s": 30}]')
    rules = []
    for index, entry in enumerate(data):
        try:
            rules.append(parse_transition(entry))
        except TransitionError as exc:
            raise TransitionError(f"--transitions {path}: rule [{index}]: {exc}") from None
    return rules
