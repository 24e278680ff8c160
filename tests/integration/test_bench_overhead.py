"""``mme bench overhead``: every path at each concurrency, driven by wrk or by Python."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROW = re.compile(r"^\s*(\d+)?\s+(direct|relay|server|emulator)\s+([\d.]+)\s+([\d.]+)\s+(\d+)"
                 r"\s+(\d+)\s+([\d.]+|-)\s+([\d.]+|-)", re.MULTILINE)


def _bench(*flags: str) -> str:
    # Two seconds a path: on a loaded runner a path's first calls can take most of one.
    done = subprocess.run([sys.executable, "-m", "mme", "bench", "overhead", "--seconds", "2",
                           "--rounds", "1", "--concurrency", "1,4", *flags],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("driver", ["wrk", "python"])
def test_every_path_at_each_concurrency_without_errors(driver: str) -> None:
    if driver == "wrk" and shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (make wrk)")
    out = _bench("--driver", driver)
    assert f"driver {driver}" in out
    rows = ROW.findall(out)
    assert [(r[0], r[1]) for r in rows] == [
        ("1", "direct"), ("", "relay"), ("", "server"), ("", "emulator"),
        ("4", "direct"), ("", "relay"), ("", "server"), ("", "emulator")]
    for _conc, _path, p50, p99, calls, errors, own_cpu, triton_cpu in rows:
        assert 0 < float(p50) <= float(p99), out
        assert int(calls) > 0 and int(errors) == 0, out
        assert own_cpu != "-" and triton_cpu != "-", out  # the floors and Triton measured too
    ratios = re.findall(r"throughput x([\d.]+)", out)
    assert len(ratios) == 6 and all(float(r) > 0 for r in ratios)
    assert "through shared memory: 0 (all over HTTP)" in out  # a small JSON body


def test_a_large_binary_body_is_measured_through_shared_memory() -> None:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (make wrk)")
    out = _bench("--workload", "binary", "--binary-size", "1MiB", "--concurrency", "1")
    assert "1 MiB FP32 binary+json body" in out
    assert [r[1] for r in ROW.findall(out)] == ["direct", "relay", "server", "emulator"]
    shared = re.search(r"through shared memory: (\d+)", out)
    assert shared is not None and int(shared.group(1)) > 0, out


def test_record_on_against_off_in_one_run() -> None:
    """``--record``: the same tree with and without ``--record FILE`` and a control server
    without it, rounds alternating; the noise (control against baseline) printed beside the
    cost; the recording server wrote a line for every call it answered."""
    out = _bench("--record", "--record-bodies", "--driver", "python", "--concurrency", "2")
    assert "--record off (baseline)" in out and "--record on with bodies (current)" in out
    assert re.search(r"concurrency 2: --record costs [+-][\d.]+ % of calls/s \(two identical "
                     r"servers differ by [+-][\d.]+ % in the same rounds\)", out), out
    assert re.search(r"^\s+2 control\s+[\d.]+\s+[\d.]+\s+\d+\s+0\b", out, re.MULTILINE), out
    calls = {side: int(n) for side, n in re.findall(r"^\s+2 (baseline|current)\s+[\d.]+\s+"
                                                   r"[\d.]+\s+(\d+)\s+0\b", out, re.MULTILINE)}
    lines = int(re.search(r"recorded lines: ([\d,]+)", out).group(1).replace(",", ""))
    assert set(calls) == {"baseline", "current"} and lines > 0
