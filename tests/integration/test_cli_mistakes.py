"""Every ``mme`` subcommand, given a missing path, an empty folder, an out-of-range number or an
output it cannot write, stops at once with one line that names the flag: never a traceback,
never a server or a build started first. The subcommands are walked from the parser itself, so
a new one must be added to ``CASES``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mme.cli import build_parser

MISSING = "/nonexistent-mme-test/here"
UNWRITABLE = "/proc/mme-test/out"  # not even root can create anything under /proc
EMPTY = "{empty}"  # an empty folder, made per test
A_FILE = "{file}"  # an existing file where a folder belongs

# subcommand -> [(arguments, words the one line must hold)]; [] for one with none of the four
CASES: dict[str, list[tuple[list[str], str]]] = {
    "serve": [(["--model-data", MISSING], "no such folder"),
              (["--port", "99999"], "--port"),
              (["--model-load-timeout", "-1"], "--model-load-timeout"),
              (["--invocation-timeout", "0"], "--invocation-timeout"),
              (["--cache-dir", UNWRITABLE, "--port", "0"], "cache folder"),
              (["--record", UNWRITABLE, "--port", "0"], "--record")],
    "demo": [(["--work-dir", UNWRITABLE], "--work-dir")],
    "build": [(["text_embedding", "-o", UNWRITABLE], "--output"),
              (["text_embedding", "-o", "{tmp}/b", "--instance-count", "-1"],
               "--instance-count")],
    "package": [([MISSING, "-o", "{tmp}/p.tar.gz"], "no such file or folder"),
                ([EMPTY, "-o", "{tmp}/p.tar.gz"], "an empty folder"),
                (["{models}", "-o", UNWRITABLE], "--output")],
    "loadtest": [(["--model-data", MISSING], "does not exist"),
                 (["--model-data", EMPTY], "nothing to serve"),
                 (["--model-data", EMPTY, "--out", UNWRITABLE], "--out"),
                 (["--model-data", EMPTY, "--max-invocations", "-1"], "--max-invocations"),
                 (["--trace", MISSING, "--url", "http://127.0.0.1:9"], "no such file or folder"),
                 (["--trace", A_FILE, "--url", "http://127.0.0.1:9"], "line 1: not JSON"),
                 (["--trace", A_FILE, "--url", "http://127.0.0.1:9", "--speed", "0"],
                  "--speed"),
                 (["--model-data", EMPTY, "--async"], "--async needs --url or --aws")],
    "sweep": [([MISSING], "no such file or folder"),
              ([EMPTY], "an empty folder"),
              (["{models}", "--out", UNWRITABLE], "--out"),
              ([EMPTY, "--seed", "-1"], "--seed")],
    "deploy": [([MISSING, "--target", "local", "--endpoint-name", "e"], "no such file"),
               ([EMPTY, "--target", "local", "--endpoint-name", "e"], "an empty folder"),
               (["{models}", "--target", "local", "--endpoint-name", "e", "--store-dir",
                 UNWRITABLE],
                "--store-dir"),
               ([EMPTY, "--target", "local", "--endpoint-name", "e", "--copies", "-1"],
                "--copies")],
    "teardown": [(["--target", "local", "--endpoint-name", "e", "--store-dir", UNWRITABLE],
                  "--store-dir"),
                 (["--target", "local", "--endpoint-name", "e", "--wait-delay", "-1"],
                  "--wait-delay")],
    "alarm put": [(["--target", "local", "--name", "a", "--metric", "m", "--threshold", "1",
                    "--period", "-1"], "--period")],
    "alarm list": [], "alarm set-state": [], "alarm delete": [],  # no path, no number
    "ci up": [(["--model-data", MISSING], "no such folder"),
              (["--state-dir", UNWRITABLE], "--state-dir"),
              (["--port", "99999"], "--port"),
              (["--ready-timeout", "-1"], "--ready-timeout")],
    "ci down": [(["--report", UNWRITABLE], "--report"),
                (["--report", A_FILE], "is a file"),
                (["--stop-timeout", "-1"], "--stop-timeout")],
    "plan": [(["--model-data", MISSING], "no such"),
             (["--model-data", EMPTY, "--instance-type", "ml.m5.large"], "holds no model"),
             (["--model-data", EMPTY, "--rps", "-1"], "--rps"),
             (["--model-data", "{models}", "--json", UNWRITABLE], "--json"),
             (["--model-data", "{models}", "--trace", MISSING], "--trace")],
    "bench overhead": [(["--rounds", "-1"], "--rounds"),
                       (["--seconds", "1.5", "--driver", "wrk"], "whole seconds")],
    "bench fleet": [(["--requests", "-1"], "--requests")],
    "bench scale": [(["--work-dir", UNWRITABLE], "--work-dir"),
                    (["--models", "-1"], "--models")],
    "bench coldstart": [(["--size-mib", "-1"], "--size-mib")],
    "bench async": [(["--calls", "-1"], "--calls"), (["--inline", "-1"], "--inline")],
    "bench miss": [(["--work-dir", UNWRITABLE], "--work-dir"), (["--rounds", "-1"], "--rounds")],
    "bench ensemble": [(["--work-dir", UNWRITABLE], "--work-dir"),
                       (["--requests", "-1"], "--requests")],
    "bench loadgen": [(["--users", "-1"], "--users")],
    "lint": [([MISSING], "no such file or folder"), ([EMPTY], "an empty folder"),
             (["{models}", "-o", UNWRITABLE], "--output")],
    "bench lint": [(["--count", "-1"], "--count"), (["--size-mb", "-1"], "--size-mb")],
    "gpu-check": [],  # needs a GPU: walked where one is (docker/gpu-check.sh)
    "reset": [([], "no emulator answers at http://127.0.0.1:9"),
              (["--url", "notaurl"], "give http://HOST:PORT")],
    "snapshot save": [(["{tmp}/s"], "no emulator answers at http://127.0.0.1:9")],
    "snapshot load": [([MISSING], "no such folder")],
    "bench reset": [(["--endpoints", "-1"], "--endpoints")],
    "bench routing": [(["--calls", "-1"], "--calls")],
    "bench replay": [(["--rate", "0"], "--rate")],
    "bench trace": [(["--users", "-1"], "--users"), (["--models", "1"], "--models")],
}


def _leaves(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return [leaf for name, sub in action.choices.items()
                    for leaf in _leaves(sub, (*prefix, name))]
    return [" ".join(prefix)]


def test_every_subcommand_is_walked() -> None:
    assert sorted(set(_leaves(build_parser())) - set(CASES)) == []


@pytest.mark.parametrize(("command", "arguments", "words"), [
    (command, arguments, words) for command, cases in CASES.items()
    for arguments, words in cases])
def test_a_mistake_is_one_line_and_starts_nothing(tmp_path: Path, command: str,
                                                  arguments: list[str], words: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("not a folder\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.tar.gz").write_bytes(b"")
    values = {"empty": tmp_path / "empty", "file": tmp_path / "file", "tmp": tmp_path,
              "models": tmp_path / "models"}
    argv = [a.format(**values) for a in arguments]
    env = {**os.environ, "MME_STATE_DIR": str(tmp_path / "state"),
           "MME_CACHE_DIR": str(tmp_path / "cache"), "MME_EMULATOR_URL": "http://127.0.0.1:9"}
    # A command that started a server or a build anyway would still be running at the limit.
    done = subprocess.run([sys.executable, "-m", "mme", *command.split(), *argv], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    last = lines[-1]
    assert last.startswith((f"mme {command.split()[0]}", "mme serve: " if command == "ci up"
                            else f"mme {command}")), last
    assert words in last, last
    if last.startswith(f"mme {command}: error:"):  # argparse's own: usage, then the error
        return
    if command == "ci up" and "exited with status 2 while starting" in lines[0]:
        # mme ci up says its server refused to start, then quotes the server's one line
        assert lines[1:] == [last] and last.startswith("mme serve: ")
        return
    assert len(lines) == 1, done.stderr  # one line, nothing said before it
