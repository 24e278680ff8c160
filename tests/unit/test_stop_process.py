"""``stop_process``: SIGTERM first, so a server stops what it started; SIGKILL if it hangs."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.processes import stop_process, stopped_on_failure

# Prints "ready" once its SIGTERM handler is in place, then waits for a signal.
_CHILD = """
import signal, sys, time
def on_term(*_):
    if sys.argv[1] == "ignore":
        return
    print("cleaned up", flush=True)
    raise SystemExit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def _child(mode: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, mode], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    return child


def test_a_process_that_stops_on_sigterm_gets_to_clean_up() -> None:
    child = _child("clean")
    stop_process(child, timeout_s=30)
    assert child.returncode == 0
    assert child.stdout is not None
    with child.stdout:
        assert child.stdout.read() == b"cleaned up\n"


def test_a_process_that_ignores_sigterm_is_killed_after_the_timeout() -> None:
    child = _child("ignore")
    stop_process(child, timeout_s=0.5)
    assert child.returncode == -signal.SIGKILL
    assert child.stdout is not None
    child.stdout.close()


def test_a_child_whose_start_is_interrupted_is_stopped_and_the_error_goes_on() -> None:
    child = _child("clean")
    with pytest.raises(KeyboardInterrupt), stopped_on_failure(child, timeout_s=30):
        raise KeyboardInterrupt  # Ctrl-C (or SIGTERM's SystemExit) while waiting for it
    assert child.returncode == 0  # it got SIGTERM and cleaned up
    assert child.stdout is not None
    with child.stdout:
        assert child.stdout.read() == b"cleaned up\n"


def test_a_child_that_started_is_left_running() -> None:
    child = _child("clean")
    with stopped_on_failure(child):
        pass
    assert child.poll() is None
    stop_process(child, timeout_s=30)
    assert child.stdout is not None
    child.stdout.close()


def test_a_child_started_with_dies_with_parent_ends_with_its_parent(tmp_path: Path) -> None:
    """SIGKILL the parent: the child (here a sleep) gets SIGTERM, with no Python run in it
    between fork and exec where setpriv exists."""
    import os

    from emulator.processes import dies_with_parent, wait_until

    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from emulator.processes import dies_with_parent\n"
        "command, preexec_fn = dies_with_parent(['sleep', '300'])\n"
        "child = subprocess.Popen(command, preexec_fn=preexec_fn)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(300)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert dies_with_parent(["x"])[1] is None  # setpriv, on this machine: no preexec_fn

    def child_ended() -> bool:
        try:
            with open(f"/proc/{child}/stat") as stat:
                return stat.read().split(") ")[1].startswith("Z")  # a zombie: it has ended
        except FileNotFoundError:
            return True

    def sleeping() -> bool:  # setpriv has set the signal and exec'd the command
        with open(f"/proc/{child}/comm") as comm:
            return comm.read().strip() == "sleep"

    assert wait_until(sleeping, 30) and not child_ended()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    parent.stdout.close()
    assert wait_until(child_ended, 30)
