"""The Python backend stub runs on this interpreter's own libpython where it has a shared one.

The wheel's stub for some Pythons links a libpython grafted into the wheel, built as python.org
builds it; over the stdlib of a Debian or Ubuntu Python (modules such as ``math`` built into its
libpython, absent from ``lib-dynload``) every Python model then fails to load with "No module
named 'math'" (seen on Ubuntu 24.04's Python 3.12 with a GPU). A link under the grafted name,
first on Triton's library path, gives the stub the interpreter's own build.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import pytest

from emulator.triton.embedded import INTERPRETER_LIBS, child_environment, link_interpreter_libpython

OWN = Path(sysconfig.get_config_var("LIBDIR") or "/") / (
    sysconfig.get_config_var("INSTSONAME") or "none")


@pytest.mark.skipif(not OWN.is_file(), reason="this Python has no shared libpython to link")
def test_the_grafted_libpython_name_leads_to_this_interpreters_own(tmp_path: Path) -> None:
    wheel_libs, python_dir = tmp_path / "wheel_libs", tmp_path / "backends" / "python"
    wheel_libs.mkdir()
    python_dir.mkdir(parents=True)
    grafted = f"libpython3-0123abcd.{sys.version_info.minor}.so.1.0"
    (wheel_libs / grafted).write_bytes(b"\x7fELF")
    (wheel_libs / "libpython3-0123abcd.99.so.1.0").write_bytes(b"\x7fELF")  # another Python's
    folder = link_interpreter_libpython(wheel_libs, python_dir)
    assert folder == python_dir / INTERPRETER_LIBS
    assert [p.name for p in folder.iterdir()] == [grafted]
    assert (folder / grafted).resolve() == OWN.resolve()
    library_path = child_environment({}, tmp_path / "backends")["LD_LIBRARY_PATH"].split(":")
    assert library_path[0] == str(folder)  # before the wheel's own libraries


def test_without_a_grafted_libpython_nothing_is_linked(tmp_path: Path) -> None:
    wheel_libs, python_dir = tmp_path / "wheel_libs", tmp_path / "python"
    wheel_libs.mkdir()
    python_dir.mkdir()
    (python_dir / INTERPRETER_LIBS).mkdir()  # a previous start's
    assert link_interpreter_libpython(wheel_libs, python_dir) is None
    assert not (python_dir / INTERPRETER_LIBS).exists()
    assert INTERPRETER_LIBS not in child_environment({}, tmp_path)["LD_LIBRARY_PATH"]
