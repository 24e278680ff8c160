"""``mme loadtest`` on Locust, the three ways a team runs it: one process, the cores of
this machine (``--processes 2``), and a master with workers (here two worker processes on this
machine). Each gives the same report, with every call counted once; a worker that dies is
reported and the run ends with what was measured; a plan with an error sends no load; and the
takeaway ``harness/locustfile.py`` runs under plain ``locust``. The endpoint is a fake one in
this process (real HTTP, boto3 as the client): what it served is what the report must hold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.processes import free_port
from harness.loadtest import locust_run
from harness.loadtest.locust_run import LOCUSTFILE
from mme.cli import main
from tests.loadtest_support import Answer, FakeEndpoint, served
from tests.support import wait_until

MODELS = ("m0.tar.gz", "m1.tar.gz", "m2.tar.gz")
PHASES = ["2:0:3", "4:0:1.5"]


class TwoInstances:
    """Two instances taking turns; a model's first call on an instance is a cold start."""

    def __init__(self) -> None:
        self.turn = 0
        self.lock = threading.Lock()
        self.loaded: dict[str, set[str | None]] = {"AllTraffic/i-0": set(),
                                                   "AllTraffic/i-1": set()}

    def __call__(self, target: str | None) -> Answer:
        with self.lock:
            self.turn += 1
            instance = f"AllTraffic/i-{self.turn % 2}"
            hit = target in self.loaded[instance]
            self.loaded[instance].add(target)
        return served("AllTraffic", instance, model_latency_us=800.0, cache_hit=hit)


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    with FakeEndpoint(TwoInstances()).running() as running:
        yield running


def _body(tmp_path: Path) -> Path:
    path = tmp_path / "body.json"
    path.write_text('{"inputs": []}')
    return path


def _args(endpoint: FakeEndpoint, tmp_path: Path, out: Path, *extra: str,
          phases: list[str] = PHASES) -> list[str]:
    args = ["loadtest", "--url", endpoint.url, "--body", str(_body(tmp_path)),
            "--content-type", "application/json", "--popularity", "zipf", "--out", str(out)]
    for model in MODELS:
        args += ["--target-model", model]
    for phase in phases:
        args += ["--phase", phase]
    return args + list(extra)


def _worker(port: int) -> subprocess.Popen[str]:
    # Its own process group: a test can kill it and the Locust process under it together.
    return subprocess.Popen(
        [sys.executable, "-m", "mme", "loadtest", "--worker", "--master-host", "127.0.0.1",
         "--master-port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)


def _shape(value: Any) -> Any:
    """The report's structure: keys all the way down, list items by their first one (a figure
    may be None in one run, a number in another: a bin with no call has no p50)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return "value"


@pytest.mark.slow  # three runs of 4.5 s, five Locust processes: ~25 s on 2 cores
def test_one_process_all_cores_and_many_machines_give_the_same_report(
        endpoint: FakeEndpoint, tmp_path: Path) -> None:
    reports: dict[str, dict[str, Any]] = {}
    served_by_run: dict[str, int] = {}

    before = endpoint.total
    assert main(_args(endpoint, tmp_path, tmp_path / "one")) == 0
    served_by_run["one"] = endpoint.total - before

    before = endpoint.total
    assert main(_args(endpoint, tmp_path, tmp_path / "cores", "--processes", "2")) == 0
    served_by_run["cores"] = endpoint.total - before

    port = free_port()
    workers = [_worker(port), _worker(port)]
    try:
        before = endpoint.total
        assert main(_args(endpoint, tmp_path, tmp_path / "machines", "--master",
                          "--expect-workers", "2", "--master-bind-port", str(port))) == 0
        served_by_run["machines"] = endpoint.total - before
        for worker in workers:  # the master tells its workers to quit when it is done
            worker.wait(timeout=30)
            assert worker.returncode == 0, worker.stderr.read() if worker.stderr else ""
    finally:
        for worker in workers:
            _stop(worker)

    for name in ("one", "cores", "machines"):
        reports[name] = json.loads((tmp_path / name / "report.json").read_text())
        report = reports[name]
        # Every call any worker made is in the report, once.
        assert report["invocations"] == served_by_run[name] > 0, name
        assert report["stop_reason"] == "phases complete" and report["errors_by_code"] == {}
        assert report["peak_users"] == 4
        assert [row["phase"] for row in report["phases"]] == [1, 2]
        assert [row["target_model"] for row in report["models"]] == list(MODELS)
        assert sum(row["invocations"] for row in report["models"]) == report["invocations"]
        instances = report["fleet"]["instances"]
        assert [row["instance"] for row in instances] == ["AllTraffic/i-0", "AllTraffic/i-1"]
        assert sum(row["requests"] for row in instances) == report["invocations"]
        assert report["latency_ms"]["ModelLatency"]["p50"] == pytest.approx(0.8)
        markdown = (tmp_path / name / "report.md").read_text()
        assert "| TargetModel | invocations |" in markdown and "| AllTraffic/i-1 |" in markdown
        assert (tmp_path / name / "report.png").read_bytes().startswith(b"\x89PNG")
    assert "1 process" in reports["one"]["generator"]
    assert "2 worker(s)" in reports["cores"]["generator"]
    assert "2 worker(s)" in reports["machines"]["generator"]
    assert _shape(reports["one"]) == _shape(reports["cores"]) == _shape(reports["machines"])


# The engine as a starved worker runs it: a process that gets no CPU for seconds (a loaded
# machine) runs none of its greenlets, so it sends no heartbeat and handles no message. Each stall
# is a blocking sleep (gevent's patched one would let the other greenlets run). Locust's default
# liveness makes each stall long enough for the master to mark the worker missing.
STARVED_LOCUSTFILE = """
import gevent.monkey
import locust.runners

from harness.loadtest import locust_engine as engine
from harness.loadtest.locust_engine import PlanShape, SageMakerUser

locust.runners.HEARTBEAT_LIVENESS = 3
stall = gevent.monkey.get_original("time", "sleep")


class SlowToBuild(engine.LoadProcess):
    def __init__(self, *args, **kwargs):
        if engine.RUN is None:  # a worker (the master holds the run)
            stall({build_s})
        super().__init__(*args, **kwargs)


engine.LoadProcess = SlowToBuild
drain = engine._on_drain


def slow_to_drain(environment, msg, **kwargs):
    if environment.runner.worker_index == 0:
        stall({drain_s})
    drain(environment, msg, **kwargs)


engine._on_drain = slow_to_drain
"""


@pytest.mark.slow  # ~25 s: two stalls longer than Locust's ~4 s to mark a worker missing
def test_starved_workers_lose_no_call_and_start_the_phases_when_they_can_call(
        endpoint: FakeEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both workers take longer to build their boto3 client than the whole plan lasts, and long
    # enough for Locust to mark them missing; then worker 0 is silent for 7 s when told to drain
    # (missing again, while its last calls are not sent yet). Neither is a dead worker.
    locustfile = tmp_path / "starved_locustfile.py"
    locustfile.write_text(STARVED_LOCUSTFILE.format(build_s=6, drain_s=7))
    monkeypatch.setattr(locust_run, "LOCUSTFILE", locustfile)
    out = tmp_path / "report"
    # Four seconds of calls: on a starved machine a worker's first call, once its users are
    # spawned, can come seconds after the phase began.
    assert main(_args(endpoint, tmp_path, out, "--processes", "2", "--no-png",
                      phases=["2:4"])) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["stop_reason"] == "phases complete"
    # The phases ran once the workers could call, and every call is in the report.
    assert report["invocations"] == endpoint.total > 0
    assert "2 worker(s)" in report["generator"]


@pytest.mark.slow  # ~20 s: Locust marks a worker missing after ~10 s without heartbeat
def test_a_worker_that_dies_is_reported_and_the_run_keeps_what_was_measured(
        endpoint: FakeEndpoint, tmp_path: Path) -> None:
    port = free_port()
    workers = [_worker(port), _worker(port)]
    out = tmp_path / "report"
    master = subprocess.Popen(
        [sys.executable, "-m", "mme", *_args(endpoint, tmp_path, out, "--master",
                                             "--expect-workers", "2", "--master-bind-port",
                                             str(port), "--no-png", phases=["4:0:300"])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_until(lambda: endpoint.total >= 50, 120, "traffic from both workers")
        os.killpg(workers[0].pid, signal.SIGKILL)  # the worker and its Locust process
        stdout, stderr = master.communicate(timeout=120)
    finally:
        for process in (master, *workers):
            _stop(process)
    assert master.returncode == 1, stderr
    assert "Traceback" not in stderr
    report = json.loads((out / "report.json").read_text())
    assert report["stop_reason"].startswith("aborted: worker ")
    assert "stopped reporting" in report["stop_reason"]
    assert [e for e in report["events"] if e["kind"] == "worker"]
    assert report["duration_s"] < 300
    # What the workers sent: the dead one's last second may be lost, nothing is counted twice.
    assert 50 <= report["invocations"] <= endpoint.total
    assert "| stop reason | aborted: worker" in stdout


@pytest.mark.parametrize("error", ["no DurationInSeconds", "negative users", "not JSON"])
def test_a_plan_with_an_error_is_refused_before_any_load(
        endpoint: FakeEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        error: str) -> None:
    phase: dict[str, Any] = {"InitialNumberOfUsers": 1, "DurationInSeconds": 5}
    if error == "no DurationInSeconds":
        del phase["DurationInSeconds"]
    if error == "negative users":
        phase["InitialNumberOfUsers"] = -2
    config = tmp_path / "job.json"
    config.write_text("{oops" if error == "not JSON" else json.dumps(
        {"TrafficPattern": {"TrafficType": "PHASES", "Phases": [phase]}}))
    out = tmp_path / "report"
    for extra in ([], ["--processes", "2"], ["--master", "--expect-workers", "2"]):
        code = main(_args(endpoint, tmp_path, out, "--config", str(config), *extra, phases=[]))
        assert code == 2
        message = capsys.readouterr().err
        assert f"mme loadtest: {config}:" in message and "Traceback" not in message
    assert endpoint.total == 0 and not out.exists()


def test_the_takeaway_locustfile_runs_a_plan_with_plain_locust(
        endpoint: FakeEndpoint, tmp_path: Path) -> None:
    spec = tmp_path / "plan.json"
    assert main(_args(endpoint, tmp_path, tmp_path / "unused", "--write-spec", str(spec),
                      phases=["2:0:2"])) == 0
    assert endpoint.total == 0  # writing the plan sends nothing
    run = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--mme-plan",
         str(spec), "--mme-report", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["invocations"] == endpoint.total > 0
    assert report["stop_reason"] == "phases complete"
    assert (tmp_path / "report" / "report.png").is_file()

    # A spec with an error: refused by the locustfile itself, before any load.
    data = json.loads(spec.read_text())
    data["plan"]["TrafficPattern"]["Phases"][0]["DurationInSeconds"] = -1
    spec.write_text(json.dumps(data))
    before = endpoint.total
    bad = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--mme-plan",
         str(spec)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "DurationInSeconds must be positive" in bad.stderr
    assert endpoint.total == before


def test_the_web_ui_serves_while_the_plan_runs(endpoint: FakeEndpoint, tmp_path: Path) -> None:
    port = free_port()
    run = subprocess.Popen(
        [sys.executable, "-m", "mme", *_args(endpoint, tmp_path, tmp_path / "report", "--web",
                                             "--web-port", str(port), "--no-png",
                                             phases=["1:3"])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ui_answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        wait_until(ui_answers, 60, "Locust's web UI")
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, stderr  # closed by itself when the plan ended
    assert "users    1" in stderr and "calls/s" in stderr  # the progress line, every 2 s
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["invocations"] == endpoint.total > 0


@pytest.mark.slow
def test_the_benchmark_prints_each_engine(capsys: pytest.CaptureFixture[str]) -> None:
    # Two seconds: on a loaded runner a Locust worker's users take most of one to build their
    # boto3 clients, and a one-second phase can end before the first call.
    assert main(["bench", "loadgen", "--users", "2", "--seconds", "2"]) == 0
    printed = capsys.readouterr().out
    for engine in ("asyncio + aiohttp (before Locust)", "Locust + boto3, 1 process",
                   "Locust + boto3, 2 processes"):
        row = next(line for line in printed.splitlines() if line.startswith(f"| {engine} |"))
        calls_per_s = float(row.split("|")[2])
        assert calls_per_s > 0 and row.endswith("| 0 |"), row  # calls, no errors


def test_aws_goes_where_boto3_is_configured_to_and_needs_a_region(
        endpoint: FakeEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    args = ["loadtest", "--aws", "--endpoint-name", "prod", "--target-model", "a.tar.gz",
            "--body", str(_body(tmp_path)), "--content-type", "application/json",
            "--phase", "1:1", "--out", str(tmp_path / "report"), "--no-png"]
    assert main(args) == 2
    assert "--aws: no AWS region" in capsys.readouterr().err and endpoint.total == 0
    # boto3's own configuration picks the endpoint (here the fake one), as for any client
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", endpoint.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", endpoint.url)  # no DescribeEndpoint: n/a
    monkeypatch.setenv("AWS_ENDPOINT_URL_APPLICATION_AUTO_SCALING", endpoint.url)
    assert main(args) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["invocations"] == endpoint.total > 0 and report["errors_by_code"] == {}
