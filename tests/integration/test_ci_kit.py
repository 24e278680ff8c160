"""The CI kit end to end, run as a GitHub runner runs the action's steps.

Each step is its own process in a workspace, with the runner's files (``$GITHUB_ENV``,
``$GITHUB_OUTPUT``, ``$GITHUB_STEP_SUMMARY``) and, as the runner does, the variables earlier
steps appended to ``$GITHUB_ENV`` in its environment: ``mme ci up`` (the action's step), plain
boto3 and SageMaker SDK v2 code with no endpoint_url, pytest with golden cases and budgets
against a baseline (``--junitxml``), then ``mme ci down --report``. The summary, the report and
the JUnit file are read as a reviewer would; nothing may be left running.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from harness.examples.add_model import write_add_repository
from harness.golden_cases import write_case
from harness.model_store import package_repository
from mme.ci.cli import FAILED_START_GRACE_S
from mme.ci.processes import stop_tree, tree
from mme.ci.state import process_start_ticks
from tests.page_support import CHROMIUM, FLAGS
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
TARGET = "add.tar.gz"
A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.full((2, 4), 0.5, dtype=np.float32)


def processes_under(folder: Path) -> list[int]:
    """Live processes whose command line names ``folder`` (the server, its Tritons, stubs)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        pid = int(cmdline.parent.name)
        if str(folder) in text and pid != os.getpid() and process_start_ticks(pid) is not None:
            found.append(pid)
    return found


class Runner:
    """A GitHub runner's job: a workspace, its files, and steps run as processes."""

    def __init__(self, root: Path) -> None:
        self.workspace = root / "workspace"
        self.temp = root / "runner-temp"
        self.files = {name: root / name.lower() for name in
                      ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
        for path in (self.workspace, self.temp, root / "home"):
            path.mkdir(parents=True, exist_ok=True)
        for path in self.files.values():
            path.write_text("")
        # The job's own environment: no AWS settings, no emulator settings, an empty home.
        self.base = {k: v for k, v in os.environ.items()
                     if not k.startswith(("AWS_", "MME_", "GITHUB_", "PYTEST_"))}
        self.base.update({name: str(path) for name, path in self.files.items()})
        self.base.update({"RUNNER_TEMP": str(self.temp), "HOME": str(root / "home"),
                          "GITHUB_WORKSPACE": str(self.workspace), "CI": "true",
                          "AWS_EC2_METADATA_DISABLED": "true",
                          "SAGEMAKER_SUPPRESS_V2_WARNING": "1"})

    def env_file(self) -> dict[str, str]:
        """``$GITHUB_ENV`` as the runner reads it (``NAME=value`` and ``NAME<<DELIMITER``)."""
        values: dict[str, str] = {}
        lines = iter(self.files["GITHUB_ENV"].read_text().splitlines())
        for line in lines:
            if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
                name, delimiter = line.split("<<", 1)
                body = []
                for more in lines:
                    if more == delimiter:
                        break
                    body.append(more)
                values[name] = "\n".join(body)
            elif "=" in line:
                name, value = line.split("=", 1)
                values[name] = value
        return values

    def outputs(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in
                    self.files["GITHUB_OUTPUT"].read_text().splitlines() if "=" in line)

    def step(self, *command: str, timeout_s: float = 600,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(command), cwd=self.workspace, capture_output=True, text=True,
                              env={**self.base, **self.env_file(), **(env or {})},
                              timeout=timeout_s)

    def action_step(self, step_id: str, inputs: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """A step of ``action.yml`` as the runner runs a composite action's ``run:`` step:
        ``${{ inputs.* }}`` filled in (given, else the input's default), ``bash -e -o pipefail``,
        ``GITHUB_ACTION_PATH`` the action's folder, this interpreter's ``python3`` first on PATH
        (the install step's ``pip install`` is the one step not run: the package is installed)."""
        action = yaml.safe_load((ROOT / "action.yml").read_text())
        step = next(s for s in action["runs"]["steps"] if s.get("id") == step_id)
        values = {name: inputs.get(name, spec.get("default", ""))
                  for name, spec in action["inputs"].items()}

        def fill(text: str) -> str:
            return re.sub(r"\$\{\{\s*inputs\.([a-z-]+)\s*\}\}", lambda m: values[m[1]], text)

        env = {name: fill(str(value)) for name, value in step.get("env", {}).items()}
        env["GITHUB_ACTION_PATH"] = str(ROOT)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.base.get('PATH', '')}"
        assert step["shell"] == "bash"
        return self.step("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                         step["run"], env=env)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    job = Runner(tmp_path)
    yield job
    left = processes_under(tmp_path)
    for pid in left:  # never leave a server behind, even when the test failed half-way
        ticks = process_start_ticks(pid)
        if ticks is not None:
            stop_tree((pid, ticks), 5.0)
    assert not left, f"processes left running: {left}"


def _store(workspace: Path) -> Path:
    models = workspace / "models"
    models.mkdir()
    package_repository(write_add_repository(workspace / "repos" / "add"), models / TARGET)
    return models


CLIENT_STEP = """\
import json
import boto3
from botocore.exceptions import ClientError

body = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
    {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [1, 1, 1, 1]}]})
runtime = boto3.client("sagemaker-runtime")  # no endpoint_url, no region, no keys in code
sums = []
for _ in range(4):
    answer = runtime.invoke_endpoint(EndpointName="local", TargetModel="add.tar.gz",
                                     ContentType="application/json", Body=body)
    sums.append(json.loads(answer["Body"].read())["outputs"][0]["data"])
try:
    runtime.invoke_endpoint(EndpointName="local", TargetModel="missing.tar.gz",
                            ContentType="application/json", Body=body)
    missing = None
except ClientError as error:
    missing = error.response["Error"]["Code"]

import sagemaker
from sagemaker.deserializers import JSONDeserializer
from sagemaker.predictor import Predictor
from sagemaker.serializers import JSONSerializer

predictor = Predictor("local", sagemaker_session=sagemaker.Session(),
                      serializer=JSONSerializer(), deserializer=JSONDeserializer())
sdk = predictor.predict(json.loads(body), target_model="add.tar.gz")["outputs"][1]["data"]
endpoints = [e["EndpointName"] for e in boto3.client("sagemaker").list_endpoints()["Endpoints"]]
print(json.dumps({"sums": sums, "missing": missing, "sdk": sdk, "endpoints": endpoints}))
"""

BOTO3_CALLS = CLIENT_STEP.split("try:")[0]  # the first part alone: four InvokeEndpoint calls


def _suite(workspace: Path) -> Path:
    """A team's suite: two golden cases of the model (one broken on purpose), a baseline of the
    base branch the pull request is far slower than."""
    suite = workspace / "suite"
    goldens = suite / "goldens"
    inputs = {"INPUT0": A, "INPUT1": B}
    write_case(goldens, TARGET, "2x4", inputs, outputs={"OUTPUT0": A + B, "OUTPUT1": A - B},
               rtol=1e-6, atol=1e-6)
    broken = A + B
    broken[1, 2] += 0.25  # the "recorded" output the model no longer gives
    write_case(goldens, TARGET, "drifted", inputs,
               outputs={"OUTPUT0": broken, "OUTPUT1": A - B}, rtol=1e-6, atol=1e-6)
    (suite / "pytest.ini").write_text("[pytest]\nmme_goldens = goldens\n")
    (suite / "base.json").write_text(json.dumps({"format": 1, "models": {TARGET: {
        "latency_source": "ModelLatency", "p99_latency": 0.001, "cold_load": 0.0001}}}))
    return suite


def test_the_action_steps_on_a_github_runner(runner: Runner) -> None:
    store = _store(runner.workspace)
    suite = _suite(runner.workspace)

    # 1. The action's own step (port 0: any free port), as the runner runs it.
    up = runner.action_step("up", {"model-data": str(store), "port": "0",
                                   "serve-args": "--max-loaded-models 4  --log-level INFO"})
    assert up.returncode == 0, up.stderr
    exported = runner.env_file()
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["outputs"]["endpoint-url"]["value"] == "${{ steps.up.outputs.endpoint-url }}"
    url = runner.outputs()["endpoint-url"]
    assert url.startswith("http://127.0.0.1:")
    for api in ("SAGEMAKER_RUNTIME", "SAGEMAKER", "APPLICATION_AUTO_SCALING", "CLOUDWATCH"):
        assert exported[f"AWS_ENDPOINT_URL_{api}"] == url
    assert exported["AWS_REGION"] == "us-east-1" and exported["AWS_ACCESS_KEY_ID"]
    assert exported["MME_STATE_DIR"] == str(runner.temp / "mme-ci")
    record = json.loads((runner.temp / "mme-ci" / "server.json").read_text())
    assert process_start_ticks(record["pid"]) is not None, "the server did not outlive up"
    cmdline = Path(f"/proc/{record['pid']}/cmdline").read_bytes().split(b"\0")
    assert cmdline[cmdline.index(b"--max-loaded-models"):][:2] == [b"--max-loaded-models", b"4"]

    # 2. Unmodified boto3 and SageMaker SDK v2 code.
    client = runner.step(sys.executable, "-c", CLIENT_STEP)
    assert client.returncode == 0, client.stderr
    seen = json.loads(client.stdout.strip().splitlines()[-1])
    assert seen["sums"] == [[2.0, 3.0, 4.0, 5.0]] * 4 and seen["sdk"] == [0.0, 1.0, 2.0, 3.0]
    assert seen["missing"] == "ValidationError" and seen["endpoints"] == ["local"]

    # 3. The base branch's measurement (here: the passing case alone), then the pull request's
    #    run: goldens and budgets, JUnit.
    base = runner.step(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                       str(suite), "--rootdir", str(suite), "-c", str(suite / "pytest.ini"),
                       "-k", "2x4", "--mme-url", exported["MME_CI_URL"],
                       "--mme-record-baseline", str(suite / "recorded.json"))
    assert base.returncode == 0, base.stdout + base.stderr
    recorded = json.loads((suite / "recorded.json").read_text())["models"][TARGET]
    assert (recorded["calls"], recorded["latency_source"]) == (1, "ModelLatency")
    assert recorded["p50_latency"] > 0 and recorded["p99_latency"] >= recorded["p50_latency"]
    tests = runner.step(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                        str(suite), "--rootdir", str(suite), "-c", str(suite / "pytest.ini"),
                        "--mme-url", exported["MME_CI_URL"],
                        "--mme-baseline", str(suite / "base.json"),
                        "--mme-budget", "p99_latency=+20%,cold_load=+30%",
                        "--junitxml", str(suite / "junit.xml"))
    assert tests.returncode == 1, tests.stdout + tests.stderr  # a golden and a budget fail
    cases = {c.get("name"): c for c in ElementTree.parse(suite / "junit.xml").iter("testcase")}
    assert set(cases) == {f"golden[{TARGET}/2x4]", f"golden[{TARGET}/drifted]",
                          f"budget[{TARGET}]"}
    assert cases[f"golden[{TARGET}/2x4]"].find("failure") is None
    golden = cases[f"golden[{TARGET}/drifted]"].find("failure")
    assert golden is not None
    for part in (f"golden {TARGET}/drifted", "tolerance rtol=1e-06, atol=1e-06",
                 "OUTPUT0: 1/8 elements differ", "max abs error 0.25 at [1, 2]",
                 "max rel error", "shape [2, 4], dtype float32", "cosine similarity",
                 "worst element [1, 2]: expected 6.75, got 6.5"):
        assert part in (golden.text or ""), (part, golden.text)
    budget = cases[f"budget[{TARGET}]"].find("failure")
    assert budget is not None
    text = budget.text or ""
    assert f"{TARGET} is over budget (p99_latency" in text and "BREACH" in text
    assert "0.001 ms" in text and "+20%" in text and "0.0012 ms" in text  # base, budget, limit
    assert cases[f"budget[{TARGET}]"].get("classname") == "mme-budgets"

    # 4. The action's README step: mme ci down --report, if: always().
    servers = processes_under(runner.temp)
    assert servers, "no server or Triton found under the runner's temp folder"
    down = runner.step(sys.executable, "-m", "mme", "ci", "down", "--report", "mme-report")
    assert down.returncode == 0, down.stderr
    assert "stopped cleanly" in down.stderr
    assert processes_under(runner.temp) == [] and tree(record["pid"]) == []
    assert not (runner.temp / "mme-ci").exists()  # its state folder: nothing is left behind

    report = runner.workspace / "mme-report"
    assert "ready on" in (report / "server.log").read_text()
    models = json.loads((report / "models.json").read_text())["Endpoints"]["local"]["Models"]
    assert [(m["TargetModel"], m["State"]) for m in models if m["TargetModel"] == TARGET] == \
        [(TARGET, "loaded")]
    invocations = json.loads((report / "metrics.json").read_text())
    assert invocations["Endpoints"]["local"]["Metrics"]["Invocations"]["Sum"] >= 8
    assert "sagemaker_invocations_total{" in (report / "metrics.prom").read_text()
    stats = json.loads((report / "model-stats.json").read_text())["Models"]
    # boto3's 4, the SDK's 1, the goldens' 1 + 2: whatever the client, the server counted them
    assert stats[TARGET]["calls"] == 8 and stats[TARGET]["cold_loads"] == 1
    assert stats["missing.tar.gz"]["errors"] == {"ValidationError": 1}

    summary = runner.files["GITHUB_STEP_SUMMARY"].read_text()
    assert summary == (report / "summary.md").read_text() + "\n"
    assert "stopped cleanly" in summary
    row = next(line for line in summary.splitlines() if line.startswith(f"| `{TARGET}` | 8 |"))
    assert row.count("ms") >= 4 and "| 1 |" in row  # latencies, one cold load
    assert "**Errors by code:** ValidationError 1" in summary
    assert "### Goldens: 1 of 2 pass" in summary and "❌ mismatch" in summary
    assert "### Budgets against the base branch: 1 breached" in summary
    assert "❌ breach" in summary

    _page_opens_offline(report / "page.html")


def _page_opens_offline(page: Path) -> None:
    """The snapshot renders in a real browser from the file alone: no request leaves it."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium")
        return  # checked where chromium is installed (make test installs it)
    from playwright.sync_api import sync_playwright

    requested: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            tab = browser.new_page()

            def route(request_route: Any) -> None:
                if not request_route.request.url.startswith("file:"):
                    requested.append(request_route.request.url)
                    request_route.abort()
                else:
                    request_route.continue_()

            tab.route("**/*", route)
            tab.goto(page.as_uri())
            tab.wait_for_selector(f'tr.model[data-model="{TARGET}"][data-state="loaded"]',
                                  timeout=60_000)
            tab.wait_for_selector('#connection[data-snapshot="true"]', timeout=60_000)
            assert "ValidationError" in tab.inner_text("#errors")
        finally:
            browser.close()
    assert requested == []


# -- up fails fast, with the reason, and leaves nothing ---------------------------------------

def test_up_with_a_bad_model_store_fails_with_the_servers_reason(runner: Runner) -> None:
    up = runner.step(sys.executable, "-m", "mme", "ci", "up", "--model-data", "no-such-folder",
                     "--port", "0")
    assert up.returncode == 2
    assert "the emulator exited with status 2 while starting" in up.stderr
    assert "--model-data no-such-folder: no such folder" in up.stderr  # the log's last line
    assert up.stdout == "" and runner.env_file() == {} and runner.outputs() == {}
    assert not (runner.temp / "mme-ci" / "server.json").exists()
    down = runner.step(sys.executable, "-m", "mme", "ci", "down", "--report", "mme-report")
    assert down.returncode == 0 and "no emulator started by mme ci up is running" in down.stderr
    assert "no-such-folder" in (runner.workspace / "mme-report" / "server.log").read_text()
    assert not (runner.temp / "mme-ci").exists()


def test_up_with_a_server_that_never_serves_gives_up_and_stops_it(runner: Runner) -> None:
    """An external Triton that accepts connections and never answers: the emulator waits for
    it and never serves; up stops it after --ready-timeout and says where it was."""
    # Long enough for the server to log how far it got even on a loaded runner (its imports
    # alone took over 2 s on a 2-core machine running the suite beside other work).
    ready_timeout_s = 15.0
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        up = runner.step(sys.executable, "-m", "mme", "ci", "up", "--model-data",
                         str(_store(runner.workspace)), "--port", "0",
                         "--launcher", "external",
                         "--triton-url", f"http://127.0.0.1:{silent.getsockname()[1]}",
                         "--ready-timeout", str(ready_timeout_s))
        elapsed = time.monotonic() - started
    assert up.returncode == 1
    assert "did not answer http://127.0.0.1:" in up.stderr
    assert f"/ping within {ready_timeout_s:g} s" in up.stderr
    assert "serving endpoint 'local'" in up.stderr  # the log's last lines say how far it got
    # Far sooner than the server's own wait for its Triton: the timeout, the grace, start-up.
    assert elapsed < ready_timeout_s + FAILED_START_GRACE_S + 30
    assert processes_under(runner.temp) == []
    assert not (runner.temp / "mme-ci" / "server.json").exists()
    assert runner.env_file() == {}


def test_eval_up_elsewhere_then_a_second_up_is_refused_and_down_twice_is_fine(
        runner: Runner) -> None:
    """Off GitHub: `eval "$(mme ci up ...)"` sets the variables in the shell that runs it."""
    store = str(_store(runner.workspace))
    first = runner.step(
        "bash", "-c", f'eval "$({sys.executable} -m mme ci up --model-data {store} --port 0)"'
        ' && echo "$AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME $AWS_REGION $MME_CI_URL"',
        env={"GITHUB_ENV": "", "GITHUB_OUTPUT": ""})
    assert first.returncode == 0, first.stderr
    url, region, again_url = first.stdout.split()
    assert url.startswith("http://127.0.0.1:") and region == "us-east-1" and again_url == url
    assert runner.env_file() == {}  # not a GitHub step: its files are left alone
    second = runner.step(sys.executable, "-m", "mme", "ci", "up", "--model-data", store,
                         "--port", "0")
    assert second.returncode == 2 and "already runs at" in second.stderr
    assert runner.step(sys.executable, "-m", "mme", "ci", "down").returncode == 0
    again = runner.step(sys.executable, "-m", "mme", "ci", "down")
    assert again.returncode == 0 and "nothing to stop" in again.stderr
    assert processes_under(runner.temp) == []


def test_a_server_that_died_during_the_job_fails_down_with_its_log(runner: Runner) -> None:
    up = runner.step(sys.executable, "-m", "mme", "ci", "up", "--port", "0")
    assert up.returncode == 0, up.stderr
    record = json.loads((runner.temp / "mme-ci" / "server.json").read_text())
    os.kill(record["pid"], 9)  # the server crashes mid-job
    wait_until(lambda: process_start_ticks(record["pid"]) is None, 30, "the killed server gone")
    down = runner.step(sys.executable, "-m", "mme", "ci", "down", "--report", "mme-report")
    assert down.returncode == 1
    assert "had already stopped before `mme ci down` (killed or crashed" in down.stderr
    assert "ready on" in (runner.workspace / "mme-report" / "server.log").read_text()
    summary = runner.files["GITHUB_STEP_SUMMARY"].read_text()
    assert "No per-model figures" in summary


def test_a_server_that_does_not_stop_in_time_is_killed_and_down_fails(runner: Runner) -> None:
    up = runner.step(sys.executable, "-m", "mme", "ci", "up", "--model-data",
                     str(_store(runner.workspace)), "--port", "0")
    assert up.returncode == 0, up.stderr
    record = json.loads((runner.temp / "mme-ci" / "server.json").read_text())
    # The model loaded: the server has a Triton (and its stub) to stop as well.
    client = runner.step(sys.executable, "-c", BOTO3_CALLS)
    assert client.returncode == 0, client.stderr
    assert len(tree(record["pid"])) > 1
    down = runner.step(sys.executable, "-m", "mme", "ci", "down", "--stop-timeout", "0")
    assert down.returncode == 1
    assert "did not stop within 0 s of SIGTERM and was killed" in down.stderr
    assert processes_under(runner.temp) == []
