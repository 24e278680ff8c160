"""An instance hang fault waits until the kernel shows every thread of the process stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from types import SimpleNamespace

from emulator.faults.rules import InstanceFault
from emulator.hosting.instance_faults import _wait_stopped, apply
from emulator.triton import stubs
from tests.support import wait_until


def test_a_stopped_process_shows_as_stopped_and_a_running_one_does_not() -> None:
    process = subprocess.Popen(["sleep", "30"])
    try:
        assert "T" not in _wait_stopped(process.pid, limit_s=0.05)  # running: gives up
        os.kill(process.pid, signal.SIGSTOP)
        assert _wait_stopped(process.pid, limit_s=30) == "T"  # returns once it is stopped
        os.kill(process.pid, signal.SIGCONT)
    finally:
        process.kill()
        process.wait()
    assert _wait_stopped(process.pid, limit_s=0.05) == "gone"


def test_the_wait_for_a_stop_leaves_the_event_loop_serving() -> None:
    """A process whose threads never show as stopped (here a zombie) holds the fault for its
    whole wait: the endpoint's other calls go on meanwhile."""
    process = subprocess.Popen(["true"])
    wait_until(lambda: stubs.process_state(process.pid) == "Z", 10, "the child to exit")
    unit = SimpleNamespace(launcher=SimpleNamespace(pid=process.pid))

    async def ticks_during_the_fault() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await apply(InstanceFault(kill=False, hang_s=0.01), unit, "i-1")
        ticker.cancel()
        return ticks

    try:
        assert asyncio.run(ticks_during_the_fault()) >= 3  # of about 50 in its 0.5 s
    finally:
        process.wait()
