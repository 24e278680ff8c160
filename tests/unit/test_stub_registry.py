"""The stub registry stays the size of what is loaded, however many models come and go."""

from __future__ import annotations

import os
from pathlib import Path

from emulator.triton import stubs


def _record(registry: Path, pid: int, *args: str) -> None:
    (registry / str(pid)).write_text("".join(f"{a}\n" for a in args) or "\n")


def test_forget_drops_the_models_records_and_exited_argument_less_runs(tmp_path: Path) -> None:
    registry = tmp_path / "repo.stubs"
    registry.mkdir()
    gone = 2**22 + 12345  # above the default pid_max: no such process
    stub_args = ("/r/a--k/1/model.py", "triton_python_backend_shm_region_x", "1", "1", "1",
                 "/b", "3", "a--k_0_0", "DEFAULT")
    _record(registry, gone, *stub_args)  # model a's stub
    _record(registry, gone + 1, *[a.replace("a--k", "b--k") for a in stub_args])  # model b's
    _record(registry, gone + 2)  # a run without arguments that has exited
    _record(registry, os.getpid())  # one still running: kept
    stubs.forget(registry, ["a--k"])
    assert sorted(p.name for p in registry.iterdir()) == sorted([str(gone + 1), str(os.getpid())])
    assert [s.model for s in stubs.read(registry)] == ["b--k"]
