"""``mme gpu-check`` on a machine without a GPU says so in one line and exits 2, having started
nothing; its report file says which check failed (docker/gpu-check.sh runs it on GPU machines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.triton.launcher import count_gpus


@pytest.mark.skipif(count_gpus() > 0, reason="this machine has a GPU: the check would run")
def test_without_a_gpu_the_check_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mme.cli import main

    report = tmp_path / "report.json"
    assert main(["gpu-check", "--report", str(report)]) == 2
    captured = capsys.readouterr()
    assert "FAIL environment: nvidia-smi lists none" in captured.out
    assert captured.err.strip() == ("mme gpu-check: needs an NVIDIA GPU that nvidia-smi, torch "
                                    "and NVML see")
    written = json.loads(report.read_text())
    assert [c["check"] for c in written["checks"]] == ["environment"]
    assert written["summary"] == "0 of 1 checks passed; failed: environment"


def test_sizes_are_checked_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    from mme.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["gpu-check", "--gpu-budget", "lots"])
    assert stopped.value.code == 2
    assert "--gpu-budget: 'lots': give a size such as 5GiB" in capsys.readouterr().err
