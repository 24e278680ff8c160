"""The pytest plugin's examples, run exactly as their docstrings say: the setup command and the
``[pytest]`` block are read from ``harness/examples/test_example_endpoint.py`` itself, so the
instructions cannot drift from what works; ``test_example_faults.py`` runs on the same setup."""

from __future__ import annotations

import ast
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).parents[2] / "harness" / "examples" / "test_example_endpoint.py"
FAULTS_EXAMPLE = EXAMPLE.with_name("test_example_faults.py")


def documented_setup() -> tuple[list[str], str]:
    """The example's setup command line and its ini block, as written in its docstring."""
    doc = ast.get_docstring(ast.parse(EXAMPLE.read_text())) or ""
    lines = [line.strip() for line in doc.splitlines()]
    command = next(line for line in lines if line.startswith("python -m "))
    start = lines.index("[pytest]")
    ini = []
    for line in lines[start:]:
        if not line:
            break
        ini.append(line)
    return shlex.split(command.split("#")[0]), "\n".join(ini) + "\n"


def test_the_example_runs_as_its_docstring_says(pytester: pytest.Pytester) -> None:
    command, ini = documented_setup()
    assert "mme_model_store = models/" in ini
    subprocess.run([sys.executable, *command[1:]], cwd=pytester.path, check=True,
                   capture_output=True)
    (pytester.path / "pytest.ini").write_text(ini)
    shutil.copy(EXAMPLE, pytester.path / "test_example_endpoint.py")

    first = pytester.runpytest_subprocess("--mme-update-goldens")
    first.assert_outcomes(passed=5)
    pytester.runpytest_subprocess().assert_outcomes(passed=5)
    # The faults example, beside it on the same setup, in the order it is written.
    shutil.copy(FAULTS_EXAMPLE, pytester.path / "test_example_faults.py")
    pytester.runpytest_subprocess("test_example_faults.py").assert_outcomes(passed=3)


def test_the_docker_launcher_without_an_image_says_to_give_one(pytester: pytest.Pytester,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.delenv("MME_IMAGE", raising=False)
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("--mme-launcher", "docker")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mme-launcher docker needs*--mme-image IMAGE*"])
