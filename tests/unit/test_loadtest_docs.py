"""The distributed load-test examples in docs/loadtest.md (a Kubernetes master Job and a Job of
workers, a compose master and workers) run the commands ``mme loadtest`` accepts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from harness.cli import _engine_problem
from mme.cli import build_parser

DOC = Path(__file__).resolve().parents[2] / "docs" / "loadtest.md"


def _documents() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 2, "the Kubernetes and the compose example"
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def _commands() -> dict[str, list[str]]:
    commands = {}
    for doc in _documents():
        if doc.get("kind") == "Job":
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            commands[f"k8s {container['name']}"] = [str(a) for a in container["args"]]
        for name, service in (doc.get("services") or {}).items():
            command = [re.sub(r"\$\{\w+:-(\w+)\}", r"\1", str(a)) for a in service["command"]]
            commands[f"compose {name}"] = command
    return commands


def test_the_documented_masters_and_workers_are_valid_commands() -> None:
    commands = _commands()
    assert set(commands) == {"k8s master", "k8s worker", "compose master", "compose worker"}
    parser = build_parser()
    for name, command in commands.items():
        args = parser.parse_args(["loadtest", *command])
        if name.endswith("worker"):
            assert args.worker and args.master_host, name
        else:
            assert args.master and args.expect_workers >= 1, name
            assert _engine_problem(args) is None, name
    # The workers find the master by the name it is published under.
    services = {d["metadata"]["name"] for d in _documents() if d.get("kind") == "Service"}
    assert parser.parse_args(["loadtest", *commands["k8s worker"]]).master_host in services
    assert parser.parse_args(["loadtest", *commands["compose worker"]]).master_host == "master"


def test_the_compose_example_is_a_valid_compose_file(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    checker = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    if checker is None:
        import pytest

        pytest.skip("check-jsonschema (the dev extras) is not installed")
    compose = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)[1]
    (tmp_path / "loadtest.compose.yaml").write_text(compose)
    done = subprocess.run([checker, "--builtin-schema", "vendor.compose-spec",
                           str(tmp_path / "loadtest.compose.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
