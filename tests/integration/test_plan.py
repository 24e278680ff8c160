"""``mme plan`` against a real ``mme loadtest`` of the same shape.

Four Python models that each fill 100 MiB at initialize (about 120 MiB each once loaded,
measured: the 100 MiB are the model's own, so the figure varies little with what else runs on
this machine), a 440 MiB budget (room for three), Zipf(2.5) traffic: the hit ratio ``mme plan``
predicts from one load of each model is the one a real load test measures, within 5 points.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import package, write_scale_model

pytestmark = pytest.mark.slow
MODELS = [f"m{i}.tar.gz" for i in range(4)]
SHAPE = ["--memory-budget", "440MiB", "--popularity", "zipf:2.5", "--seed", "0"]


def _mme(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "mme", *args], capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_the_predicted_hit_ratio_is_the_load_tests(store: Path, tmp_path: Path) -> None:
    for i, name in enumerate(MODELS):
        folder = write_scale_model(tmp_path / "w", f"m{i}", scale=i + 1, ballast_mib="100")
        package(folder, store / name, "folder")
    targets = [arg for name in MODELS for arg in ("--target-model", name)]

    planned = _mme("plan", "--model-data", str(store), *targets, *SHAPE, "--rps", "5",
                   "--json", str(tmp_path / "plan.json"), "--plot", str(tmp_path / "plan.png"),
                   "--max-miss-ratio", "0.2", timeout=600)
    assert "hit ratio" in planned.stdout and "--memory-budget 440MiB" in planned.stdout
    assert "yes *" in planned.stdout  # the one configuration meets a 20 % miss ratio
    report = json.loads((tmp_path / "plan.json").read_text())
    assert all(m["memory_bytes"] > m["file_bytes"] for m in report["models"])  # measured
    (prediction,) = report["predictions"]
    assert prediction["models_resident"] == 3  # room for three of the four
    assert (tmp_path / "plan.png").stat().st_size > 0

    # One user drawing in the seeded order: the hit ratio is the draws' order, not their pace,
    # so the user pauses between calls (a load test at full speed would take a core for a minute).
    _mme("loadtest", "--model-data", str(store), *targets, *SHAPE, "--phase", "1:0:60",
         "--think-time", "0.02", "--out", str(tmp_path / "loadtest"), "--no-png", timeout=600)
    measured = json.loads((tmp_path / "loadtest" / "report.json").read_text())
    print(f"\n[plan] predicted hit ratio {prediction['hit_ratio']:.3f}, load test "
          f"{measured['cache_hit_ratio']:.3f} over {measured['invocations']} calls")
    assert abs(prediction["hit_ratio"] - measured["cache_hit_ratio"]) <= 0.05


def test_a_model_that_does_not_load_is_skipped_and_named(store: Path, tmp_path: Path) -> None:
    """One broken tarball in a store does not stop the plan: the others are measured and
    planned, the broken one is named with the reason, in the output and in the JSON."""
    package(write_scale_model(tmp_path / "w", "good"), store / "good.tar.gz", "folder")
    (store / "broken.tar.gz").write_bytes(b"not a tarball")

    planned = _mme("plan", "--model-data", str(store), "--memory-budget", "1GiB",
                   "--json", str(tmp_path / "plan.json"), timeout=300)
    skipped = [line for line in planned.stdout.splitlines() if "skipped" in line]
    assert len(skipped) == 1 and skipped[0].strip().startswith("broken.tar.gz: skipped, it "
                                                                "did not load ("), planned.stdout
    report = json.loads((tmp_path / "plan.json").read_text())
    assert [m["target"] for m in report["models"]] == ["good.tar.gz"]
    assert [s["target"] for s in report["skipped"]] == ["broken.tar.gz"]
    assert report["skipped"][0]["reason"]
    (prediction,) = report["predictions"]
    assert prediction["models_resident"] == 1


def test_a_store_where_no_model_loads_stops_with_each_reason(store: Path) -> None:
    (store / "broken.tar.gz").write_bytes(b"not a tarball")
    result = subprocess.run([sys.executable, "-m", "mme", "plan", "--model-data", str(store),
                             "--memory-budget", "1GiB"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode != 0
    assert "mme plan: no model could be measured: broken.tar.gz: " in result.stderr
    assert "Traceback" not in result.stderr
