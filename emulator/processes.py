"""Small helpers for the child servers the emulator and its tools start (Triton, ``mme serve``)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a child gets when its parent dies


_PORT_CHOICE = random.Random()  # its own generator: a test's random.seed() must not repeat ports
_LOWEST_PORT = 10_000


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants as /proc shows them now.

    Any of them may exit while the tree is walked (a Triton stub at its model's unload): a
    process gone mid-walk is left out, never an error.
    """
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            threads = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for thread in threads:  # a child is listed under the thread that started it
            with contextlib.suppress(OSError, ValueError), \
                    open(f"/proc/{current}/task/{thread}/children", "rb") as children:
                todo.extend(int(c) for c in children.read().split())
    return found


def _ephemeral_ports() -> tuple[int, int]:
    """Linux's range for the local ports of outgoing connections (and of ``bind`` to port 0)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now, for a child server that must be told its port (Triton).

    Picked below the ephemeral range when there is room: a port the OS hands out for port 0 is
    also the local port of the next outgoing connections, and one of those (the suite makes
    thousands) could take it before the child binds it. Where a server accepts a listening
    socket, ``bound_socket`` leaves no such window at all.
    """
    low, _high = _ephemeral_ports()
    for _ in range(50) if low - _LOWEST_PORT >= 1_000 else ():
        port = _PORT_CHOICE.randrange(_LOWEST_PORT, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that are free now (``free_port``'s, none twice: a child told two
    ports that happen to be the same refuses to start)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


def bound_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket on ``host`` (port 0: the OS picks one), to hand to a server: unlike
    ``free_port`` no other process can take the port between the choice and the bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def dies_with_parent(command: Sequence[str], signum: signal.Signals = signal.SIGTERM
                     ) -> tuple[list[str], Callable[[], None] | None]:
    """``command`` (and the ``preexec_fn`` to start it with) so that it gets ``signum``
    (SIGTERM) when its parent dies: no orphan remains.

    ``setpriv --pdeathsig`` (util-linux, on every Linux) sets it and execs the command: no Python
    runs in the child between fork and exec. A ``preexec_fn`` would, and with it subprocess must
    fork() instead of vfork(): in a process whose other threads hold locks (gRPC's, the manager's
    Triton client) the child can crash or hang before exec (seen: a Triton that "exited with code
    -11 while starting", with no line of output). Where setpriv is missing: ``die_with_parent``.
    (The signal is set once setpriv runs, a few microseconds after the start returns: a parent
    killed within them leaves its child.)"""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, "--pdeathsig", signum.name.removeprefix("SIG"), *command], None
    if signum is signal.SIGTERM:
        return list(command), die_with_parent
    return list(command), lambda: die_with_parent(signum)


def die_with_parent(signum: signal.Signals = signal.SIGTERM) -> None:
    """``preexec_fn`` of a child process: ``signum`` (SIGTERM) to it when its parent dies, so no
    orphan remains (Linux only; elsewhere the call fails and is skipped)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)


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


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """SIGTERM (a server then stops what it started, its Triton), SIGKILL past ``timeout_s``."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def stopped_on_failure(process: subprocess.Popen[bytes], timeout_s: float = 60) -> Iterator[None]:
    """While a child starts: if waiting for it fails or is interrupted (Ctrl-C, SIGTERM), stop it
    (``stop_process``) before the error goes on, so nothing it started is left behind."""
    try:
        yield
    except BaseException:
        stop_process(process, timeout_s)
        raise
