"""``mme lint --measure`` loads each model once on the embedded Triton and sets its measured
memory against the instance type's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import write_scale_model

pytestmark = pytest.mark.slow


def test_a_model_that_fits_is_measured_and_clean(tmp_path: Path) -> None:
    model = write_scale_model(tmp_path / "r", "m")
    result = subprocess.run([sys.executable, "-m", "mme", "lint", str(model), "--measure",
                             "--instance-type", "ml.t2.medium"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert f"mme lint: {model}: " in result.stderr and " MiB measured" in result.stderr
    assert "no findings" in result.stdout
