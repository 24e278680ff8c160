"""Walking a process tree while its members exit (a Triton stub at its model's unload)."""

from __future__ import annotations

import os
import subprocess
import sys

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
