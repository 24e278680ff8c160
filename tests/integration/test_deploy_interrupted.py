"""Ctrl-C in ``mme deploy``: the command stops following, says the deployment goes on in the
endpoint, prints the command that follows it and the one that stops it, and exits 130 with no
traceback; what it printed works (the rollback alarm rolls it back, ``--follow`` sees it end)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from mme.cli import main as mme
from tests import support
from tests.client_support import DUMMY_CREDENTIALS
from tests.support import write_scale_model

pytestmark = pytest.mark.slow


def _mme(*args: str) -> subprocess.Popen[str]:
    # Its own session, as a terminal's foreground job: Ctrl-C goes to its process group.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MME_", "AWS_"))}
    return subprocess.Popen([sys.executable, "-m", "mme", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)


def _ctrl_c(run: subprocess.Popen[str]) -> tuple[str, str]:
    os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert "Traceback" not in err
    return out, err


def _line(err: str, label: str) -> list[str]:
    line = next(x for x in err.splitlines() if x.strip().startswith(label))
    words = shlex.split(line.split(":", 1)[1].split("(")[0])
    assert words[0] == "mme", line
    return words[1:]


def test_ctrl_c_in_a_guarded_update_leaves_it_running_and_says_how_to_follow_and_stop_it(
        start_emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = start_emulator(clock_scale=60.0)
    sm = boto3.client("sagemaker", endpoint_url=server.url, **DUMMY_CREDENTIALS)
    local = ["--target", "local", "--emulator-url", server.url]
    common = ["deploy", *local, "--endpoint-name", "demo", "--store-dir", str(tmp_path / "s"),
              "--instance-type", "ml.m5.xlarge", "--wait-delay", "0.2", "--no-progress"]
    assert mme([*common, str(write_scale_model(tmp_path / "v1", "scale", 2.0))]) == 0
    assert mme(["alarm", "put", *local, "--name", "demo-5xx", "--endpoint-name", "demo",
                "--metric", "Invocation5XXErrors", "--threshold", "0"]) == 0
    capsys.readouterr()

    run = _mme(*common, "--traffic", "canary", "--canary-size", "50%", "--bake", "3600",
               "--rollback-alarm", "demo-5xx",
               str(write_scale_model(tmp_path / "v2", "scale", 3.0)))
    support.wait_for(lambda: "Baking" in str(sm.describe_endpoint(EndpointName="demo").get(
        "PendingDeploymentSummary")), 120, "the canary baking")
    _, err = _ctrl_c(run)
    assert "stopped following; the guarded update of endpoint demo to demo-" in err
    assert "continues in the endpoint" in err
    assert sm.describe_endpoint(EndpointName="demo")["EndpointStatus"] == "Updating"

    # The printed commands, as printed: roll it back, then follow it to its end (exit 3).
    assert mme(_line(err, "roll it back:")) == 0
    assert mme(_line(err, "follow it:")) == 3
    out = capsys.readouterr().out
    assert "deployment of demo: InService on demo-" in out and "rolled back" in out


def test_ctrl_c_while_a_component_starts_keeps_it_and_says_how_to_follow_or_remove_it(
        start_emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = start_emulator()
    sm = boto3.client("sagemaker", endpoint_url=server.url, **DUMMY_CREDENTIALS)
    gate = tmp_path / "loaded"
    repo = write_scale_model(tmp_path / "repo", "slow", 2.0, load_gate=str(gate))
    run = _mme("deploy", "--target", "local", "--emulator-url", server.url,
               "--endpoint-name", "shared", "--inference-component", "slow",
               "--store-dir", str(tmp_path / "s"), "--instance-type", "ml.g5.12xlarge",
               "--wait-delay", "0.2", "--no-progress", str(repo))
    support.wait_for(lambda: [c for c in sm.list_inference_components()["InferenceComponents"]
                              if c["InferenceComponentStatus"] == "Creating"], 120,
                     "the component creating")
    _, err = _ctrl_c(run)
    assert "the creation of inference component slow continues in endpoint shared" in err
    assert sm.describe_inference_component(InferenceComponentName="slow")  # not rolled back
    remove = _line(err, "remove it:")
    assert remove[:1] == ["teardown"] and "--inference-component" in remove

    gate.touch()
    assert mme(_line(err, "follow it:")) == 0
    assert "inference component slow: InService" in capsys.readouterr().out
    assert mme([*remove, "--store-dir", str(tmp_path / "s"), "--wait-delay", "0.2"]) == 0
