"""``mme alarm put|list|delete``: a guarded update's rollback alarm from the shell, then the
guarded update that names it, against a running emulator (no Python written by the user)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mme.cli import main as mme
from tests.support import write_scale_model


def test_an_alarm_put_from_the_shell_guards_an_update_then_goes(
        start_emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = start_emulator()
    local = ["--target", "local", "--emulator-url", server.url]
    deploy = ["deploy", *local, "--endpoint-name", "demo", "--store-dir", str(tmp_path / "s"),
              "--instance-type", "ml.m5.xlarge", "--wait-delay", "0.2", "--no-progress"]

    assert mme(["alarm", "put", *local, "--name", "demo-5xx", "--endpoint-name", "demo",
                "--metric", "Invocation5XXErrors", "--statistic", "Sum", "--threshold", "0"]) == 0
    assert "alarm demo-5xx: Sum of AWS/SageMaker Invocation5XXErrors (EndpointName=demo, " \
        "VariantName=AllTraffic) GreaterThanThreshold 0" in capsys.readouterr().out
    assert mme(["alarm", "list", *local]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith("demo-5xx\t") and "Invocation5XXErrors" in listed

    assert mme([*deploy, str(write_scale_model(tmp_path / "v1", "scale", 2.0))]) == 0
    assert mme([*deploy, "--traffic", "all-at-once", "--bake", "0", "--rollback-alarm",
                "demo-5xx", str(write_scale_model(tmp_path / "v2", "scale", 3.0))]) == 0
    assert '"AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "demo-5xx"}]}' in \
        capsys.readouterr().out

    assert mme(["alarm", "delete", *local, "demo-5xx"]) == 0
    assert mme(["alarm", "list", *local]) == 0
    assert "demo-5xx" not in capsys.readouterr().out.replace("deleted demo-5xx", "")
    assert mme(["alarm", "delete", *local, "demo-5xx"]) == 1
    assert "no alarm named demo-5xx" in capsys.readouterr().err
    assert mme(["alarm", "put", *local, "--name", "x", "--metric", "M", "--threshold", "1"]) == 2
    assert "--endpoint-name NAME" in capsys.readouterr().err
