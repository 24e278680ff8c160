"""The run of one guarded deployment (UpdateEndpoint with a DeploymentConfig), on the emulated
clock (``emulator/clock.py``, ``--clock-scale``).

1. green starts whole beside blue (``EndpointRegistry.start_green``) and takes no traffic;
2. each step moves its share of the calls to green, then bakes for WaitIntervalInSeconds while
   the AutoRollbackConfiguration alarms are watched: one in ALARM (already, or during the bake)
   rolls the deployment back (``RolledBack``);
3. after the last bake green becomes the endpoint and blue, out of the split, is drained and
   stopped after TerminationWaitInSeconds.

A rollback (done by the service) moves every new call back to blue at once, then drains and stops
green: calls already on green finish there. The progress is written to the endpoint's record at
every step, so a restart resumes the deployment at the step it was in (see ``service.restore``).

[U] choices, all here:
- Alarms are watched from the first traffic shift to the end of the last bake; not while green
  starts (no traffic yet), not during the termination wait (the deployment has succeeded).
- The endpoint stays ``Updating`` during the termination wait and is ``InService`` on the new
  config once blue is stopped.
- MaximumExecutionTimeoutInSeconds counts from UpdateEndpoint; past it the deployment rolls back.
- After a restart the step's bake starts again in full: both fleets were restarted with cold
  caches, so the bake's guarantee (alarms watched for WaitIntervalInSeconds on this traffic) is
  kept rather than shortened.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from emulator.clock import Clock
from emulator.hosting.deployment import Plan
from emulator.hosting.spec import EndpointSpec

log = logging.getLogger(__name__)

ALARM = "ALARM"

# Phases of a deployment, as stored in the endpoint's record.
STARTING = "starting"  # green is starting, no traffic on it
BAKING = "baking"  # a step's share is on green, its bake runs
TERMINATING = "terminating"  # green is the endpoint; blue waits TerminationWaitInSeconds
ROLLING_BACK = "rolling_back"


class AlarmStates(Protocol):
    """What a deployment needs of CloudWatch alarms (``emulator.cloudwatch.alarms.AlarmStore``)."""

    def exists(self, name: str) -> bool: ...

    def state(self, name: str) -> str | None: ...

    def subscribe(self, callback: Callable[[str, str, str], None]) -> Callable[[], None]: ...


def watch_alarms(alarms: AlarmStates | None, names: Iterable[str],
                 fired: asyncio.Queue[str]) -> Callable[[], None]:
    """Put each of ``names`` on ``fired`` as it goes into ALARM (the store may call from any
    thread); returns the unsubscribe. A deployment and a component's rolling update watch so."""
    watched = set(names)
    if alarms is None or not watched:
        return lambda: None
    loop = asyncio.get_running_loop()

    def changed(name: str, _old: str, new: str) -> None:
        if name in watched and new == ALARM:
            with contextlib.suppress(RuntimeError):  # the loop closed at shutdown
                loop.call_soon_threadsafe(fired.put_nowait, name)

    return alarms.subscribe(changed)


class Generations(Protocol):
    """What a deployment needs from the endpoint registry
    (``emulator.hosting.endpoint_registry``)."""

    deployments: dict[str, Any]

    async def start_green(self, spec: EndpointSpec) -> Any: ...

    async def resize_generation(self, name: str, green: bool, count: int) -> None: ...

    def shift(self, name: str, share: float) -> None: ...

    def traffic_share(self, name: str) -> float: ...

    def promote(self, name: str) -> Any: ...

    async def retire(self, endpoint: Any) -> None: ...

    def green(self, name: str) -> Any: ...


class RolledBack(Exception):
    """The update must roll back; the message is the FailureReason (the endpoint's, or the
    inference component's)."""


@dataclasses.dataclass
class GuardedProgress:
    """Where a guarded update is; JSON-safe, kept in its resource's record."""

    plan: dict[str, Any]
    started: float  # the emulated clock's timeline (``Clock.now``) when the update was asked

    def to_doc(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_doc(cls: type[S], doc: dict[str, Any]) -> S:
        return cls(**doc)


S = TypeVar("S", bound=GuardedProgress)


class GuardPlan(Protocol):
    """What a guarded update's plan says of its guards."""

    @property
    def max_execution_s(self) -> float | None: ...  # MaximumExecutionTimeoutInSeconds

    @property
    def alarms(self) -> tuple[str, ...]: ...  # AutoRollbackConfiguration's alarm names


P = TypeVar("P", bound=GuardPlan)


class GuardedRun(Generic[S, P]):
    """What a guarded update (an endpoint's deployment, an inference component's rolling
    update) runs under: the MaximumExecutionTimeoutInSeconds deadline, the
    AutoRollbackConfiguration alarms, the bakes either of them cuts short, and its progress
    ``stored`` after every change. A subclass words its rollbacks (``_timeout_reason``,
    ``_rolled_back_by``)."""

    def __init__(self, stored: S, plan: P, clock: Clock, alarms: AlarmStates | None,
                 save: Callable[[S], None]) -> None:
        self._stored = stored
        self.plan = plan
        self._clock = clock
        self._alarms = alarms
        self._save = save

    def _timeout_reason(self) -> str:
        raise NotImplementedError

    def _rolled_back_by(self, alarm: str) -> NoReturn:
        raise NotImplementedError

    async def _bake_until(self, bake_ends: float, fired: asyncio.Queue[str]) -> None:
        """The bake until ``bake_ends`` (real time), or what is left before the deadline if that
        is less; raises ``RolledBack`` for an alarm fired meanwhile or the deadline passed."""
        deadline = self._deadline()
        cut = deadline is not None and deadline < bake_ends
        try:
            alarm = await self._clock.wait_until(
                fired.get(), bake_ends if deadline is None else min(bake_ends, deadline))
        except TimeoutError:
            self._raise_if_alarming()
            if cut:
                raise RolledBack(self._timeout_reason()) from None
            return
        self._rolled_back_by(alarm)

    def _deadline(self) -> float | None:
        if self.plan.max_execution_s is None:
            return None
        return self._stored.started + self._clock.real_duration(self.plan.max_execution_s)

    def _raise_if_late(self) -> None:
        deadline = self._deadline()
        if deadline is not None and self._clock.now() >= deadline:
            raise RolledBack(self._timeout_reason())

    def _raise_if_alarming(self) -> None:
        if self._alarms is None:
            return
        for name in self.plan.alarms:
            if self._alarms.state(name) == ALARM:
                self._rolled_back_by(name)

    def _watch(self, fired: asyncio.Queue[str]) -> Callable[[], None]:
        return watch_alarms(self._alarms, self.plan.alarms, fired)

    def _record(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self._stored, key, value)
        self._save(self._stored)


@dataclasses.dataclass
class Progress(GuardedProgress):
    """Where a deployment is (``started``: at UpdateEndpoint), kept in the endpoint's record."""

    phase: str = STARTING
    step: int = 0  # index into plan.shares of the step running (or next to run)
    step_started: float = 0.0  # real epoch seconds, as DescribeEndpoint shows it
    resumed: int = 0  # restarts of the emulator this deployment went through
    alarm: str | None = None  # the alarm that rolled it back


class DeploymentRun(GuardedRun[Progress, Plan]):
    """One deployment of ``green`` onto the running endpoint ``name``."""

    def __init__(self, name: str, green: EndpointSpec, progress: Progress,
                 registry: Generations, clock: Clock, alarms: AlarmStates | None,
                 save: Callable[[Progress], None], promoted: Callable[[], None],
                 config_name: str = "", blue_count: int = 1) -> None:
        self.name = name
        self.config_name = config_name
        self.blue_count = blue_count  # a rolling update's old fleet, per variant
        self.green_spec = green
        self.progress = progress
        super().__init__(progress, Plan.from_doc(progress.plan), clock, alarms, save)
        self._registry = registry
        self._promoted = promoted
        self._bake_ends: float | None = None  # real time, for the page

    # -- the run -----------------------------------------------------------------------------

    async def run(self) -> None:
        """To the end: returns once blue is stopped; raises ``RolledBack`` for an alarm or the
        timeout, any other exception when green cannot start (nothing moved yet)."""
        self._registry.deployments[self.name] = self
        fired: asyncio.Queue[str] = asyncio.Queue()
        unsubscribe = self._watch(fired)
        try:
            if self.progress.phase in (STARTING, BAKING):
                self._record(phase=STARTING)
                first = self.progress.step
                await self._registry.start_green(self._green_at(first))
                for step in range(first, self.plan.steps):
                    if self.plan.rolling and step != first:  # the next batch starts
                        await self._registry.resize_generation(self.name, True,
                                                               self._count_at(step))
                    await self._bake(step, fired)
                self._record(phase=TERMINATING, step=self.plan.steps - 1)
                old = self._registry.promote(self.name)
                self._promoted()
            else:  # resumed during the termination wait: blue is gone already
                old = None
            if self.plan.termination_wait_s:
                self._bake_ends = self._clock.now() + self._clock.real_duration(
                    self.plan.termination_wait_s)
                await self._clock.sleep_until(self._bake_ends)
            if old is not None:
                await self._registry.retire(old)
        finally:
            unsubscribe()
            if self._registry.deployments.get(self.name) is self:
                del self._registry.deployments[self.name]

    def _count_at(self, step: int) -> int:
        """A rolling update's green instances (per variant) at ``step``."""
        full = self.green_spec.variants[0].instance_count
        return max(1, round(self.plan.shares[step] * full))

    def _green_at(self, step: int) -> EndpointSpec:
        if not self.plan.rolling:
            return self.green_spec  # blue/green: the new fleet starts whole
        count = self._count_at(step)
        return self.green_spec.with_capacities({v.name: (None, count)
                                                for v in self.green_spec.variants})

    async def _bake(self, step: int, fired: asyncio.Queue[str]) -> None:
        share = self.plan.shares[step]
        self._record(phase=BAKING, step=step, step_started=time.time())  # shown as is
        self._registry.shift(self.name, share)
        if self.plan.rolling and share < 1:  # as many old instances go as new ones came
            await self._registry.resize_generation(
                self.name, False, max(1, self.blue_count - self._count_at(step)))
        log.info("endpoint=%s deployment step %d/%d: %.0f%% of traffic on the new fleet, "
                 "baking %.0f s", self.name, step + 1, self.plan.steps, share * 100,
                 self.plan.bake_s)
        self._raise_if_alarming()
        self._bake_ends = bake_ends = self._clock.now() + self._clock.real_duration(
            self.plan.bake_s)
        await self._bake_until(bake_ends, fired)

    def _timeout_reason(self) -> str:  # [U] wording
        return (f"The deployment did not complete within MaximumExecutionTimeoutInSeconds "
                f"({self.plan.max_execution_s:.0f} s); traffic was rolled back to the previous "
                "endpoint configuration.")

    def _rolled_back_by(self, alarm: str) -> NoReturn:
        self._record(alarm=alarm)
        step = self.progress.step  # the step baking
        share = self.plan.shares[step]
        # [U] wording; SageMaker names the alarm and that it rolled the update back.
        raise RolledBack(
            f"Endpoint update was rolled back because CloudWatch alarm \"{alarm}\" went into "
            f"ALARM state during the baking period of step {step + 1} of {self.plan.steps} "
            f"({share:.0%} of traffic on the new fleet).")

    # -- what the live page shows ------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        now = self._clock.now()
        left = None
        if self._bake_ends is not None and self.progress.phase in (BAKING, TERMINATING):
            left = self._clock.emulated_duration(max(0.0, self._bake_ends - now))
        green = self._registry.green(self.name)
        return {
            "NewConfig": self.config_name,
            "Kind": self.plan.kind,
            "Routing": self.plan.routing,
            "Phase": self.progress.phase,
            "Step": self.progress.step + 1,
            "Steps": self.plan.steps,
            # Once promoted, the new fleet is the endpoint: all of the traffic is on it.
            "GreenShare": (1.0 if self.progress.phase == TERMINATING
                           else self._registry.traffic_share(self.name)),
            "BakeSeconds": self.plan.bake_s,
            "BakeSecondsLeft": left,
            "TerminationWaitSeconds": self.plan.termination_wait_s,
            "NewConfigInstances": _instances(green),
            # The new fleet as the page draws a fleet (``Endpoint.describe``), until promoted.
            "Green": green.describe() if green is not None else None,
            "Resumed": self.progress.resumed,
            "Alarms": {name: (self._alarms.state(name) if self._alarms else None)
                       for name in self.plan.alarms},
        }


def _instances(endpoint: Any) -> int:
    if endpoint is None:
        return 0
    return sum(len(v.serving()) for v in endpoint.variants)
