"""A fault rule's instance fault (``{"instance": "kill"}``, ``{"instance": {"hang_s": N}}``): the
Triton of the unit that would answer the call is killed (SIGKILL: the watchdog restarts it, as
SageMaker replaces a container that crashed) or stopped for a while (SIGSTOP, then SIGCONT: a
container that hangs; the calls it holds wait, up to the invocation timeout). And its capacity
fault (``{"capacity": ...}``): units being added (a variant's instances, a component's copies)
cannot be provisioned, or start later.

The process is the embedded Triton, or the docker launcher's container's first process. A unit
with no process of its own here (an external Triton) is left alone, and the log says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path

from emulator.faults.rules import CallFacts, CapacityFault, InstanceFault
from emulator.faults.table import FaultTable

log = logging.getLogger(__name__)


class InsufficientCapacity(Exception):
    """No instance of the type can be provisioned (a capacity fault): a create fails, an
    update or a scale-out keeps what runs, with this as the FailureReason."""


async def provisioned(faults: FaultTable | None, endpoint: str, variant: str,
                      component: str | None = None) -> None:
    """Units to add to ``variant`` (or to ``component``'s copies on it): a capacity fault in
    force makes them impossible (SageMaker's words for a type it has no capacity of) or
    later."""
    fired = faults.draw(CallFacts("", "", endpoint, variant, inference_component=component),
                        "capacity") if faults is not None and faults.armed else None
    if fired is None or not isinstance(fired.fault, CapacityFault):
        return
    if fired.fault.insufficient:
        raise InsufficientCapacity(  # [O] AWS's FailureReason, word for word
            "Unable to provision requested ML compute capacity. Please retry using a "
            "different ML instance type.")
    await asyncio.sleep(fired.fault.slow_start_s)


def triton_pid(unit: object) -> int | None:
    """The process of ``unit``'s Triton on this machine, if it has one."""
    launcher = getattr(unit, "launcher", None)
    for name in ("pid", "container_pid"):  # embedded, docker
        pid = getattr(launcher, name, None)
        if isinstance(pid, int) and pid > 0:
            return pid
    return None


def _stat_field(stat: Path, index: int) -> str | None:
    """Field ``index`` after the command name of a ``/proc/.../stat`` file; None once gone."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[index]
    except (OSError, IndexError):
        return None


def _started(pid: int) -> str | None:
    """The process's start time in clock ticks: a pid reused since is another process."""
    return _stat_field(Path(f"/proc/{pid}/stat"), 19)


def _state(stat: Path) -> str:
    """The kernel's one-letter state in a ``/proc/.../stat`` file (``T``: stopped), or ``gone``."""
    return _stat_field(stat, 0) or "gone"


def _wait_stopped(pid: int, limit_s: float = 0.5) -> str:
    """Wait (at most ``limit_s``) until every thread of ``pid`` shows as stopped; their states."""
    deadline = time.monotonic() + limit_s
    while True:
        states = {_state(Path(f"/proc/{pid}/stat"))}
        with contextlib.suppress(OSError):
            states |= {_state(task / "stat") for task in Path(f"/proc/{pid}/task").iterdir()}
        if states <= {"T", "t", "gone"} or time.monotonic() >= deadline:
            return "".join(sorted(states))
        time.sleep(0.001)


async def apply(fault: InstanceFault, unit: object, unit_id: str) -> None:
    pid = triton_pid(unit)
    if pid is None:
        log.warning("instance=%s fault=instance outcome=skipped reason=\"no Triton process of "
                    "its own on this machine (an external Triton)\"", unit_id)
        return
    if fault.kill:
        log.info("instance=%s fault=instance killed pid=%d", unit_id, pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return
    started = _started(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
    # The kernel stops each of Triton's threads as it next runs: the call this fault holds is
    # sent only once the process shows as stopped, so none of its threads can still answer it.
    # Polled in a thread: a thread that does not stop (uninterruptible I/O) would otherwise hold
    # every other call of the endpoint for the whole limit.
    stopped = await asyncio.to_thread(_wait_stopped, pid)
    log.info("instance=%s fault=instance stopped pid=%d for=%gs state=%s", unit_id, pid,
             fault.hang_s, stopped)

    def resume() -> None:
        if started is not None and _started(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    asyncio.get_running_loop().call_later(fault.hang_s, resume)
