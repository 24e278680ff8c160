"""mme serve keeps multi-megabyte buffers in the heap: a body of the same size, again and again,
does not fault its pages in each time."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A 5 MiB body as the server gets it, 30 times: read in 256 KiB pieces, joined, freed.
# Prints whether the thresholds were applied and the page faults of the 30 bodies.
PROBE = """
import resource, sys
from emulator.malloc import keep_large_buffers
applied = keep_large_buffers() if sys.argv[1] == "tuned" else None
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


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    return out[0], int(out[1])


def test_a_repeated_5_mib_buffer_is_reused_not_faulted_in_again() -> None:
    applied, tuned = _faults("tuned")
    if applied != "True":
        pytest.skip("the C library has no glibc mallopt (musl, macOS): nothing to tune")
    _, untuned = _faults("default")
    pages = 30 * (5 << 20) // 4096  # the joined bodies alone
    assert untuned > pages  # glibc's default maps every piece and body afresh
    assert tuned < pages // 20
