"""One live server per cache folder (emulator/cache_lock.py), and a leftover sweep that takes
only what names its own folder (emulator/triton/stubs.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from emulator.cache_lock import CacheDirInUse, CacheDirLock
from emulator.triton.stubs import names_folder, sweep_stale
from tests.support import wait_until


def test_a_second_owner_is_refused_with_the_first_ones_pid_and_url(tmp_path: Path) -> None:
    first, second = CacheDirLock(tmp_path / "cache"), CacheDirLock(tmp_path / "cache")
    first.acquire("http://127.0.0.1:8080")
    try:
        with pytest.raises(CacheDirInUse) as refused:
            second.acquire("http://127.0.0.1:8081")
        message = str(refused.value)
        assert str(tmp_path / "cache") in message and "http://127.0.0.1:8080" in message
        assert "--cache-dir" in message and "\n" not in message
        assert not second.held
    finally:
        first.release()
    second.acquire("http://127.0.0.1:8081")  # free again once the first let go
    second.release()


HOLD = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from emulator.cache_lock import CacheDirLock
    CacheDirLock(Path(sys.argv[1])).acquire("http://127.0.0.1:1")
    # A child that outlives this process, as an orphaned Triton may: it must not keep the lock.
    orphan = subprocess.Popen(["sleep", "60"], close_fds=False)
    print(orphan.pid, flush=True)
    time.sleep(60)
""")


def test_a_killed_owner_frees_the_folder_even_while_its_child_lives(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None
    orphan = int(holder.stdout.readline())
    try:
        with pytest.raises(CacheDirInUse, match=f"pid {holder.pid}"):
            CacheDirLock(tmp_path).acquire("x")
        holder.kill()
        holder.wait()
        lock = CacheDirLock(tmp_path)
        lock.acquire("x")  # the orphan still runs, yet the folder is free
        assert Path(f"/proc/{orphan}").exists()
        lock.release()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
        subprocess.run(["kill", "-9", str(orphan)], check=False)


def test_an_unwritable_folder_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CacheDirInUse, match="--cache-dir") as refused:
        CacheDirLock(tmp_path / "file" / "cache").acquire("x")
    assert "\n" not in str(refused.value)


def test_the_sweep_matches_whole_paths_only() -> None:
    folder = Path("/a/b/endpoints/local/AllTraffic/i-1/backends")
    assert names_folder(str(folder).encode(), folder)
    assert names_folder(f"{folder}/python/triton_python_backend_stub.real".encode(), folder)
    assert names_folder(f"--backend-directory={folder}".encode(), folder)
    # Another server's folders that merely contain the text
    assert not names_folder(f"/x{folder}/python/triton_python_backend_stub".encode(), folder)
    assert not names_folder(f"--backend-directory=/x{folder}".encode(), folder)
    assert not names_folder(f"{folder}-2/python".encode(), folder)


def test_the_sweep_spares_a_process_of_a_folder_that_only_contains_the_path(
        tmp_path: Path) -> None:
    ours = tmp_path / "a" / "backends"
    theirs = tmp_path / "x" / str(ours).lstrip("/")  # .../x/<tmp>/a/backends
    # A program that keeps its command line (``sh -c`` may exec ``sleep`` and lose the path)
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    spared = subprocess.Popen([*sleep, f"{theirs}/python/stub"])
    left = subprocess.Popen([*sleep, f"{ours}/python/stub"])
    try:
        wait_until(lambda: str(ours).encode() in Path(f"/proc/{left.pid}/cmdline").read_bytes(),
                   10, "the leftover's command line")
        assert sweep_stale(ours) == [left.pid]
        assert left.wait(10) == -9
        assert spared.poll() is None
    finally:
        spared.kill()
        left.kill()
        spared.wait()
        left.wait()
