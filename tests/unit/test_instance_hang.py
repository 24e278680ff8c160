"""An instance hang fault waits until the kernel shows every thread of the process stopped."""

from __future__ import annotations

import os
import signal
import subprocess

from emulator.hosting.instance_faults import _wait_stopped


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
