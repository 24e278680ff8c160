"""``mme ci up`` / ``mme ci down``: the emulator as a background service of a CI job.

``mme ci up [any mme serve flag]`` starts the server in the background (its own session, so the
step that ran ``up`` may end), waits until it answers ``/ping`` (or fails with the reason and
the last lines of its log, leaving nothing running), and exports what clients need
(``environment.py``). ``mme ci down [--report DIR]`` reads the live data, stops the server and
everything it started, and writes the report and the job summary (``report.py``,
``summary.py``). The two meet through a state folder (``state.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from mme.arguments import writable_folder
from mme.ci.state import STATE_ENV, ServerRecord, StateDir, default_state_dir, log_tail

DEFAULT_READY_TIMEOUT_S = 600.0  # a docker launcher may pull an image of gigabytes first
DEFAULT_STOP_TIMEOUT_S = 60.0
FAILED_START_GRACE_S = 5.0


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from emulator.settings import add_flags

    ci = subparsers.add_parser(
        "ci", help="the emulator as a background service of a CI job (up, down)",
        description="Start the emulator in the background for later CI steps (up), then stop it "
                    "and keep a report (down). See docs/ci.md.")
    commands = ci.add_subparsers(dest="ci_command", required=True)
    up = commands.add_parser(
        "up", help="start the emulator in the background and export AWS_ENDPOINT_URL_* for "
                   "later steps",
        description="Start `mme serve` in the background (any of its flags), wait until it "
                    "serves, and export AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME, ..._SAGEMAKER, "
                    "..._APPLICATION_AUTO_SCALING, ..._CLOUDWATCH, a region and (unless the job "
                    "has credentials or --auth sigv4) dummy credentials: appended to "
                    "$GITHUB_ENV on a GitHub runner, printed as `export` lines everywhere, for "
                    "eval \"$(mme ci up ...)\".")
    _add_state_flag(up)
    up.add_argument("--ready-timeout", type=float, default=DEFAULT_READY_TIMEOUT_S,
                    metavar="SECONDS", help="how long the server may take to serve before up "
                    f"fails and stops it (default {DEFAULT_READY_TIMEOUT_S:g})")
    add_flags(up)
    up.set_defaults(func=run_up)
    down = commands.add_parser(
        "down", help="stop the emulator of mme ci up and write its report",
        description="Stop the emulator started by `mme ci up` (exit 1 if it did not stop "
                    "cleanly) and, with --report DIR, keep its log, models and metrics JSON, "
                    "Prometheus text and a self-contained snapshot of the live page. With "
                    "$GITHUB_STEP_SUMMARY set, append a Markdown job summary.")
    _add_state_flag(down)
    down.add_argument("--report", metavar="DIR", default=None,
                      help="write the report here (created if missing)")
    down.add_argument("--stop-timeout", type=float, default=DEFAULT_STOP_TIMEOUT_S,
                      metavar="SECONDS", help="how long the server may take to stop before it "
                      f"and its Tritons are killed (default {DEFAULT_STOP_TIMEOUT_S:g})")
    down.set_defaults(func=run_down)


def _add_state_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", metavar="DIR", default=None,
                        help=f"where up and down meet (default ${STATE_ENV}, else "
                             "$RUNNER_TEMP/mme-ci, else <tmp>/mme-ci-<uid>)")


def _state(args: argparse.Namespace) -> StateDir:
    path = Path(args.state_dir) if args.state_dir else default_state_dir(os.environ)
    return StateDir(path.resolve())


# -- up -------------------------------------------------------------------------------------

def serve_argv(args: argparse.Namespace) -> list[str]:
    """The ``mme serve`` flags given to ``up``, as a command line for the server."""
    from emulator.settings import flag_fields

    argv: list[str] = []
    for name, flag, _info in flag_fields():
        value = getattr(args, name, None)
        if value is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            argv += [flag, str(item)]
    return argv


def _client_url(host: str, port: int) -> str:
    """Where a client on this machine reaches a server listening on ``host``."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run_up(args: argparse.Namespace, stdout: TextIO | None = None,
           stderr: TextIO | None = None) -> int:
    from emulator.settings import InvalidSettings
    from mme.ci.environment import append_github, client_variables, export_lines, region_for
    from mme.ci.state import process_start_ticks
    from mme.cli import settings_from_args
    from mme.serve import StartupMistake, listening_socket

    out, err = stdout or sys.stdout, stderr or sys.stderr
    env = os.environ
    state = _state(args)
    existing = state.record()
    if existing is not None and state.alive(existing):
        print(f"mme ci up: an emulator started by mme ci up already runs at {existing.url} "
              f"(pid {existing.pid}, state {state.path}); stop it with `mme ci down`, or give "
              "this one a folder of its own with --state-dir DIR", file=err)
        return 2
    try:
        settings = settings_from_args(args)
    except InvalidSettings as exc:
        print(f"mme ci up: {exc}", file=err)
        return 2
    region = region_for(args.region or env.get("MME_REGION"), env)
    # A server locks its cache folder: unless the user chose one, each run gets its own.
    own_cache = args.cache_dir is None and not env.get("MME_CACHE_DIR")
    try:
        listening = listening_socket(settings) if settings.listen_fd is None else None
    except StartupMistake as exc:  # the port is taken: say so before anything starts
        print(f"mme ci up: {exc}", file=err)
        return 2
    state.forget()
    state.start_fresh()
    argv = serve_argv(args)
    if not (args.region or env.get("MME_REGION")):
        argv += ["--region", region]
    cache_dir = state.own_cache_dir if own_cache else settings.cache_dir
    if own_cache:
        argv += ["--cache-dir", str(cache_dir)]
    pass_fds: tuple[int, ...] = ()
    if listening is not None:
        host, port = listening.getsockname()[:2]
        argv += ["--listen-fd", str(listening.fileno())]
        pass_fds = (listening.fileno(),)
    else:
        host, port = settings.host, settings.port
        pass_fds = (int(settings.listen_fd or 0),)
    url = _client_url(str(host), int(port))
    with open(state.log_path, "ab") as log:
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "mme.ci.server", *argv],
                env={**env, STATE_ENV: str(state.path)}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, pass_fds=pass_fds,
                start_new_session=True)  # it outlives this step; a Ctrl-C here is not its
        finally:
            if listening is not None:
                listening.close()  # the server has its copy
    record = ServerRecord(
        pid=process.pid, start_ticks=process_start_ticks(process.pid) or 0, url=url,
        region=region, auth=settings.auth, endpoint_name=settings.endpoint_name,
        cache_dir=str(cache_dir), own_cache=own_cache, started_at=time.time())
    try:
        state.save(record)
        failure = _wait_ready(process, record, args.ready_timeout)
    except BaseException:  # Ctrl-C, or the CI's SIGTERM, while waiting: leave nothing behind
        _stop_failed_start(process, record, state)
        raise
    if failure is not None:
        _stop_failed_start(process, record, state)
        print(f"mme ci up: the emulator {failure}; the last lines of its log "
              f"({state.log_path}):\n{log_tail(state.log_path)}", file=err)
        code = process.returncode
        return code if code in (1, 2) else 1
    variables = client_variables(url, region, settings.auth, state.path, env)
    written = append_github(env, variables, url, state.path)
    out.write(export_lines(variables))
    out.flush()
    where = f" (written to ${' and $'.join(written)})" if written else ""
    print(f"mme ci up: the emulator serves at {url} (pid {process.pid}); live page "
          f"{url}/_emulator/, log {state.log_path}. Exported "
          f"{', '.join(variables)}{where}. Stop it with: mme ci down --report DIR", file=err)
    return 0


def _wait_ready(process: subprocess.Popen[bytes], record: ServerRecord,
                timeout_s: float) -> str | None:
    """None once the server answers ``/ping``; else why it never will."""
    from emulator.processes import wait_until
    from harness.live_endpoint import ping

    class Exited(Exception):
        pass

    def still_starting() -> None:
        if process.poll() is not None:
            raise Exited

    try:
        if wait_until(lambda: ping(record.url, timeout_s=1.0), timeout_s,
                      still_starting=still_starting, interval_s=0.1):
            return None
    except Exited:
        return f"exited with status {process.returncode} while starting"
    return f"did not answer {record.url}/ping within {timeout_s:g} s"


def _stop_failed_start(process: subprocess.Popen[bytes], record: ServerRecord,
                       state: StateDir) -> None:
    from mme.ci.processes import stop_tree

    # Nothing of a server that never served is worth waiting for: a start blocked on a Triton
    # that never answers does not even see SIGTERM until it gives up. A short grace, then kill.
    stop_tree((record.pid, record.start_ticks), FAILED_START_GRACE_S)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    state.forget()
    if record.own_cache:
        shutil.rmtree(record.cache_dir, ignore_errors=True)


# -- down -----------------------------------------------------------------------------------

def run_down(args: argparse.Namespace, stderr: TextIO | None = None) -> int:
    from mme.ci.processes import stop_tree
    from mme.ci.report import LiveData, read_live

    err = stderr or sys.stderr
    env = os.environ
    state = _state(args)
    record = state.record()
    report = Path(args.report).absolute() if args.report else None
    problem = writable_folder(report, "--report") if report is not None else None
    if problem:  # before anything is stopped: the report would be lost
        print(f"mme ci down: {problem}", file=err)
        return 2
    if record is None:
        print(f"mme ci down: no emulator started by mme ci up is running (nothing in "
              f"{state.path}); nothing to stop", file=err)
        if report is not None and state.log_path.is_file():
            # e.g. `up` failed: its log is what the artifact should hold.
            report.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(state.log_path, report / "server.log")
            print(f"mme ci down: kept the last server log in {report / 'server.log'}", file=err)
        state.remove()
        return 0
    problems: list[str] = []
    live = LiveData()
    was_alive = state.alive(record)
    if was_alive and (report is not None or env.get("GITHUB_STEP_SUMMARY")):
        live = read_live(record.url, auth=record.auth, region=record.region)
        problems += [f"`{name}`: {why}" for name, why in live.errors.items()]
    elapsed = _duration(time.time() - record.started_at)
    code = 0
    if not was_alive:
        exit_code = state.exit_code()
        stop = (f"The emulator (pid {record.pid}) had already stopped before `mme ci down`"
                + (f", with status {exit_code}." if exit_code is not None else
                   " (killed or crashed: no exit status).")
                + f" It had been started {elapsed} earlier.")
        code = 0 if exit_code == 0 else 1
    else:
        clean, killed = stop_tree((record.pid, record.start_ticks), args.stop_timeout)
        exit_code = state.exit_code()
        if not clean:
            stop = (f"The emulator did **not** stop within {args.stop_timeout:g} s of SIGTERM "
                    f"and was killed with {len(killed)} process(es) it started.")
            code = 1
        elif exit_code not in (0, None):
            stop = f"The emulator stopped with status {exit_code} after {elapsed}."
            code = 1
        else:
            stop = f"The emulator served for {elapsed} and stopped cleanly."
    state.forget()
    if record.own_cache:
        shutil.rmtree(record.cache_dir, ignore_errors=True)
    models = state.model_stats()
    results = state.results()
    summary = _summary(record, stop, report, models, live, results, problems)
    if report is not None:
        _write_report(report, state, live, models, results, summary)
    if env.get("GITHUB_STEP_SUMMARY"):
        with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
            out.write(summary + "\n")
    print(f"mme ci down: {stop.replace('**', '')}"
          + (f" Report: {report}" if report is not None else ""), file=err)
    if code:
        print(f"mme ci down: the last lines of the server's log ({state.log_path}):\n"
              f"{log_tail(state.log_path)}", file=err)
    state.remove()  # what was worth keeping is in the report; nothing is left behind
    return code


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


def _summary(record: ServerRecord, stop: str, report: Path | None,
             models: dict[str, Any] | None, live: Any, results: list[dict[str, Any]],
             problems: list[str]) -> str:
    from mme.ci.summary import job_summary

    return job_summary(url=record.url, stop=stop, report=str(report) if report else None,
                       models=models, metrics=live.json("metrics.json"), results=results,
                       problems=problems)


def _write_report(report: Path, state: StateDir, live: Any, models: dict[str, Any] | None,
                  results: list[dict[str, Any]], summary: str) -> None:
    import json

    from mme.ci.report import write_live

    write_live(report, live)
    if state.log_path.is_file():
        shutil.copyfile(state.log_path, report / "server.log")
    (report / "model-stats.json").write_text(json.dumps({"Models": models}, indent=2))
    (report / "tests.json").write_text(json.dumps(results, indent=2))
    (report / "summary.md").write_text(summary)
