"""``make setup`` says what it is about to download (its size, and why: torch's CUDA wheels, even
without a GPU) before the long install, and shows pip's progress instead of minutes of silence."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_setup_says_the_size_and_shows_progress() -> None:
    planned = subprocess.run(["make", "-n", "-W", "pyproject.toml", "setup"], cwd=ROOT,
                             capture_output=True, text=True, check=True, timeout=60).stdout
    said = planned.index("about 3.5 GB")
    install = planned.index("-e '.[")
    assert said < install and "CUDA wheels" in planned
    line = planned[planned.rindex("pip install", 0, install):install]
    assert " -q " not in line and "--progress-bar on" in line
    assert "exit ${PIPESTATUS[0]}" in planned  # a failed install still fails make setup
