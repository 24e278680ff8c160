"""Walking a process tree while its members exit (a Triton stub at its model's unload); the
ports a child server is told."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from emulator import processes
from emulator.processes import process_tree


def test_a_process_that_is_gone_is_a_tree_of_itself_not_an_error() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: /proc/<pid> no longer exists
    assert process_tree(child.pid) == [child.pid]


def test_a_live_tree_lists_the_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        assert child.pid in process_tree(os.getpid())
    finally:
        child.communicate(b"")


def test_free_ports_are_distinct_even_when_the_picks_repeat(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    picks = iter([20001, 20001, 20002, 20001, 20003])
    monkeypatch.setattr(processes, "free_port", lambda host="127.0.0.1": next(picks))
    assert processes.free_ports(3) == [20001, 20002, 20003]
