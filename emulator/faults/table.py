"""The rules in force, and the one question every call asks them: does a fault fire for me?

``FaultTable.draw`` is asked by each place that answers calls (``Endpoint.invoke`` for
InvokeEndpoint, once its serving unit is chosen; the control plane's, Application Auto Scaling's
and CloudWatch's handlers; the runtime's response streams). With no rule in force it costs one
attribute read (``armed``). Rules are tried in the order they were added; the first one that
matches and fires answers. Each rule draws from its own generator, seeded by the rule, so the
same calls in the same order fire the same way in every run.

Everything runs on the event loop; the lock only keeps a request's draw whole against an API
call that changes the rules from a thread (the tests' clients).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emulator.faults.rules import (
    INVOKE,
    RUNTIME,
    CallFacts,
    CapacityFault,
    DownloadFault,
    ErrorAnswer,
    Fault,
    FaultRule,
    Latency,
    LoadFault,
    ModelErrorAnswer,
    stage_of,
)

log = logging.getLogger(__name__)


@dataclass
class _Active:
    id: str
    rule: FaultRule
    rng: random.Random
    created: float  # time.monotonic()
    expires_at: float | None
    fired: int = 0
    matched: int = 0  # calls it matched, fired or not

    def state(self, now: float) -> str:
        if self.rule.count is not None and self.fired >= self.rule.count:
            return "spent"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


@dataclass(frozen=True, slots=True)
class Fired:
    """One injected fault: the rule's id, what it does, and (for a latency) how long."""

    rule_id: str
    fault: Fault
    delay_s: float = 0.0
    call: CallFacts | None = field(default=None, compare=False)

    def describe(self) -> str:
        fault = self.fault
        if isinstance(fault, ErrorAnswer):
            return f"{fault.code} ({fault.status})"
        if isinstance(fault, ModelErrorAnswer):
            return f"ModelError (the container answered {fault.status})"
        if isinstance(fault, Latency):
            part = "the model's part" if fault.on_model else "the call"
            return f"{self.delay_s * 1e3:.0f} ms more on {part}"
        if isinstance(fault, LoadFault):
            if fault.fail is not None:
                return f"a failed load ({fault.fail})"
            if fault.delay_s:
                return f"a load {fault.delay_s:g} s longer"
            return "a load out of memory" if fault.out_of_memory else "a full disk at the load"
        if isinstance(fault, DownloadFault):
            return (f"a download {'stalled' if fault.stall else 'broken'} after "
                    f"{fault.after_bytes} bytes")
        if isinstance(fault, CapacityFault):
            return "no capacity for the instances added" if fault.insufficient else \
                f"instances added {fault.slow_start_s:g} s later"
        return "the instance's Triton killed" if fault.kill else \
            f"the instance's Triton stopped for {fault.hang_s:g} s"


# Told of every injected fault (the live page's history, through the composition root).
FaultListener = Callable[[Fired], None]


class FaultTable:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._rules: dict[str, _Active] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.listeners: list[FaultListener] = []
        self.armed = False  # a rule in force: the fast path reads only this

    def add(self, rule: FaultRule) -> str:
        now = self._monotonic()
        with self._lock:
            rule_id = f"fault-{next(self._ids)}"
            expires = None if rule.expires_in_s is None else now + rule.expires_in_s
            self._rules[rule_id] = _Active(rule_id, rule, random.Random(rule.seed), now,
                                           expires)
            self.armed = True
        log.info("fault=%s added match=%s", rule_id, rule.match.as_dict())
        return rule_id

    def remove(self, rule_id: str) -> bool:
        with self._lock:
            removed = self._rules.pop(rule_id, None) is not None
            self._rearm(self._monotonic())
        return removed

    def clear(self) -> int:
        with self._lock:
            count = len(self._rules)
            self._rules.clear()
            self.armed = False
        return count

    def describe(self) -> list[dict[str, Any]]:
        """Every rule added and not removed, as given, with how often it matched and fired and
        whether it is still in force (``active``; else ``spent`` or ``expired``)."""
        now = self._monotonic()
        with self._lock:
            return [{"id": a.id, **(a.rule.source or {}), "state": a.state(now),
                     "matched": a.matched, "fired": a.fired,
                     "remaining": None if a.rule.count is None else a.rule.count - a.fired,
                     "expires_in_s": None if a.expires_at is None
                     else round(max(a.expires_at - now, 0.0), 3)}
                    for a in self._rules.values()]

    def _rearm(self, now: float) -> None:
        # Spent and expired rules stay listed; once none is in force the fast path skips them.
        self.armed = any(a.state(now) == "active" for a in self._rules.values())

    def in_force(self, rule_id: str) -> bool:
        """Whether the rule is still active (a stalled download waits on this)."""
        with self._lock:
            active = self._rules.get(rule_id)
            return active is not None and active.state(self._monotonic()) == "active"

    def draw(self, call: CallFacts, stage: str = "call") -> Fired | None:
        """The fault that fires for this call at ``stage`` (``call``: its answer and its
        instance; ``load`` and ``download``: the model's load and download it needs), if any
        (counted, logged, told)."""
        with self._lock:
            fired = self._draw(call, stage, self._monotonic())
        if fired is not None:
            log.info("fault=%s injected %s service=%s operation=%s endpoint=%s target=%s",
                     fired.rule_id, fired.describe(), call.service, call.operation,
                     call.endpoint, call.target_model)
            for listener in self.listeners:
                listener(fired)
        return fired

    def _draw(self, call: CallFacts, stage: str, now: float) -> Fired | None:
        fired: Fired | None = None
        for active in self._rules.values():
            rule = active.rule
            if active.state(now) != "active" or stage_of(rule.fault) != stage \
                    or not rule.match.covers(call):
                continue
            active.matched += 1
            if rule.probability < 1 and active.rng.random() >= rule.probability:
                continue
            active.fired += 1
            delay = rule.fault.draw(active.rng) if isinstance(rule.fault, Latency) else 0.0
            fired = Fired(active.id, rule.fault, delay, call)
            break
        self._rearm(now)
        return fired


class UnitFaults:
    """The rules as one serving unit's model manager asks them, for the loads and downloads a
    call of ``target`` needs on that unit (an instance of a variant, or a copy)."""

    def __init__(self, table: FaultTable, endpoint: str, variant: str, unit: str) -> None:
        self.table = table
        self._names = (endpoint, variant, unit)

    def draw(self, target: str | None, stage: str) -> Fired | None:
        if not self.table.armed:
            return None
        endpoint, variant, unit = self._names
        return self.table.draw(CallFacts(RUNTIME, INVOKE, endpoint, variant, unit, target or None),
                               stage)


async def error_unless_clear(faults: FaultTable | None, call: CallFacts) -> ErrorAnswer | None:
    """For a call answered outside ``Endpoint.invoke`` (every API but InvokeEndpoint): a
    latency that fires is waited out here; an error that fires is returned, for the caller to
    answer in its API's own shape. None: answer the call as usual."""
    if faults is None or not faults.armed:
        return None
    fired = faults.draw(call)
    if fired is None:
        return None
    if isinstance(fired.fault, Latency):
        await asyncio.sleep(fired.delay_s)
        return None
    # A container's error and the model's latency match InvokeEndpoint only (rules.py).
    return fired.fault if isinstance(fired.fault, ErrorAnswer) else None
