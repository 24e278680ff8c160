"""The CI kit without a server: what `mme ci up` exports, budgets, golden cases, the recorder
of per-model figures, the page snapshot, `mme ci down` with nothing running, and the lint of
the action, workflows, compose files and docs recipes."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.budgets import (
    BudgetError,
    Call,
    compare,
    figures,
    parse_budgets,
    read_baseline,
    side_by_side,
    write_baseline,
)
from harness.golden_cases import check_case, load_case, write_case
from mme.ci.environment import ENDPOINT_VARIABLES, append_github, client_variables
from mme.ci.report import LiveData, page_snapshot
from mme.ci.stats import ModelStats
from mme.cli import build_parser
from tests.lint_ci_files import doc_snippets, lint

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]


def mme(argv: list[str]) -> int:
    """The command as `mme` runs it, minus the process-wide signal handler `main` installs."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


# -- what up exports ------------------------------------------------------------------------

def test_clients_get_every_endpoint_variable_a_region_and_dummy_keys(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}  # no credentials anywhere
    variables = client_variables("http://127.0.0.1:9", "eu-west-1", "off", tmp_path, env)
    assert [variables[name] for name in ENDPOINT_VARIABLES] == ["http://127.0.0.1:9"] * 4
    assert variables["AWS_REGION"] == variables["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert variables["AWS_ACCESS_KEY_ID"] and variables["AWS_SECRET_ACCESS_KEY"]
    assert variables["MME_STATE_DIR"] == str(tmp_path)
    assert variables["MME_CI_STATE"] == str(tmp_path)  # its former name, for workflows reading it


def test_the_state_folder_is_mme_state_dir_and_its_former_name_still_works(
        tmp_path: Path) -> None:
    from emulator.settings import DeprecatedVariable
    from mme.ci.state import default_state_dir

    assert default_state_dir({"MME_STATE_DIR": str(tmp_path)}) == tmp_path
    with pytest.warns(DeprecatedVariable, match="MME_CI_STATE is deprecated: set MME_STATE_DIR"):
        assert default_state_dir({"MME_CI_STATE": str(tmp_path)}) == tmp_path


@pytest.mark.parametrize("env", [
    {"AWS_PROFILE": "ci"}, {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"},
    {"AWS_WEB_IDENTITY_TOKEN_FILE": "/token"}], ids=["profile", "keys", "web-identity"])
def test_the_jobs_own_credentials_are_kept(tmp_path: Path, env: dict[str, str]) -> None:
    variables = client_variables("http://h:1", "us-east-1", "off", tmp_path,
                                 {"HOME": str(tmp_path), **env})
    assert "AWS_ACCESS_KEY_ID" not in variables


def test_a_default_profile_in_the_shared_files_counts_as_credentials(tmp_path: Path) -> None:
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIA\naws_secret_access_key = s\n")
    variables = client_variables("http://h:1", "us-east-1", "off", tmp_path,
                                 {"HOME": str(tmp_path)})
    assert "AWS_ACCESS_KEY_ID" not in variables


def test_no_dummy_keys_when_the_emulator_checks_signatures(tmp_path: Path) -> None:
    variables = client_variables("http://h:1", "us-east-1", "sigv4", tmp_path,
                                 {"HOME": str(tmp_path)})
    assert "AWS_ACCESS_KEY_ID" not in variables


def test_github_files_get_the_variables_and_the_endpoint_url_output(tmp_path: Path) -> None:
    env = {"GITHUB_ENV": str(tmp_path / "env"), "GITHUB_OUTPUT": str(tmp_path / "out")}
    (tmp_path / "env").write_text("EARLIER=1\n")
    written = append_github(env, {"A": "1", "MULTI": "x\ny"}, "http://h:1", tmp_path)
    assert written == ["GITHUB_ENV", "GITHUB_OUTPUT"]
    lines = (tmp_path / "env").read_text().splitlines()
    assert lines[:2] == ["EARLIER=1", "A=1"]  # appended, never overwritten
    assert lines[2].startswith("MULTI<<ghadelimiter_") and lines[3:5] == ["x", "y"]
    assert lines[5] == lines[2].split("<<")[1]
    assert "endpoint-url=http://h:1" in (tmp_path / "out").read_text().splitlines()


def test_up_refuses_a_taken_port_before_starting_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = mme(["ci", "up", "--state-dir", str(tmp_path), "--port", str(port)])
    assert code == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
    assert not (tmp_path / "server.json").exists()


def test_down_with_nothing_running_says_so_and_exits_0(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mme(["ci", "down", "--state-dir", str(tmp_path / "none"),
                 "--report", str(tmp_path / "report")]) == 0
    assert "no emulator started by mme ci up is running" in capsys.readouterr().err


# -- budgets --------------------------------------------------------------------------------

def test_budgets_parse_percent_and_absolute_allowances() -> None:
    budgets = parse_budgets("p99_latency=+20%, cold_load=+2s,p50_latency=5ms")
    assert [(b.figure, b.amount, b.unit) for b in budgets] == [
        ("p99_latency", 20, "%"), ("cold_load", 2, "s"), ("p50_latency", 5, "ms")]
    assert budgets[0].limit(10.0) == pytest.approx(12.0)
    assert budgets[1].limit(1.5) == pytest.approx(3.5)
    assert parse_budgets("p99_latency=+1s")[0].limit(10.0) == pytest.approx(1010.0)  # ms


@pytest.mark.parametrize("spec, says", [
    ("p98_latency=+20%", "FIGURE one of p50_latency, p99_latency, cold_load"),
    ("p99_latency=twenty", "+20% or +5ms or +2s"), ("", "empty")])
def test_a_bad_budget_says_what_to_write(spec: str, says: str) -> None:
    with pytest.raises(BudgetError, match=says.replace("+", r"\+")):
        parse_budgets(spec)


def _calls(model: str, latencies_us: list[float], cold_s: float | None = None) -> list[Call]:
    calls = [Call(model, us / 1e6 + 0.001, True, us, True) for us in latencies_us]
    if cold_s is not None:
        calls.insert(0, Call(model, cold_s, True, 500.0, False))
    return calls


def test_figures_use_the_model_latency_of_warm_calls_and_the_cold_calls_time() -> None:
    measured = figures(_calls("a.tar.gz", [1000.0] * 98 + [2000.0, 9000.0], cold_s=1.5)
                       + [Call("a.tar.gz", 0.01, False, None, None)])
    a = measured["a.tar.gz"]
    assert (a["calls"], a["errors"], a["latency_source"]) == (102, 1, "ModelLatency")
    assert (a["p50_latency"], a["p99_latency"], a["cold_load"]) == (1.0, 2.0, 1.5)
    # A real endpoint sends no emulator headers: the client's round trip, named as such.
    real = figures([Call("b", 0.020, True, None, None), Call("b", 0.030, True, None, None)])
    assert real["b"]["latency_source"] == "client" and real["b"]["p99_latency"] == 30.0


def test_a_breach_is_found_and_shown_side_by_side(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    write_baseline(base, figures(_calls("m", [1000.0] * 10, cold_s=2.0)))
    now = figures(_calls("m", [1500.0] * 10, cold_s=2.2) + _calls("new", [10.0]))
    verdicts = compare(read_baseline(base), now, parse_budgets("p99_latency=+20%,cold_load=+30%"))
    rows = {r.figure: r for r in verdicts["m"]}
    assert rows["p99_latency"].verdict == "breach" and rows["p99_latency"].change_pct == 50.0
    assert rows["cold_load"].verdict == "ok"
    assert {r.verdict for r in verdicts["new"]} == {"no baseline"}
    table = side_by_side("m", verdicts["m"])
    assert "p99_latency" in table and "1 ms" in table and "1.5 ms" in table
    assert "+50.0%" in table and "BREACH" in table and "1.2 ms" in table  # the limit


def test_latencies_of_different_sources_are_not_compared(tmp_path: Path) -> None:
    local = figures(_calls("m", [1000.0]))
    real = figures([Call("m", 0.05, True, None, None)])
    verdicts = compare(local, real, parse_budgets("p99_latency=+20%"))
    assert verdicts["m"][0].verdict == "not comparable"


def test_an_unreadable_baseline_says_how_to_record_one(tmp_path: Path) -> None:
    with pytest.raises(BudgetError, match="--mme-record-baseline"):
        read_baseline(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text(json.dumps({"models": []}))
    with pytest.raises(BudgetError, match="not a baseline"):
        read_baseline(tmp_path / "other.json")


# -- golden cases ---------------------------------------------------------------------------

def test_a_golden_case_mismatch_names_everything_a_reviewer_needs(tmp_path: Path) -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    expected = {"OUTPUT0": a + 1, "LABEL": np.array([b"x"], dtype=object)}
    path = write_case(tmp_path, "team/add.tar.gz", "2x4", {"INPUT0": a}, outputs=expected,
                      rtol=1e-6, atol=1e-6)
    case = load_case(tmp_path, path)
    assert (case.model, case.name, case.rtol) == ("team/add.tar.gz", "2x4", 1e-6)
    assert check_case(case, expected, update=False, digest=None).outcome == "matched"
    got = {"OUTPUT0": (a + 1).copy(), "LABEL": np.array([b"x"], dtype=object)}
    got["OUTPUT0"][1, 2] += 0.5
    result = check_case(case, got, update=False, digest=None)
    assert result.outcome == "mismatch"
    message = result.message
    for part in ("golden team/add.tar.gz/2x4", "rtol=1e-06, atol=1e-06", "OUTPUT0:",
                 "1/8 elements differ", "max abs error 0.5 at [1, 2]", "max rel error",
                 "shape [2, 4], dtype float32", "cosine similarity 0.99",
                 "worst element [1, 2]: expected 7, got 7.5"):
        assert part in message, (part, message)


def test_a_case_without_outputs_is_recorded_by_update(tmp_path: Path) -> None:
    path = write_case(tmp_path, "m.tar.gz", "c", {"X": np.ones(2, np.float32)})
    case = load_case(tmp_path, path)
    missing = check_case(case, {"Y": np.ones(2)}, update=False, digest=None)
    assert missing.outcome == "mismatch" and "--mme-update-goldens" in missing.message
    assert check_case(case, {"Y": np.ones(2)}, update=True, digest="sha256:1").outcome == \
        "recorded"
    again = load_case(tmp_path, path)
    assert list(again.outputs) == ["Y"] and again.meta["model_digest"] == "sha256:1"
    stale = check_case(again, {"Y": np.zeros(2)}, update=False, digest="sha256:2")
    assert stale.outcome == "stale" and "STALE" in stale.message


# -- per-model figures in the server --------------------------------------------------------

def test_the_recorder_keeps_latency_cold_loads_and_errors_per_model(tmp_path: Path) -> None:
    stats = ModelStats()
    hit = [(b"X-Mme-Model-Latency-Us", b"1500"), (b"X-Mme-Model-Cache-Hit", b"1")]
    stats.record("a", 200, [(b"X-Mme-Model-Latency-Us", b"900"),
                            (b"X-Mme-Model-Cache-Hit", b"0")], 1.25)
    for _ in range(3):
        stats.record("a", 200, hit, 0.002)
    stats.record("a", 424, [(b"x-amzn-ErrorType", b"ModelError")], 0.1)
    stats.record("b", 400, [(b"x-amzn-ErrorType", b"ValidationError")], 0.01)
    stats.dump(tmp_path / "s.json")
    models = json.loads((tmp_path / "s.json").read_text())["Models"]
    a = models["a"]
    assert (a["calls"], a["ok"], a["cold_loads"], a["cold_load_s"]) == (5, 4, 1, [1.25])
    assert a["model_latency_p99_ms"] == 1.5 and a["server_p99_ms"] == 2.0  # warm calls only
    assert a["errors"] == {"ModelError": 1} and models["b"]["errors"] == {"ValidationError": 1}


def test_the_recorder_sees_both_ways_an_invocation_is_answered() -> None:
    """The ASGI chain and the direct path (no ASGI, auth off) are both watched."""
    import asyncio

    class App:
        async def front(self, scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"x-mme-model-cache-hit", b"1")]})
            await send({"type": "http.response.body", "body": b"{}"})

        async def direct_invocations(self, scope: Any, body_source: Any) -> Any:
            return 424, [(b"x-amzn-errortype", b"ModelError")], b"{}"

    app = App()
    stats = ModelStats()
    stats.install(app)
    scope = {"type": "http", "path": "/endpoints/local/invocations",
             "headers": [(b"x-amzn-sagemaker-target-model", b"m.tar.gz")]}

    async def calls() -> None:
        async def send(_message: Any) -> None:
            return None

        await app.front(scope, None, send)  # type: ignore[call-arg, arg-type]
        await app.direct_invocations(scope, None)  # type: ignore[call-arg, arg-type]
        await app.front({**scope, "path": "/_emulator/models"}, None,  # type: ignore[call-arg]
                        send)

    asyncio.run(calls())
    summary = stats.summary()
    assert list(summary) == ["m.tar.gz"]
    assert summary["m.tar.gz"]["calls"] == 2 and summary["m.tar.gz"]["errors"] == \
        {"ModelError": 1}


# -- the page snapshot ----------------------------------------------------------------------

def test_the_page_snapshot_inlines_its_parts_and_links_the_report_files() -> None:
    from importlib import resources

    static = resources.files("emulator.page").joinpath("static")
    state = {"Time": 1.0, "Endpoints": {}, "Timeline": {"Buckets": [], "BucketSeconds": 10},
             "Events": [], "Errors": [{"message": "</script><b>x"}]}
    data = LiveData(files={"index.html": static.joinpath("index.html").read_bytes(),
                           "app.js": static.joinpath("app.js").read_bytes(),
                           "style.css": static.joinpath("style.css").read_bytes(),
                           "page-state.json": json.dumps(state).encode()})
    html = page_snapshot(data)
    assert html is not None
    assert 'src="/' not in html and 'href="/' not in html  # nothing to fetch
    assert 'href="models.json"' in html and 'href="metrics.prom"' in html
    assert "window.EventSource = SnapshotSource" in html
    assert "</script><b>" not in html  # a name in the state cannot end the script
    assert page_snapshot(LiveData()) is None


# -- the lint of the CI files ---------------------------------------------------------------

def test_the_docs_recipes_are_all_linted() -> None:
    kinds = [kind for kind, _ in doc_snippets((ROOT / "docs" / "ci.md").read_text())]
    assert sorted(set(kinds)) == ["buildkite", "github-workflow", "gitlab-ci"]


def test_the_ci_files_pass_and_a_broken_recipe_fails(tmp_path: Path) -> None:
    assert lint(ROOT)
    docs = tmp_path / "ci.md"
    docs.write_text("<!-- lint: gitlab-ci -->\n```yaml\njob:\n  script: 5\n  artifacts: [x]\n```\n")
    assert not lint(tmp_path, docs)
    docs.write_text("<!-- lint: github-workflow -->\n```yaml\non: push\njobs:\n  a:\n"
                    "    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ nope }}\n```\n")
    assert not lint(tmp_path, docs)


# -- the plugin's collection of golden cases ------------------------------------------------


def test_golden_cases_are_collected_beside_testpaths_one_test_each(
        pytester: pytest.Pytester) -> None:
    for case in ("small", "large"):
        write_case(pytester.path / "goldens", "team/m.tar.gz", case, {"X": np.ones(1)})
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    pytester.makeini("[pytest]\ntestpaths = tests\nmme_goldens = goldens\n")
    listed = pytester.runpytest("--collect-only", "-q")
    listed.stdout.fnmatch_lines(["tests/test_a.py::test_a",
                                 "goldens/team/m.tar.gz/large.npz::golden?team/m.tar.gz/large?",
                                 "goldens/team/m.tar.gz/small.npz::golden?team/m.tar.gz/small?"])
    only = pytester.runpytest("--collect-only", "-q", "tests/test_a.py")
    assert "golden" not in only.stdout.str()  # an explicit path runs just what it names
    missing = pytester.runpytest("--mme-goldens", "nowhere")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*--mme-goldens nowhere: no such folder*"])


def test_a_baseline_without_a_budget_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--mme-baseline", "base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mme-baseline FILE and --mme-budget SPEC go together*"])
