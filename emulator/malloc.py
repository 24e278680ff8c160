"""glibc's malloc, tuned for a server that takes multi-megabyte bodies (``mme serve`` only).

glibc gives an allocation above its mmap threshold pages of its own and unmaps them when it is
freed, and it raises that threshold only up to the size last freed, so the next body of the
same size is mapped again and every page of it faults in, zeroed. A 5 MiB request body meant a
fresh 5 MiB per call: under ``mme bench overhead --workload binary`` the page faults took more
of the emulator's CPU than the copies did (about 10 ms per call, 4 ms with these settings).

With the mmap threshold at glibc's largest (32 MiB) such buffers come from the heap and are
reused; a free heap top above ``TRIM_THRESHOLD_BYTES`` is still given back to the system.
Other C libraries (musl, macOS) are left as they are.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

# mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc refuses more on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024


def keep_large_buffers() -> bool:
    """Apply the thresholds to this process; whether the C library took them."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    applied: bool = (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
                     and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1)
    log.debug("malloc thresholds %s", "raised" if applied else "left as they are")
    return applied
