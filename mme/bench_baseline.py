"""``mme bench overhead --baseline REV``: this tree's InvokeEndpoint against another revision's,
in one run.

Figures from two runs minutes apart compare two machines: on a shared VM the other work moves
throughput by more than the change being judged. Here REV is checked out into a temporary
``git worktree``, one ``mme serve`` runs from it (``PYTHONPATH`` and the working directory are the
worktree; same interpreter and venv) and one from this tree, both on the same trivial model, and
wrk's rounds alternate between them (ABBA: a drift of the machine during a pair weighs on both).
Besides calls/s and p50, each side's own CPU per call is counted (``/proc``): it moves least
when other work slows the machine down. Both servers, their Tritons and the worktree are gone on
any exit, Ctrl-C and SIGTERM too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.processes import stop_process
from mme.bench_overhead import (
    ENDPOINT,
    Measure,
    Workload,
    _accounted,
    _invoke_once,
    _median,
    _triton_pid,
    put_fault_rules,
    run_python,
    run_wrk,
    start_serve,
)

# The checkout this module belongs to: REV is looked up and checked out from its repository.
REPO = Path(__file__).resolve().parents[1]


class BaselineError(RuntimeError):
    """The baseline cannot be set up (not a commit, no git); the message says what to fix."""


def resolve_revision(rev: str, repo: Path = REPO) -> str:
    """The commit ``rev`` names in ``repo``."""
    if shutil.which("git") is None:
        raise BaselineError("--baseline needs git, which is not installed")
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                           f"{rev}^{{commit}}"], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise BaselineError(f"--baseline {rev!r} is not a commit of the repository at {repo}; "
                            "give a commit hash, tag or branch (`git log --oneline`)")
    return done.stdout.strip()


def describe(repo: Path = REPO) -> str:
    """This tree as ``git describe`` names it (``-dirty`` when it has uncommitted changes)."""
    done = subprocess.run(["git", "-C", str(repo), "describe", "--always", "--dirty"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "this tree"


@contextlib.contextmanager
def worktree_at(commit: str, repo: Path = REPO) -> Iterator[Path]:
    """``commit`` checked out in a temporary worktree, removed (and git told) on any exit."""
    with tempfile.TemporaryDirectory(prefix="mme-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        try:
            subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet",
                            str(tree), commit], check=True, capture_output=True)
            yield tree
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)
            subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


def serve_from(tree: Path, work: Path, name: str,
               extra: list[str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """``mme serve`` with the code of ``tree`` (it must come first on ``sys.path``: the working
    directory ``-m`` puts there, then ``PYTHONPATH``, then the venv's own entries)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return start_serve(["--model-data", str(work / "store"),
                        "--cache-dir", str(work / f"cache-{name}"), *(extra or [])],
                       cwd=tree, env=env)


@dataclass(frozen=True)
class Side:
    name: str  # "baseline" or "current"
    label: str  # the revision
    url: str
    pids: tuple[int | None, int | None]  # mme serve's and its Triton's


@dataclass(frozen=True)
class Compared:
    concurrency: int
    baseline: Measure
    current: Measure
    ratios: tuple[float, ...]  # current/baseline calls/s, per pair of rounds
    # A third side identical to the baseline (``--record``): its ratio to the baseline is the
    # measurement's own noise, printed beside the ratio that is claimed.
    control: Measure | None = None
    control_ratios: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        return self.current.per_second / max(self.baseline.per_second, 1e-9)

    @property
    def control_ratio(self) -> float | None:
        if self.control is None:
            return None
        return self.control.per_second / max(self.baseline.per_second, 1e-9)


def _per_round(base: list[Measure], other: list[Measure]) -> tuple[float, ...]:
    return tuple(o.per_second / max(b.per_second, 1e-9) for b, o in zip(base, other,
                                                                           strict=True))


def alternate(workload: Workload, sides: tuple[Side, ...], driver: str, concurrencies: list[int],
              seconds: float, rounds: int, work: Path) -> list[Compared]:
    """wrk rounds alternating between the sides (ABBA; ABCCBA with a control third), per
    concurrency: the baseline, the current side, and the control when given."""
    driven = run_wrk if driver == "wrk" else run_python
    headers = {**workload.emulator_headers, "X-Amzn-SageMaker-Target-Model": workload.target}
    results = []
    for concurrency in concurrencies:
        for side in sides:  # warm-up
            driven(side.url, workload.body, headers, concurrency, 1, work)
        runs: dict[str, list[Measure]] = {side.name: [] for side in sides}
        for index in range(rounds):
            for side in (sides if index % 2 == 0 else sides[::-1]):
                runs[side.name].append(_accounted(driven, side.pids, side.url, workload.body,
                                                  headers, concurrency, seconds, work))
        baseline, current, *control = (runs[side.name] for side in sides)
        results.append(Compared(
            concurrency, _median(baseline), _median(current), _per_round(baseline, current),
            _median(control[0]) if control else None,
            _per_round(baseline, control[0]) if control else ()))
    return results


def _cpu_ms(m: Measure, cpu_s: float | None = None) -> float | None:
    """CPU ms per call of mme serve (or of ``cpu_s``: its Triton's)."""
    used = m.proxy_cpu_s if cpu_s is None else cpu_s
    return used / m.requests * 1e3 if used is not None and m.requests else None


def _shown(value: float | None, width: int) -> str:
    return f"{'-' if value is None else f'{value:.3f}':>{width}}"


def report(workload: Workload, sides: tuple[Side, Side], driver: str, results: list[Compared],
           seconds: float, rounds: int, loads: tuple[str, str]) -> str:
    lines = [f"{workload.description}; InvokeEndpoint on mme serve at {sides[0].label} "
             f"(baseline) and {sides[1].label} (current); driver {driver}, {rounds} alternating "
             f"rounds of {seconds:g} s per side (medians of the rounds' p50/p99; calls/s over all "
             f"rounds). Load average at the start {loads[0]}, at the end {loads[1]}.",
             f"{'conc':>4} {'side':<9}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>10}{'errors':>8}"
             f"{'own CPU ms/call':>17}{'Triton CPU':>12}"]
    for row in results:
        measured = [("baseline", row.baseline), ("current", row.current)]
        if row.control is not None:
            measured.append(("control", row.control))
        for name, m in measured:
            lines.append(f"{row.concurrency:>4} {name:<9}{m.p50_ms:>9.3f}{m.p99_ms:>9.3f}"
                         f"{m.per_second:>10.0f}{m.errors:>8}{_shown(_cpu_ms(m), 17)}"
                         f"{_shown(_cpu_ms(m, m.triton_cpu_s), 12)}")
        base_cpu, cur_cpu = _cpu_ms(row.baseline), _cpu_ms(row.current)
        cpu_ratio = (f", own CPU per call x{cur_cpu / base_cpu:.2f}"
                     if base_cpu and cur_cpu is not None else "")
        lines.append(f"{'':>4} current/baseline: calls/s x{row.ratio:.2f} (rounds "
                     f"x{min(row.ratios):.2f} to x{max(row.ratios):.2f}), p50 "
                     f"{(row.current.p50_ms - row.baseline.p50_ms) * 1e3:+.0f} us{cpu_ratio}")
        if row.control is not None and row.control_ratio is not None:
            lines.append(f"{'':>4} control/baseline (the same server twice: the noise): "
                         f"calls/s x{row.control_ratio:.2f} (rounds "
                         f"x{min(row.control_ratios):.2f} to x{max(row.control_ratios):.2f})")
    return "\n".join(lines)


def _load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _work_folder(stack: contextlib.ExitStack, prefix: str,
                 make_workload: Callable[[Path], Workload]) -> tuple[Path, Workload]:
    """A temporary folder (removed with ``stack``) and the workload's store in it."""
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
    (work / "store").mkdir()
    return work, make_workload(work / "store")


def _side(stack: contextlib.ExitStack, name: str, label: str, source: Path, work: Path,
          workload: Workload, extra: list[str] | None = None,
          fault_rules: list[dict[str, Any]] | None = None) -> tuple[Side, Any]:
    """One side's ``mme serve`` from ``source`` (stopped with ``stack``), its fault rules in
    force, the workload's model loaded (cold start is not what is measured); the side and its
    server process."""
    server, url = serve_from(source, work, name, extra or [])
    stack.callback(stop_process, server)
    if fault_rules is not None:
        put_fault_rules(url, fault_rules)
    _invoke_once(url, workload)
    return Side(name, label, f"{url}/endpoints/{ENDPOINT}/invocations",
                (server.pid, _triton_pid(server.pid))), server


def compare_with(rev: str, make_workload: Callable[[Path], Workload], driver: str,
                 concurrencies: list[int], seconds: float, rounds: int,
                 fault_rules: list[dict[str, Any]] | None = None) -> int:
    """The whole ``--baseline`` run; its exit status (2: the baseline cannot be set up).
    ``fault_rules`` are put in force on this tree's server only (``--fault-rule``)."""
    try:
        commit = resolve_revision(rev)
    except BaselineError as exc:
        print(f"mme bench overhead: {exc}", file=sys.stderr)
        return 2
    current_label = describe()
    loads_start = _load_average()
    with contextlib.ExitStack() as stack:
        work, workload = _work_folder(stack, "mme-bench-baseline-", make_workload)
        tree = stack.enter_context(worktree_at(commit))
        baseline, _ = _side(stack, "baseline", f"{rev} ({commit[:7]})", tree, work, workload)
        current, _ = _side(stack, "current", current_label, REPO, work, workload,
                           fault_rules=fault_rules or [])
        pair = (baseline, current)
        results = alternate(workload, pair, driver, concurrencies, seconds, rounds, work)
    print(report(workload, pair, driver, results, seconds, rounds,
                 (loads_start, _load_average())))
    errors = sum(m.errors for row in results for m in (row.baseline, row.current))
    return 0 if errors == 0 else 1


def compare_record(make_workload: Callable[[Path], Workload], driver: str,
                   concurrencies: list[int], seconds: float, rounds: int,
                   with_bodies: bool = False) -> int:
    """``mme bench overhead --record``: this tree's ``mme serve`` without ``--record`` (the
    baseline) against the same tree with ``--record FILE`` (``--record-bodies`` too when
    ``with_bodies``), alternating rounds as ``--baseline`` does, and a third server without it
    (the control: how far two identical servers differ here, the noise a cost must stand out
    of); the recorded lines are counted against the calls the driver made."""
    label = describe()
    loads_start = _load_average()
    with contextlib.ExitStack() as stack:
        work, workload = _work_folder(stack, "mme-bench-record-", make_workload)
        recording = work / "recording.jsonl"
        flags = ["--record", str(recording), *(["--record-bodies"] if with_bodies else [])]
        baseline, _ = _side(stack, "baseline", f"{label}, --record off", REPO, work, workload)
        current, server = _side(stack, "current", f"{label}, --record on"
                                + (" with bodies" if with_bodies else ""), REPO, work,
                                workload, flags)
        control, _ = _side(stack, "control", f"{label}, --record off", REPO, work, workload)
        pair = (baseline, current)
        results = alternate(workload, (*pair, control), driver, concurrencies, seconds, rounds,
                            work)
        stop_process(server)  # the recording's last lines are written as it stops
        lines = sum(1 for _ in recording.open()) if recording.exists() else 0
    print(report(workload, pair, driver, results, seconds, rounds,
                 (loads_start, _load_average())))
    for row in results:
        noise = (f" (two identical servers differ by {(1 - (row.control_ratio or 1)) * 100:+.1f}"
                 " % in the same rounds)")
        print(f"concurrency {row.concurrency}: --record costs {(1 - row.ratio) * 100:+.1f} % "
              f"of calls/s{noise}")
    print(f"recorded lines: {lines:,} (every call the recording server answered, the warm-up's "
          "included)")
    errors = sum(m.errors for row in results
                 for m in (row.baseline, row.current, row.control) if m is not None)
    return 0 if errors == 0 and lines > 0 else 1
