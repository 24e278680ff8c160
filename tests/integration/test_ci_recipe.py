"""docs/ci.md's recipe with ``harness/examples`` as it is: the example writes a model *folder*
(``models/add/``), ``mme ci up --model-data models/`` serves it packaged by the pytest plugin's
rule (``add.tar.gz``), the example test file passes against it, ``mme ci down`` leaves nothing.
One shell session, no Python written by hand."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]

RECIPE = """
set -e
python -m harness.examples.add_model models/
eval "$(mme ci up --model-data models/ --port 0)"
trap 'mme ci down --report mme-report' EXIT
python -m pytest -p no:cacheprovider -q tests/ --mme-url "$MME_CI_URL" -k "not golden"
"""


def test_the_ci_recipe_runs_the_harness_example_on_its_model_folder(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "harness" / "examples" / "test_example_endpoint.py", tmp_path / "tests")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MME_", "AWS_"))}
    env.update(PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
               MME_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    run = subprocess.run(["bash", "-c", RECIPE], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert " passed" in run.stdout and "failed" not in run.stdout, run.stdout
    log = (tmp_path / "mme-report" / "server.log").read_text()
    assert "served packaged, each NAME/ as the TargetModel NAME.tar.gz: add.tar.gz" in log
    assert not (tmp_path / "state").exists()
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["add"]  # untouched
