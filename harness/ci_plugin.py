"""pytest plugin, CI part: golden cases as test cases, budgets against the base branch.

Loaded through the ``pytest11`` entry point ``mme-ci``, beside ``harness.pytest_plugin`` (whose
``mme_endpoint`` fixture it uses). Options:

- ``--mme-goldens DIR`` (ini ``mme_goldens``): every ``DIR/<TargetModel>/<case>.npz`` is a test
  ``golden[<TargetModel>/<case>]`` (``harness.golden_cases``), so ``--junitxml`` has one test case
  per model x golden with a readable mismatch message;
- ``--mme-record-baseline FILE``: write this run's per-model latency and cold-load figures
  (``harness.budgets``), on the base branch;
- ``--mme-baseline FILE --mme-budget "p99_latency=+20%,cold_load=+30%"``: compare this run with
  them. Each model is one more test case, ``mme-budgets::budget[<TargetModel>]``, reported at the
  end of the session (after every test, on the xdist controller too: each test's timed calls
  travel with its report); a breach fails it, and the run, with the figures side by side.

Golden results and budget verdicts also go to the CI job (``harness.ci_results``), except from
a run that only records a baseline (the base branch's: not the pull request's verdict).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from harness.budgets import Budget, CallRecorder

BUDGET_FILE = "mme-budgets"


_SESSION = pytest.StashKey["_Session"]()
_CASE = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mme", "SageMaker multi-model endpoint emulator")
    group.addoption("--mme-goldens", default=None, metavar="DIR",
                    help="folder of golden cases DIR/<TargetModel>/<case>.npz: each is a test")
    group.addoption("--mme-record-baseline", default=None, metavar="FILE",
                    help="write this run's per-model latency and cold-load figures (base branch)")
    group.addoption("--mme-baseline", default=None, metavar="FILE",
                    help="compare this run's figures with a baseline (needs --mme-budget)")
    group.addoption("--mme-budget", default=None, metavar="SPEC",
                    help='how much worse than the baseline is accepted, e.g. '
                         '"p99_latency=+20%%,cold_load=+30%%" (also p50_latency; +Nms, +Ns)')
    parser.addini("mme_goldens", "folder of golden cases (see --mme-goldens)", type="paths",
                  default=[])


def _goldens_dirs(config: pytest.Config) -> list[Path]:
    found = config.stash.get(_GOLDENS_DIRS, None)
    if found is None:  # asked for every file collected: read the options once
        option = config.getoption("mme_goldens", default=None)
        found = [Path(option).absolute()] if option else \
            [Path(p).absolute() for p in config.getini("mme_goldens")]
        config.stash[_GOLDENS_DIRS] = found
    return found


_GOLDENS_DIRS = pytest.StashKey[list[Path]]()


def pytest_configure(config: pytest.Config) -> None:
    from harness.budgets import BudgetError, parse_budgets, read_baseline

    session = _Session(config)
    config.stash[_SESSION] = session
    baseline, spec = config.getoption("mme_baseline"), config.getoption("mme_budget")
    if bool(baseline) != bool(spec):
        raise pytest.UsageError(
            "--mme-baseline FILE and --mme-budget SPEC go together: the figures of the base "
            "branch and how much worse is accepted, e.g. --mme-baseline base.json "
            "--mme-budget \"p99_latency=+20%,cold_load=+30%\"")
    if baseline:
        try:
            session.budgets = parse_budgets(str(spec))
            session.baseline = read_baseline(Path(baseline))
        except BudgetError as exc:
            raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(session, "mme-ci-session")
    _collect_goldens_too(config)


def _collect_goldens_too(config: pytest.Config) -> None:
    """The goldens folder is collected even when it is not under the paths pytest was given by
    ``testpaths`` or by default, or when ``--mme-goldens`` names it; explicit paths with only
    the ini option (``pytest tests/test_one.py``) run just what they name."""
    option = config.getoption("mme_goldens")
    if option and not Path(option).is_dir():
        raise pytest.UsageError(f"--mme-goldens {option}: no such folder; create it with "
                                "harness.golden_cases.write_case (DIR/<TargetModel>/<case>.npz)")
    if not option and config.args_source == pytest.Config.ArgsSource.ARGS:
        return
    covered = [Path(arg.split("::")[0]).absolute() for arg in config.args]
    for folder in _goldens_dirs(config):
        if folder.is_dir() and not any(c == folder or c in folder.parents for c in covered):
            config.args.append(str(folder))


# -- golden cases ---------------------------------------------------------------------------

class GoldenCaseItem(pytest.Function):
    """A test function (so it gets fixtures: ``mme_endpoint``) named by its case file."""

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class GoldenCaseFile(pytest.File):
    """One ``.npz`` golden case: one test."""

    def collect(self) -> Iterator[pytest.Item]:
        from harness.golden_cases import case_identity

        root = next(d for d in _goldens_dirs(self.config) if d in self.path.parents)
        model, name = case_identity(root, self.path)
        item = GoldenCaseItem.from_parent(self, name=f"golden[{model}/{name}]",
                                          callobj=_golden_test)
        item.stash[_CASE] = (root, self.path)
        yield item


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix != ".npz" or file_path.name.endswith(".tmp.npz"):
        return None
    if any(d in file_path.parents for d in _goldens_dirs(parent.config)):
        return GoldenCaseFile.from_parent(parent, path=file_path)
    return None


def _golden_test(request: pytest.FixtureRequest, mme_endpoint: Any) -> None:
    """Invoke the case's TargetModel with its inputs; compare (or record) every output."""
    from harness.golden_cases import check_case, load_case

    root, path = request.node.stash[_CASE]
    try:
        case = load_case(root, path)
    except ValueError as exc:
        message = str(exc)
    else:
        outputs = mme_endpoint.invoke(case.model, case.inputs)
        update = bool(request.config.getoption("mme_update_goldens", default=False))
        result = check_case(case, outputs, update=update,
                            digest=mme_endpoint.digests.get(case.model))
        request.node.stash[_GOLDEN_RESULT] = {"model": case.model, "case": case.name,
                                              "outcome": result.outcome,
                                              "message": result.message}
        if result.outcome in ("matched", "recorded", "updated"):
            return
        message = result.message
    request.node.stash.setdefault(_GOLDEN_RESULT, {
        "model": path.parent.name, "case": path.stem, "outcome": "error", "message": message})
    pytest.fail(message, pytrace=False)


_GOLDEN_RESULT = pytest.StashKey[dict[str, Any]]()


# -- the session: timing calls, gathering results, the end ---------------------------------

class _Session:
    """What this process gathers during the session; registered as a plugin by
    ``pytest_configure`` so that its hooks see it."""

    def __init__(self, config: pytest.Config) -> None:
        from harness.budgets import CallRecorder

        self.config = config
        self.recorder: CallRecorder = CallRecorder()
        self.calls: list[list[Any]] = []  # Call.to_json() of every test, from every worker
        self.goldens: list[dict[str, Any]] = []
        self.budgets: list[Budget] = []
        self.baseline: dict[str, dict[str, Any]] | None = None
        self.written: str | None = None

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any) -> Any:
        result = yield
        if fixturedef.argname == "mme_endpoint" and hasattr(result, "client"):
            self.recorder.attach(result.client)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if call.when == "call" and _GOLDEN_RESULT in item.stash:
            report.mme_golden = item.stash[_GOLDEN_RESULT]
        if call.when == "teardown":
            # Plain JSON on the report: with xdist it travels to the controller with it.
            report.mme_calls = [c.to_json() for c in self.recorder.take()]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.calls.extend(getattr(report, "mme_calls", None) or [])
        golden = getattr(report, "mme_golden", None)
        if golden:
            self.goldens.append(golden)

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file, the terminal its summary
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            return
        from harness.budgets import Call, compare, figures, write_baseline
        from harness.ci_results import write_for_ci

        measured = figures(Call.from_json(c) for c in self.calls)
        record = self.config.getoption("mme_record_baseline")
        if record:
            write_baseline(Path(record), measured)
        budgets: dict[str, Any] | None = None
        if self.baseline is not None:
            verdicts = compare(self.baseline, measured, self.budgets)
            for model, rows in verdicts.items():
                _report_budget_case(session, model, rows)
            budgets = {"baseline": str(self.config.getoption("mme_baseline")),
                       "spec": str(self.config.getoption("mme_budget")),
                       "rows": [r.to_json() for rows in verdicts.values() for r in rows]}
        if record and budgets is None:
            return  # a base-branch measurement: its goldens are not the pull request's verdict
        self.written = write_for_ci({"goldens": self.goldens, "budgets": budgets,
                                     "measured": measured})

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        record = self.config.getoption("mme_record_baseline")
        if record and not hasattr(self.config, "workerinput"):
            terminalreporter.write_line(f"mme: per-model figures written to {record} "
                                        "(--mme-record-baseline)")
        if self.written:
            terminalreporter.write_line(f"mme: golden results and budgets written to "
                                        f"{self.written}")


def _report_budget_case(session: pytest.Session, model: str, rows: list[Any]) -> None:
    """One test case for a model's budgets, reported as a test's three phases are."""
    from harness.budgets import side_by_side

    nodeid = f"{BUDGET_FILE}::budget[{model}]"
    location = (BUDGET_FILE, None, f"budget[{model}]")
    table = side_by_side(model, rows)
    verdicts = {r.verdict for r in rows}
    hook = session.config.hook
    now = time.time()

    def report(when: Literal["setup", "call", "teardown"],
               outcome: Literal["passed", "failed", "skipped"],
               longrepr: Any = None) -> pytest.TestReport:
        return pytest.TestReport(nodeid, location, {}, outcome, longrepr, when,
                                 duration=0.0, start=now, stop=now)

    session.testscollected += 1  # the terminal's progress counts it as a test
    hook.pytest_runtest_logstart(nodeid=nodeid, location=location)
    hook.pytest_runtest_logreport(report=report("setup", "passed"))
    if "breach" in verdicts:
        breached = ", ".join(f"{r.figure} {r.now:.4g} {r.unit} > limit {r.limit:.4g} {r.unit}"
                             for r in rows if r.verdict == "breach")
        hook.pytest_runtest_logreport(report=report(
            "call", "failed", f"{model} is over budget ({breached})\n{table}"))
        session.testsfailed += 1
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif verdicts <= {"not measured"}:
        hook.pytest_runtest_logreport(report=report(
            "call", "skipped", (BUDGET_FILE, 0, f"Skipped: {model} was not called in this run "
                                                "(it is in the baseline)")))
    else:
        hook.pytest_runtest_logreport(report=report("call", "passed"))
    hook.pytest_runtest_logreport(report=report("teardown", "passed"))
    hook.pytest_runtest_logfinish(nodeid=nodeid, location=location)
