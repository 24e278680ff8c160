"""The example's two commands, as the docs use them: ``python -m harness.examples tests/``
copies the example test file (an existing one is left as it is), ``python -m
harness.examples.add_model FOLDER --offset N`` writes the add model's next version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.examples.__main__ import EXAMPLE


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def test_the_example_test_file_is_copied_once(tmp_path: Path) -> None:
    done = _run("harness.examples", "tests/", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    copied = tmp_path / "tests" / "test_example_endpoint.py"
    assert copied.read_text() == EXAMPLE.read_text()
    copied.write_text("# mine now\n")
    again = _run("harness.examples", "tests/", cwd=tmp_path)
    assert again.returncode == 0 and "left as it is" in again.stdout
    assert copied.read_text() == "# mine now\n"
    assert _run("harness.examples", cwd=tmp_path).returncode == 2


def test_add_model_writes_another_version_with_an_offset(tmp_path: Path) -> None:
    for folder, offset in (("v1", []), ("v2", ["--offset", "1"])):
        done = _run("harness.examples.add_model", f"repos/{folder}", *offset, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    v1, v2 = ((tmp_path / "repos" / v / "add" / "config.pbtxt").read_text() for v in ("v1", "v2"))
    assert 'key: "offset" value { string_value: "0" }' in v1
    assert 'key: "offset" value { string_value: "1" }' in v2
