"""``mme build`` hides the exporters' output unless ``--verbose``, and never hides a failure."""

from __future__ import annotations

import subprocess
import sys

# Writes to fd 2 from Python and below it (as native exporter code does), then succeeds or fails.
CHATTY = """
import os, sys, warnings
from ensembles.quiet import exporter_output_hidden
with exporter_output_hidden({hidden}):
    print("python chatter", file=sys.stderr)
    warnings.warn("a deprecation nobody here can fix", FutureWarning)
    os.write(2, b"native chatter\\n")
    if {fail}:
        raise RuntimeError("export failed")
print("built")
"""


def _run(hidden: bool, fail: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHATTY.format(hidden=hidden, fail=fail)],
                          capture_output=True, text=True, timeout=60)


def test_output_below_python_is_hidden_too() -> None:
    result = _run(hidden=True, fail=False)
    assert result.returncode == 0 and result.stdout == "built\n"
    assert result.stderr == ""


def test_a_failed_build_shows_what_was_hidden() -> None:
    result = _run(hidden=True, fail=True)
    assert result.returncode != 0
    for line in ("python chatter", "native chatter", "FutureWarning", "export failed"):
        assert line in result.stderr


def test_verbose_shows_everything() -> None:
    result = _run(hidden=False, fail=False)
    assert "python chatter" in result.stderr and "native chatter" in result.stderr
