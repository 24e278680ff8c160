"""``mme build`` for real: the exporters' hundred lines of warnings stay off the terminal unless
``--verbose`` (the mechanism itself is tested in tests/unit/test_build_quiet.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_mme_build_prints_its_own_lines_only_unless_verbose(tmp_path: Path) -> None:
    def build(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mme", "build", "image_classification",
                               "-o", str(tmp_path / f"ic{len(flags)}"), *flags],
                              capture_output=True, text=True, timeout=600)

    quiet = build()
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert quiet.stderr == ""
    assert len(quiet.stdout.splitlines()) == 4 and "built image_classification" in quiet.stdout
    verbose = build("--verbose")
    assert verbose.returncode == 0
    assert "torch/onnx" in verbose.stderr  # what the quiet build kept off the terminal
