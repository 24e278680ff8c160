"""glibc's malloc, tuned for a long-running server (``mme serve`` only).

Large buffers. glibc gives an allocation above its mmap threshold pages of its own and unmaps
them when it is freed, and it raises that threshold only up to the size last freed, so the next
body of the same size is mapped again and every page of it faults in, zeroed. A 5 MiB request
body meant a fresh 5 MiB per call: under ``mme bench overhead --workload binary`` the page
faults took more of the emulator's CPU than the copies did (about 10 ms per call, 4 ms with the
mmap threshold at glibc's largest, 32 MiB). A free heap top above ``TRIM_THRESHOLD_BYTES`` is
still given back to the system.

One arena. glibc gives threads arenas of their own; the worker threads that download, extract
and install models left theirs fragmented, and the resident memory grew as models came and
went: 107 -> 121 MiB from 100 to 600 models met under ``mme bench scale``'s budgets, while
the Python heap (tracemalloc) stayed at 52 MiB. With one arena: 106 -> 109 MiB. The request
path runs on one thread, so the shared arena's lock is rarely contended.

Other C libraries (musl, macOS) are left as they are.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

# mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc refuses more on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024
ARENAS = 1


def tune_malloc() -> bool:
    """Apply the settings to this process (before it starts threads); whether the C library
    took them."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    applied: bool = (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
                     and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
                     and mallopt(M_ARENA_MAX, ARENAS) == 1)
    log.debug("malloc %s", "tuned" if applied else "left as it is")
    return applied
