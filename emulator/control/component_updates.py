"""Rolling updates of an inference component: UpdateInferenceComponent with a
new Specification and a ``DeploymentConfig`` {RollingUpdatePolicy, AutoRollbackConfiguration}.

What SageMaker documents (botocore's ``InferenceComponentRollingUpdatePolicy``) and this module
follows: the copies are replaced in batches of MaximumBatchSize (COPY_COUNT, or CAPACITY_PERCENT
of the copy count; 5% to 50% of the copy count): each batch of new copies is provisioned and
takes traffic, as many old copies are terminated, then the batch bakes for
WaitIntervalInSeconds while the AutoRollbackConfiguration alarms are watched. An alarm in ALARM
rolls the update back to the old copies in batches of RollbackMaximumBatchSize (default: all of
them at once). MaximumExecutionTimeoutInSeconds bounds the whole update.

Everything waits on the emulated clock (``emulator/clock.py``, ``--clock-scale``), and the
progress (``Rollout``) is stored in the component's record after every batch, so a restart
resumes the update at the batch it was in.

[U] choices, all here:
- New copies of a batch join routing only once ready, and an old copy leaves routing before it
  drains and stops (``hosting.components``): a call is never sent to a copy that cannot answer,
  so the update itself fails no call. While both run, calls are spread over the old and the new
  copies in proportion to their ready copies.
- A batch of one copy is accepted whatever the copy count (it is the smallest batch there is;
  the 50% bound would otherwise refuse every rolling update of a one- or two-copy component);
  otherwise the documented 5% to 50% of the copy count holds. A CAPACITY_PERCENT size is
  rounded up to whole copies.
- RollbackMaximumBatchSize takes the same types; it is not bounded (any size up to all copies).
- No bake between rollback batches (the documentation speaks of baking only for the new fleet).
- The copies rolled are the placed ones when the update starts; new copies of a batch take no
  room in placement (bookkeeping) while the old copies they replace still run.
- Alarms are watched from the first batch to the end of the last bake; one already in ALARM
  when a batch is due rolls the update back before the batch.
- MaximumExecutionTimeoutInSeconds counts from UpdateInferenceComponent; past it the update
  rolls back.
- After a restart the batch in progress starts again from the last one stored (both fleets
  start again), and its bake starts again in full.
- A copy of the new specification that fails to start rolls the update back, its error as the
  FailureReason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from emulator.clock import Clock
from emulator.control.deployments import AlarmStates, GuardedProgress, GuardedRun, RolledBack
from emulator.hosting.deployment import alarm_names

log = logging.getLogger(__name__)

COPY_COUNT = "COPY_COUNT"
CAPACITY_PERCENT = "CAPACITY_PERCENT"
ROLLING = "RollingUpdatePolicy"

# (old copies, new copies) the component should have now: the runtime starts what grows first,
# then drains and stops what shrinks.
RollCopies = Callable[[int, int], Awaitable[None]]


class PlanError(ValueError):
    """A DeploymentConfig SageMaker refuses (the message says what to fix)."""


@dataclasses.dataclass(frozen=True)
class RolloutPlan:
    batch: int  # new copies per batch
    rollback_batch: int  # copies per rollback batch
    wait_s: float  # emulated seconds of each batch's bake
    max_execution_s: float | None
    alarms: tuple[str, ...]

    def to_doc(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "alarms": list(self.alarms)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> RolloutPlan:
        return cls(**{**doc, "alarms": tuple(doc.get("alarms") or ())})


def plan(config: dict[str, Any], copies: int) -> RolloutPlan:
    """The plan of an InferenceComponentDeploymentConfig for a component of ``copies`` copies;
    raises ``PlanError`` for what SageMaker refuses."""
    rolling = config[ROLLING]  # required by the shape
    batch = _batch(rolling["MaximumBatchSize"], copies, bounded=True)
    rollback = rolling.get("RollbackMaximumBatchSize")
    rollback_batch = copies if rollback is None else _batch(rollback, copies, bounded=False)
    timeout = rolling.get("MaximumExecutionTimeoutInSeconds")
    return RolloutPlan(max(1, batch), max(1, rollback_batch),
                       float(rolling["WaitIntervalInSeconds"]),
                       None if timeout is None else float(timeout), tuple(alarm_names(config)))


def _batch(size: dict[str, Any], copies: int, bounded: bool) -> int:
    member = "MaximumBatchSize" if bounded else "RollbackMaximumBatchSize"
    value = int(size["Value"])
    if size["Type"] == CAPACITY_PERCENT:
        if value > 100:  # [U] wording
            raise PlanError(f"{member} Value {value} is not a percentage: CAPACITY_PERCENT "
                            "takes 1 to 100.")
        if bounded and not 5 <= value <= 50:  # [U] wording, the documented bounds
            raise PlanError(f"{member} ({value}%) must be between 5% and 50% of the copy count "
                            "of the inference component.")
        return math.ceil(value / 100 * copies - 1e-9)
    if bounded and copies and value > 1 and not 0.05 <= value / copies <= 0.5:
        raise PlanError(  # [U] wording, the documented bounds
            f"{member} ({value} copies of {copies}) must be between 5% and 50% of the copy "
            "count of the inference component.")
    return min(value, copies)


@dataclasses.dataclass
class Rollout(GuardedProgress):
    """Where a rolling update is (``started``: at UpdateInferenceComponent), kept in the
    component's record."""

    total: int  # copies rolled (the placed ones when the update started)
    desired_before: int  # DesiredCopyCount to go back to on a rollback
    new: int = 0  # copies of the new specification now (the others are old ones)
    rolling_back: bool = False
    reason: str | None = None  # why it rolls back (the FailureReason)
    resumed: int = 0  # restarts of the emulator this update went through


class RollingUpdate(GuardedRun[Rollout, RolloutPlan]):
    """One rolling update of component ``name``, to its end."""

    def __init__(self, name: str, rollout: Rollout, roll: RollCopies, clock: Clock,
                 alarms: AlarmStates | None, save: Callable[[Rollout], None]) -> None:
        self.name = name
        self.rollout = rollout
        super().__init__(rollout, RolloutPlan.from_doc(rollout.plan), clock, alarms, save)
        self._roll = roll

    async def run(self) -> str | None:
        """None once every copy is of the new specification; the FailureReason once the update
        is rolled back to the old one. Raises what a rollback itself meets."""
        fired: asyncio.Queue[str] = asyncio.Queue()
        unsubscribe = self._watch(fired)
        try:
            if not self.rollout.rolling_back:
                try:
                    await self._forward(fired)
                    return None
                except RolledBack as exc:
                    self._record(rolling_back=True, reason=str(exc))
                except Exception as exc:  # noqa: BLE001 - a new copy failed to start
                    self._record(rolling_back=True, reason=(  # [U] wording
                        f"Inference component update was rolled back because a copy of the new "
                        f"specification failed to start: {exc}")[:1024])
            log.warning("inference component %s: rolling back: %s", self.name,
                        self.rollout.reason)
            await self._backward()
            return self.rollout.reason
        finally:
            unsubscribe()

    async def _forward(self, fired: asyncio.Queue[str]) -> None:
        r, total = self.rollout, self.rollout.total
        if r.resumed:  # after a restart: both fleets as the last stored batch left them
            await self._roll(total - r.new, r.new)
            if r.new:
                await self._bake(fired)
        while r.new < total:
            self._raise_if_alarming()
            self._raise_if_late()
            new = min(total, r.new + self.plan.batch)
            await self._roll(total - new, new)
            self._record(new=new)
            log.info("inference component %s: batch %d/%d: %d of %d copies on the new "
                     "specification, baking %.0f s", self.name, self._batch_of(new),
                     self._batches(), new, total, self.plan.wait_s)
            await self._bake(fired)

    async def _backward(self) -> None:
        r = self.rollout
        if r.resumed:
            await self._roll(r.total - r.new, r.new)
        while r.new > 0:
            new = max(0, r.new - self.plan.rollback_batch)
            await self._roll(r.total - new, new)
            self._record(new=new)

    async def _bake(self, fired: asyncio.Queue[str]) -> None:
        self._raise_if_alarming()
        await self._bake_until(
            self._clock.now() + self._clock.real_duration(self.plan.wait_s), fired)

    def _batches(self) -> int:
        return max(1, math.ceil(self.rollout.total / self.plan.batch))

    def _batch_of(self, new: int) -> int:
        return max(1, math.ceil(new / self.plan.batch))

    def _timeout_reason(self) -> str:  # [U] wording
        return (f"Inference component update did not complete within "
                f"MaximumExecutionTimeoutInSeconds ({self.plan.max_execution_s:.0f} s) and was "
                "rolled back to the previous specification.")

    def _rolled_back_by(self, alarm: str) -> NoReturn:
        # [U] wording, as for endpoint deployments: the alarm, and where the update was.
        raise RolledBack(
            f"Inference component update was rolled back because CloudWatch alarm \"{alarm}\" "
            f"went into ALARM state during batch {self._batch_of(self.rollout.new)} of "
            f"{self._batches()} ({self.rollout.new} of {self.rollout.total} copies on the new "
            "specification).")
