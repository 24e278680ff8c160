"""``mme loadtest`` as a user runs it, stopped by Ctrl-C or by its endpoint dying:
both write the report of what was measured, neither prints a traceback, and a dead endpoint
ends the run instead of filling it with connection errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from harness.live_endpoint import EmulatorProcess
from harness.loadtest.invokers import find_endpoint_snapshot
from tests.support import package, scale_request, wait_until, write_scale_model

PHASE_S = 300  # far longer than either test runs: each must end the run itself


def _emulator(root: Path, name: str) -> EmulatorProcess:
    store = root / "store"
    if not store.exists():
        package(write_scale_model(root / "repo", "m"), store / "m.tar.gz", "folder")
        (root / "body.json").write_bytes(scale_request([1, 2, 3, 4]))
    env = {"MME_MODEL_DATA": str(store), "MME_CACHE_DIR": str(root / f"cache-{name}")}
    return EmulatorProcess(env, root / f"{name}.log").start()


def _invocations(url: str) -> float:
    with urllib.request.urlopen(f"{url}/_emulator/metrics", timeout=5) as resp:
        snapshot = find_endpoint_snapshot(json.loads(resp.read()), "local") or {}
    return float(snapshot.get("Metrics", {}).get("Invocations", {}).get("SampleCount", 0) or 0)


def _loadtest(url: str, root: Path, out: Path) -> subprocess.Popen[str]:
    # Its own session, as a terminal's foreground job: Ctrl-C goes to its process group.
    return subprocess.Popen(
        [sys.executable, "-m", "mme", "loadtest", "--url", url, "--target-model", "m.tar.gz",
         "--body", str(root / "body.json"), "--content-type", "application/json",
         "--phase", f"2:0:{PHASE_S}", "--out", str(out), "--no-png"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("loadtest-stops")


def test_ctrl_c_writes_the_report_of_what_was_measured(root: Path) -> None:
    server = _emulator(root, "kept")
    try:
        run = _loadtest(server.url, root, root / "interrupted")
        wait_until(lambda: _invocations(server.url) >= 20, 120, "traffic")
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 130, stderr
        assert "Traceback" not in stderr
        report = json.loads((root / "interrupted" / "report.json").read_text())
        assert report["stop_reason"].startswith("interrupted")
        assert report["successes"] >= 20 and report["errors_by_code"] == {}
        assert report["duration_s"] < PHASE_S
        assert "| stop reason | interrupted" in stdout
        assert _invocations(server.url) >= report["successes"]  # the server was left running
    finally:
        server.stop()


def test_a_dead_endpoint_ends_the_run_with_a_report(root: Path) -> None:
    server = _emulator(root, "killed")
    run = _loadtest(server.url, root, root / "dead")
    try:
        wait_until(lambda: _invocations(server.url) >= 20, 120, "traffic")
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=120)
    finally:
        server.stop()
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, stderr
    assert "Traceback" not in stderr
    report = json.loads((root / "dead" / "report.json").read_text())
    assert report["stop_reason"].startswith("aborted: the endpoint stopped answering")
    assert report["successes"] >= 20
    assert report["duration_s"] < PHASE_S
    assert sum(report["errors_by_code"].values()) < 1000  # it stopped, rather than fire on
    assert report["error_messages"]  # what the connection said, by error code
