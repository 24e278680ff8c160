"""The Python backend's /tmp/python_env_* folders: those no running Triton can own are removed."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from emulator.triton import python_envs


def _folders(root: Path) -> list[Path]:
    made = [root / "python_env_aaaaaa", root / "python_env_bbbbbb"]
    for folder in made:
        folder.mkdir()
    (made[1] / "env").mkdir()  # an unpacked EXECUTION_ENV_PATH archive
    return made


def test_folders_older_than_every_running_triton_are_removed(tmp_path: Path) -> None:
    made = _folders(tmp_path)
    later = time.time() + 30  # every running Triton started after the folders were last changed
    assert sorted(python_envs.remove_orphans(tmp_path, [later, later + 5])) == made
    assert list(tmp_path.iterdir()) == []


def test_with_no_triton_running_every_folder_is_an_orphan(tmp_path: Path) -> None:
    _folders(tmp_path)
    assert len(python_envs.remove_orphans(tmp_path, [])) == 2
    assert list(tmp_path.iterdir()) == []


def test_a_folder_a_running_triton_may_own_is_kept(tmp_path: Path) -> None:
    made = _folders(tmp_path)
    # One Triton started before the folders: any of them may be its own.
    assert python_envs.remove_orphans(tmp_path, [time.time() - 60, time.time() + 30]) == []
    assert all(folder.is_dir() for folder in made)


def test_only_folders_of_that_name_are_touched(tmp_path: Path) -> None:
    (tmp_path / "python_env_file").write_text("not a folder")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "python_env_link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "other_env_x").mkdir()
    assert python_envs.remove_orphans(tmp_path, []) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "elsewhere", "other_env_x", "python_env_file", "python_env_link"]


def test_a_running_tritonserver_is_seen_with_its_start_time(tmp_path: Path) -> None:
    sleeper = tmp_path / "tritonserver"  # the kernel names a process after its executable
    shutil.copy(shutil.which("sleep") or "/bin/sleep", sleeper)
    before = time.time()
    process = subprocess.Popen([str(sleeper), "30"])
    try:
        deadline = time.monotonic() + 10
        while not (fresh := [s for s in python_envs.triton_starts() if s >= before - 1]):
            assert time.monotonic() < deadline, "the tritonserver process was not seen"
        assert all(start <= time.time() + 1 for start in fresh)
    finally:
        process.kill()
        process.wait()
