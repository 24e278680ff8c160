"""Stopping the server of ``mme ci up`` from another process, with everything it started.

``mme ci down`` is not the server's parent (``up`` has exited), so it cannot ``wait`` for it:
it signals the pid recorded with its start time (a reused pid is never signalled) and watches
``/proc``. The server's Tritons run in sessions of their own and die with it
(``PR_SET_PDEATHSIG``); the tree is read before the stop so that a straggler is still found
and killed, and nothing is left running.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from mme.ci.state import process_start_ticks

# (pid, start ticks): one process, never confused with a later one under the same pid.
Process = tuple[int, int]


def _parents() -> dict[int, int]:
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found[int(stat.parent.name)] = int(fields[1])
    return found


def tree(pid: int) -> list[Process]:
    """``pid`` and its descendants, each with its start time (those still alive)."""
    parents = _parents()
    members, frontier = [pid], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        members += children
        frontier = children
    alive = []
    for member in members:
        ticks = process_start_ticks(member)
        if ticks is not None:
            alive.append((member, ticks))
    return alive


def running(processes: list[Process]) -> list[Process]:
    return [p for p in processes if process_start_ticks(p[0]) == p[1]]


def _signal(processes: list[Process], signum: int) -> None:
    for pid, _ticks in running(processes):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def wait_gone(processes: list[Process], timeout_s: float) -> bool:
    from emulator.processes import wait_until

    return wait_until(lambda: not running(processes), timeout_s)


def stop_tree(server: Process, timeout_s: float) -> tuple[bool, list[Process]]:
    """SIGTERM the server (it stops its Tritons in order), wait up to ``timeout_s`` for it and
    every descendant to be gone, then SIGKILL whatever is left. Returns (stopped by SIGTERM
    alone, what had to be killed)."""
    members = tree(server[0]) if process_start_ticks(server[0]) == server[1] else []
    if not members:
        return True, []
    _signal([server], signal.SIGTERM)
    if wait_gone(members, timeout_s):
        return True, []
    left = running(members)
    _signal(left, signal.SIGKILL)
    wait_gone(left, 10.0)
    return False, left
