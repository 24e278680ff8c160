"""``mme`` as a user runs it: serve in its own process, stop with SIGTERM, benchmark overhead."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.live_endpoint import EmulatorProcess
from tests.client_support import runtime_client
from tests.support import output_of, package, scale_request, wait_until, write_scale_model


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_serve_then_stop_leaves_no_orphans(tmp_path: Path, store: Path, stop_signal) -> None:  # type: ignore[no-untyped-def]
    package(write_scale_model(tmp_path / "repo", "m"), store / "m.tar.gz", "folder")
    settings = {"MME_MODEL_DATA": str(store), "MME_CACHE_DIR": str(tmp_path / "cache")}
    server = EmulatorProcess(settings, tmp_path / "serve.log", startup_timeout_s=120)
    try:
        server.start()
        resp = runtime_client(server.url).invoke_endpoint(
            EndpointName="local", TargetModel="m.tar.gz", Body=scale_request([1, 2, 3, 4]))
        np.testing.assert_allclose(output_of(resp["Body"].read()), [2, 4, 6, 8])
        tritons = _children(server.pid or 0)
        assert tritons, "Triton runs as a child of mme serve"
        stubs = set().union(*(_children(t) for t in tritons))
        # A clean stop on SIGTERM or Ctrl-C exits 0 (uvicorn's re-raise of the signal is harmless).
        assert server.stop(60, stop_signal) == 0
        _wait_all_gone(tritons | stubs, "mme serve")
    finally:
        server.stop()


def _wait_all_gone(pids: set[int], parent: str) -> None:
    try:
        wait_until(lambda: not any(_alive(pid) for pid in pids), 30, f"the children of {parent}")
    except AssertionError:
        left = [" ".join(_cmdline(pid)) or str(pid) for pid in pids if _alive(pid)]
        raise AssertionError(f"{left} outlived {parent}") from None


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        children = _children(todo.pop())
        found |= children
        todo.extend(children)
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


@pytest.mark.parametrize("command", [
    ["overhead", "--concurrency", "1", "--rounds", "100", "--seconds", "1"],
    ["scale", "--models", "50", "--skip-miss-cost"],
], ids=["overhead", "scale"])
def test_a_benchmark_stopped_by_sigterm_stops_what_it_started(command: list[str]) -> None:
    """A CI timeout or ``kill`` mid-benchmark: no server, relay, Triton or work folder left."""
    bench = subprocess.Popen([sys.executable, "-m", "mme", "bench", *command],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: set[int] = set()
    try:
        def tritons_running() -> bool:
            return any("tritonserver" in " ".join(_cmdline(p)) for p in _descendants(bench.pid))

        def bench_running() -> None:
            assert bench.poll() is None, "the benchmark exited before it started a Triton"

        wait_until(tritons_running, 120, "a Triton (measuring, or about to)",
                   still_going=bench_running)
        started = _descendants(bench.pid)
        serve = next(_cmdline(p) for p in started if "--cache-dir" in _cmdline(p))
        work = next(folder for folder in Path(serve[serve.index("--cache-dir") + 1]).parents
                    if folder.name.startswith(f"mme-bench-{command[0]}-"))
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(90) == 128 + signal.SIGTERM
        _wait_all_gone(started, "the benchmark")
        assert not work.exists(), "the benchmark's work folder was left behind"
    finally:
        if bench.poll() is None:
            bench.kill()
        for pid in started:  # what a failed run left: not for the next tests to meet
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_bad_settings_fail_with_a_message(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mme", "serve", "--memory-budget", "lots",
                             "--cache-dir", str(tmp_path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    assert "not a size: 'lots'" in result.stderr


def test_listen_fd_must_be_a_listening_socket(tmp_path: Path) -> None:
    import socket

    def serve(fd: int, **kwargs) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
        return subprocess.run([sys.executable, "-m", "mme", "serve", "--listen-fd", str(fd),
                               "--cache-dir", str(tmp_path)], capture_output=True, text=True,
                              timeout=60, **kwargs)

    closed = serve(99)
    assert closed.returncode == 2
    assert "--listen-fd 99: not an open socket" in closed.stderr
    with socket.socket() as bound_only:
        bound_only.bind(("127.0.0.1", 0))
        not_listening = serve(bound_only.fileno(), pass_fds=(bound_only.fileno(),))
    assert not_listening.returncode == 2
    assert "the socket is not listening" in not_listening.stderr
