"""mme serve's malloc settings (``emulator/malloc.py``), each shown in a fresh process: a body
of the same size again and again is not faulted in each time, and threads share one arena."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A 5 MiB body as the server gets it, 30 times: read in 256 KiB pieces, joined, freed.
# Prints whether the settings were applied and the page faults of the 30 bodies.
FAULTS = """
import resource, sys
from emulator.malloc import tune_malloc
applied = tune_malloc() if sys.argv[1] == "tuned" else None
def body():
    pieces = [bytes(256 << 10) for _ in range(20)]
    joined = b"".join(pieces)
    del pieces, joined
body()  # the first one faults in either case
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30):
    body()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

# Four threads allocating at once (as the download and extraction workers do), then glibc's
# malloc_stats(), which writes one "Arena N:" block per arena to stderr.
ARENAS = """
import ctypes, sys, threading
from emulator.malloc import tune_malloc
applied = tune_malloc() if sys.argv[1] == "tuned" else None
together = threading.Barrier(4)
def work():
    held = [bytes(4000) for _ in range(100)]  # above pymalloc's limit: glibc's malloc
    together.wait()
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(applied, flush=True)
ctypes.CDLL(None).malloc_stats()
"""


def _run(probe: str, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True,
                          check=True, timeout=60)


def _needs_glibc() -> None:
    if _run("from emulator.malloc import tune_malloc; print(tune_malloc())",
            "tuned").stdout.strip() != "True":
        pytest.skip("the C library has no glibc mallopt (musl, macOS): nothing to tune")


def test_a_repeated_5_mib_buffer_is_reused_not_faulted_in_again() -> None:
    _needs_glibc()
    tuned = int(_run(FAULTS, "tuned").stdout.split()[1])
    untuned = int(_run(FAULTS, "default").stdout.split()[1])
    pages = 30 * (5 << 20) // 4096  # the joined bodies alone
    assert untuned > pages  # glibc's default maps every piece and body afresh
    assert tuned < pages // 20


def test_threads_share_one_arena() -> None:
    _needs_glibc()
    assert _run(ARENAS, "default").stderr.count("Arena ") > 1  # glibc's default: one per thread
    assert _run(ARENAS, "tuned").stderr.count("Arena ") == 1
