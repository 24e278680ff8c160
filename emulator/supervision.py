"""A serving process the emulator starts and watches: a Triton (embedded or in docker) or a
SageMaker inference container. Beneath both triton/ and containers/, which each supervise their
own kind of process the same way: started, watched, restarted when it dies, its output read in
batches and its last lines quoted when it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fcntl
import logging
import os
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

RestartCallback = Callable[[], Awaitable[None]]

# Set while a reset stops every endpoint (``EndpointRegistry.clear``): what is stopped then is
# thrown away, so its processes are killed at once rather than asked to unload and exit.
STOPPING_AT_ONCE: contextvars.ContextVar[bool] = contextvars.ContextVar("stopping_at_once",
                                                                         default=False)


# Lines of a serving process's output kept for the messages that say why it died.
LOG_TAIL_LINES = 60
USAGE_LINE = b"Usage: "  # the first line of a usage text (tritonserver's, among others)
# Triton runs with --log-verbose=true (SageMaker's default): a few lines per inference, about
# 1.6 KB per call of the trivial model, 10 KB of the text ensemble. Its output is read at most
# once per LOG_BATCH_S, in chunks, not line by line as it is written: per-line wake-ups cost the
# emulator about 0.15 ms of CPU per call under load (``mme bench overhead``, CPU per call on the
# direct path). The pipe is enlarged (LOG_PIPE_BYTES, within the system's pipe-max-size) so that
# a batch's wait does not block Triton's writes: 1 MiB is a few hundred milliseconds of output at
# thousands of calls/s. Where the pipe stays small, or a batch filled a quarter of it, the next
# batch is read without waiting.
LOG_BATCH_S = 0.05
LOG_PIPE_BYTES = 1 << 20
# A "line" longer than this is cut (and kept) rather than buffered without limit.
MAX_LOG_LINE_BYTES = 1 << 20

class LauncherError(RuntimeError):
    """A serving process (Triton, a container) could not be started; the message says what to
    install, pull or fix."""


class SupervisedLauncher(ABC):
    """A launcher that starts its own serving process and restarts it when it dies (an embedded
    or docker Triton, a SageMaker container).

    Subclasses say how to start one (``_spawn``), how to wait for it to end
    (``_wait_for_exit``) and what to clean up after it (``_after_exit``); the watchdog, the
    restart count, ``on_restart`` and the log tail quoted when it dies are here, once.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._stopping = False
        self._watchdog: asyncio.Task[None] | None = None
        self._log_tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        self.on_restart: RestartCallback | None = None
        self.restarts = 0
        self.recycles = 0
        self._recycle_reason: str | None = None

    @abstractmethod
    async def _spawn(self) -> None:
        """Start the process and return once it is ready; LauncherError if it is not."""

    @abstractmethod
    async def _wait_for_exit(self) -> str | None:
        """Wait until the running process ends and describe its exit code; None if none runs."""

    @abstractmethod
    async def _after_exit(self) -> None:
        """Clean up what the dead process left (processes, shared memory, a container)."""

    async def _kill(self) -> None:
        """End the running process at once (SIGKILL): ``recycle`` does not wait for a stuck load.
        A launcher that cannot leaves it unimplemented and is never recycled."""
        raise NotImplementedError

    def _describe(self) -> str:
        """Names the running process in the log (e.g. with its container)."""
        return self._name

    async def recycle(self, reason: str) -> bool:
        if self._watchdog is None or self._stopping or not self.is_running():
            return False
        self._recycle_reason = reason
        try:
            await self._kill()
        except NotImplementedError:
            self._recycle_reason = None
            return False
        return True

    @abstractmethod
    def is_running(self) -> bool: ...

    def _start_watchdog(self) -> None:
        self._stopping = False
        self._watchdog = asyncio.create_task(self._watch(), name=f"{self._name}-watchdog")

    async def _stop_watchdog(self) -> None:
        self._stopping = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None

    async def _watch(self) -> None:
        while not self._stopping:
            described = self._describe()
            code = await self._wait_for_exit()
            if code is None or self._stopping:
                return
            await self._after_exit()
            self.restarts += 1
            recycled, self._recycle_reason = self._recycle_reason, None
            if recycled is not None:
                self.recycles += 1
                log.warning("%s recycled: %s; starting a new one (its models reload on demand)",
                            described, recycled)
            else:
                log.warning("%s died (exit code %s); restarting. Last lines:\n%s", described,
                            code, "\n".join(list(self._log_tail)[-10:]))
            try:
                await self._spawn()
            except LauncherError as exc:
                log.error("%s could not be restarted: %s", self._name, exc)
                return
            if self.on_restart is not None:
                await self.on_restart()


def output_pipe() -> tuple[int, int]:
    """A pipe (read end, write end) for a child's stdout/stderr, as large as the system allows."""
    read_end, write_end = os.pipe()  # both non-inheritable: the child gets it by dup2 only
    with contextlib.suppress(OSError):  # e.g. EPERM above a user's pipe-max-size
        fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, LOG_PIPE_BYTES)
    os.set_blocking(read_end, False)
    return read_end, write_end


async def pump_output(fd: int, tail: deque[str], logger: logging.Logger,
                      batch_s: float = LOG_BATCH_S) -> None:
    """Read a child's output from the non-blocking pipe ``fd`` until end of file (then close it):
    the last lines go to ``tail``, every line to ``logger`` at DEBUG when that is enabled.

    Reads are batched: once the pipe is readable, wait ``batch_s`` so that what the child writes
    meanwhile is read in one go (one wake-up per batch, however many lines it holds).
    """
    loop = asyncio.get_running_loop()
    pending = b""  # a line not yet ended
    try:
        capacity = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except OSError:
        capacity = 1 << 16  # Linux's default pipe
    wait_s = batch_s
    try:
        while True:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _resolve, readable)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
            if wait_s:
                await asyncio.sleep(wait_s)
            chunks = [pending]
            ended = False
            while True:
                try:
                    data = os.read(fd, LOG_PIPE_BYTES)
                except BlockingIOError:
                    break
                if not data:
                    ended = True
                    break
                chunks.append(data)
            data = b"".join(chunks)
            wait_s = batch_s if len(data) - len(chunks[0]) < capacity // 4 else 0.0
            end = data.rfind(b"\n")
            if ended:  # an unended last line counts as a line
                complete, pending = data[:-1] if end == len(data) - 1 else data, b""
            elif end >= 0:
                complete, pending = data[:end], data[end + 1:]
            elif len(data) > MAX_LOG_LINE_BYTES:
                complete, pending = data, b""
            else:
                pending = data
                continue
            if data:
                _take_lines(complete, tail, logger)
            if ended:
                return
    finally:
        os.close(fd)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _take_lines(complete: bytes, tail: deque[str], logger: logging.Logger) -> None:
    """``complete``: whole lines without the last newline. Without DEBUG logging only the lines
    the tail keeps are split off and decoded (a batch holds hundreds). A usage text is not kept:
    a child that refuses a flag says why in one line, then prints its usage (Triton's runs to
    390 lines), which would push that one line out of the tail."""
    if logger.isEnabledFor(logging.DEBUG):
        for raw in complete.split(b"\n"):
            logger.debug("%s", raw.decode(errors="replace").rstrip())
    usage = 0 if complete.startswith(USAGE_LINE) else complete.find(b"\n" + USAGE_LINE)
    if usage >= 0:
        complete = complete[:usage] + (b"\n" if usage else b"") + b"(its usage text left out)"
    start = len(complete)
    for _ in range(tail.maxlen if tail.maxlen is not None else len(complete) + 1):
        start = complete.rfind(b"\n", 0, start)
        if start < 0:
            break
    lines = complete[start + 1:].split(b"\n")
    tail.extend(raw.decode(errors="replace").rstrip() for raw in lines[-(tail.maxlen or 0):])


