"""Small helpers for the child servers the emulator and its tools start (Triton, ``mme serve``)."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import time
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a child gets when its parent dies


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now (the OS picks it); good enough for child servers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    """``preexec_fn`` of a child process: SIGTERM it when its parent dies, so no orphan remains
    (Linux only; elsewhere the call fails and is skipped)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def wait_until(ready: Callable[[], bool], timeout_s: float, *,
               still_starting: Callable[[], None] | None = None,
               interval_s: float = 0.05) -> bool:
    """Poll ``ready`` until it is true (True) or ``timeout_s`` passes (False).

    ``still_starting`` runs between polls and raises when what is awaited is gone (the process
    exited, the thread ended), so a crash is reported at once rather than at the deadline.
    ``emulator.triton.launcher.wait_until_ready`` is its asynchronous twin for Triton.
    """
    deadline = time.monotonic() + timeout_s
    while not ready():
        if still_starting is not None:
            still_starting()
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True
