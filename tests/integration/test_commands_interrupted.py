"""Ctrl-C in ``mme plan`` (and any other command without its own words for it): one line
saying what stopped, exit 130, no traceback, and nothing it started left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mme.ci.processes import running, tree
from tests import support
from tests.support import package, write_scale_model

pytestmark = pytest.mark.slow


def test_ctrl_c_while_mme_plan_measures_stops_it_and_what_it_started(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    gate = tmp_path / "never"  # the model's load waits for it: the measurement is under way
    package(write_scale_model(tmp_path / "repo", "slow", 2.0, load_gate=str(gate)),
            store / "slow.tar.gz", "folder")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MME_")}
    run = subprocess.Popen(
        [sys.executable, "-m", "mme", "plan", "--model-data", str(store),
         "--instance-type", "ml.m5.large",
         "--json", str(tmp_path / "plan.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True, env=env, cwd=tmp_path)
    def still_going() -> None:
        if run.poll() is not None:
            raise AssertionError(f"mme plan exited early: {run.communicate()}")

    started = support.wait_for(lambda: (lambda t: t if len(t) > 1 else None)(tree(run.pid)),
                               120, "mme plan's Triton", still_going=still_going)
    os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert "Traceback" not in err
    assert "mme plan: interrupted; the measurements stopped" in err
    assert not (tmp_path / "plan.json").exists()
    support.wait_for(lambda: running(started) == [], 30, "what mme plan started, stopped")


def test_a_locust_worker_with_no_master_says_so_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    from emulator.processes import bound_socket

    with bound_socket() as taken:  # a port nothing listens on once closed
        port = taken.getsockname()[1]
    run = subprocess.Popen(
        [sys.executable, "-m", "mme", "loadtest", "--worker", "--master-host", "127.0.0.1",
         "--master-port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    assert run.stderr is not None
    first = run.stderr.readline()
    assert f"a Locust worker for the master at 127.0.0.1:{port}" in first
    assert f"no master answers at 127.0.0.1:{port} yet" in run.stderr.readline()
    support.wait_for(lambda: len(tree(run.pid)) > 1, 60, "Locust's worker")
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130 and "Traceback" not in err, err


def test_ctrl_c_while_mme_ci_up_waits_stops_the_server_it_started(tmp_path: Path) -> None:
    import socket

    store = tmp_path / "store"
    store.mkdir()
    package(write_scale_model(tmp_path / "repo", "m", 2.0), store / "m.tar.gz", "folder")
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MME_", "AWS_", "GITHUB"))}
    env["MME_STATE_DIR"] = str(state)
    with socket.socket() as silent:  # a Triton that accepts and never answers: never ready
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        run = subprocess.Popen(
            [sys.executable, "-m", "mme", "ci", "up", "--model-data", str(store), "--port", "0",
             "--launcher", "external", "--triton-url",
             f"http://127.0.0.1:{silent.getsockname()[1]}", "--ready-timeout", "600"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
            env=env, cwd=tmp_path)
        support.wait_for(lambda: (state / "server.json").exists(), 60, "the server started")
        server = json.loads((state / "server.json").read_text())["pid"]
        started = support.wait_for(lambda: tree(server) or None, 30, "its process")
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        out, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert "Traceback" not in err and "mme ci: interrupted" in err
    assert out == ""  # nothing exported: no emulator serves
    assert running(started) == [] and not (state / "server.json").exists()



PROBE = '''
import argparse
import sys
import mme.cli

def raises(args):
    exec("raise KeyboardInterrupt")  # where a dataclass being defined meets Ctrl-C

def handles(args):  # as mme loadtest and mme deploy do: their own words, then 130
    try:
        exec("raise KeyboardInterrupt")
    except KeyboardInterrupt:
        print("mme probe: stopped by its own handler", file=sys.stderr)
        return 130

def parser(words):
    parser = argparse.ArgumentParser(prog="mme")
    parser.set_defaults(command="probe", func=raises if sys.argv[1] == "raises" else handles)
    return parser

mme.cli.build_parser = parser
raise SystemExit(mme.cli.main([]))
'''


@pytest.mark.parametrize(("command", "said"), [
    ("raises", "mme probe: interrupted; what it started was stopped\n"),
    ("handles", "mme probe: stopped by its own handler\n")])
def test_ctrl_c_met_inside_code_run_from_a_string_still_exits_130(
        tmp_path: Path, command: str, said: str) -> None:
    """Under ``python -m``, CPython ends the process by SIGINT at exit when a KeyboardInterrupt
    left code run by a string ``exec`` (a dataclass a lazy import defines), even if it was
    caught. Ctrl-C must read as 130 whatever the command was doing when it came."""
    (tmp_path / "interrupted_probe.py").write_text(PROBE)
    run = subprocess.run([sys.executable, "-m", "interrupted_probe", command],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert (run.returncode, run.stderr) == (130, said), run.stderr
