"""Large request bodies reach Triton through shared memory instead of its socket.

A 5 MiB binary+json body costs the machine a copy into the socket to Triton, one out of it and
Triton's HTTP frontend gathering the pieces; on two cores that made the emulator's path about
x0.65 of direct Triton's throughput (``mme bench overhead --workload binary``). Triton's system
shared memory API takes the tensor bytes from a region both processes map: the emulator copies
the binary section of the body into the region once and sends Triton a few hundred bytes of
JSON naming where each input lies.

The answer must be the one Triton gives the body over HTTP, so only bodies whose every binary
input Triton would take as sent go this way (``shared_header``): a fixed-size datatype and
``binary_data_size`` equal to its shape's size (Triton does not check that size against the
shape for shared memory), and binary sizes adding up to the body. Anything else, and BYTES
tensors, goes over HTTP as it came, so Triton answers it with its own words.

The region (``Region``) is a file in Triton's ``/dev/shm``, reached through ``/proc/<pid>/root``:
the embedded launcher's private tmpfs, or a local container's own (the launchers' property
``shared_memory_dir``). It is unlinked as soon as Triton has mapped
it, so it vanishes with the last of the two mappings, whatever way either process ends. Pieces
are lent per request and given back when the call ends, answered or not. When the region is
full a body waits, first come first served, for the pieces in-flight calls give back rather than
going over HTTP: under ``mme bench overhead --workload binary --concurrency 32`` (5 MiB bodies,
a 64 MiB region) the overflow sent over HTTP cost Triton and the emulator more CPU than the
whole call through shared memory, x0.72 of direct Triton's throughput; waiting, x0.9. The
bodies that come while the region is being made wait for it too (``TritonClient``). Only a
body longer than the whole region goes over HTTP. After a timeout Triton
may still read a piece that is by then another request's, but Triton only reads inputs, so the
other request's bytes stay intact and only the abandoned call, whose answer nobody receives,
computes on them.
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import itertools
import json
import logging
import math
import mmap
import os
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from emulator.settings import MIN_SHARED_BODY_BYTES

log = logging.getLogger(__name__)

# Bodies smaller than this go over HTTP. `mme bench overhead --workload binary --binary-size S`
# with and without `--serve-flag=--triton-shared-memory=0`, concurrency 1 and 8: at 64 KiB shared
# memory was a little ahead (x0.39 / x0.60 of direct against x0.36 / x0.58) and ahead by far from
# 256 KiB (x0.49 / x0.63 against x0.44 / x0.51; at 1 MiB x0.76 / x0.78 against x0.58 / x0.56);
# at 16 KiB it lost at 8 (x0.60 against x0.67).
MIN_BODY_BYTES = MIN_SHARED_BODY_BYTES  # the figure lives in settings (its flag's floor)
# Where each piece starts: a cache line, so tensors are as aligned as Triton's own buffers.
ALIGNMENT = 64
REGION_NAME = "mme-request-bodies"

# Bytes per element of KServe's fixed-size datatypes (BYTES tensors are length-prefixed).
ELEMENT_BYTES = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2,
                 "BF16": 2, "UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8,
                 "FP64": 8}

_keys = itertools.count(1)


def shared_header(header: bytes, binary_bytes: int, region: str, offset: int) -> bytes | None:
    """The KServe JSON ``header`` with its binary inputs read from ``region`` at ``offset`` on,
    in order, or None when Triton could read the body differently over HTTP.

    ``binary_bytes`` is the length of the body after the header.
    """
    try:
        request = json.loads(header)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        return None
    position = 0
    for tensor in request["inputs"]:
        if not isinstance(tensor, dict):
            return None
        parameters = tensor.get("parameters", {})
        if not isinstance(parameters, dict) or any(key.startswith("shared_memory_")
                                                   for key in parameters):
            return None  # malformed, or the client's own region: Triton's to answer
        if "binary_data_size" not in parameters:
            continue  # a JSON input
        size = _binary_size(tensor, parameters)
        if size is None:
            return None
        rest = {key: value for key, value in parameters.items() if key != "binary_data_size"}
        tensor["parameters"] = {**rest, "shared_memory_region": region,
                                "shared_memory_byte_size": size,
                                "shared_memory_offset": offset + position}
        position += size
    if position == 0 or position != binary_bytes:
        return None
    return json.dumps(request, separators=(",", ":")).encode()


def _binary_size(tensor: dict[str, Any], parameters: dict[str, Any]) -> int | None:
    """The input's ``binary_data_size`` if it is exactly what its datatype and shape take."""
    size = parameters["binary_data_size"]
    element = ELEMENT_BYTES.get(tensor.get("datatype", ""))  # no datatype: no size
    shape = tensor.get("shape")
    if element is None or "data" in tensor or not isinstance(shape, list):
        return None
    if not all(type(dim) is int and dim >= 0 for dim in shape):
        return None
    if type(size) is not int or size != math.prod(shape) * element:
        return None
    return size


class Region:
    """One shared-memory region registered with a Triton, lent out in pieces."""

    def __init__(self, memory: mmap.mmap, key: str) -> None:
        self.name = REGION_NAME
        self.key = key  # Triton's name for the file (shm_open's), until it is unlinked
        self.size = len(memory)
        self._memory = memory
        self._free: list[tuple[int, int]] = [(0, self.size)]  # (start, length), by start
        self._lent: dict[int, int] = {}
        # Calls waiting for room, first come first served: (aligned length, their offset).
        self._waiters: deque[tuple[int, asyncio.Future[int | None]]] = deque()

    @classmethod
    def create(cls, shm_dir: Path, size: int) -> tuple[Region, Path]:
        """A new region of ``size`` bytes in ``shm_dir`` (Triton's /dev/shm) and its file,
        to be registered with Triton under ``region.key`` and then unlinked.

        The pages are allocated now: a write to a page a full tmpfs cannot give is a SIGBUS,
        which would end the emulator. Where the tmpfs has less than twice ``size`` free (a
        container's 64 MiB /dev/shm), no region is made: Triton's Python backend needs room there.
        """
        free = os.statvfs(shm_dir)
        if free.f_bavail * free.f_frsize < 2 * size:
            raise OSError(errno.ENOSPC, f"less than {2 * size >> 20} MiB free in {shm_dir}")
        name = f"mme-bodies-{os.getpid()}-{next(_keys)}"
        path = shm_dir / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
            memory = mmap.mmap(fd, size)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return cls(memory, f"/{name}"), path

    def lend(self, length: int) -> int | None:
        """The offset of ``length`` free bytes now the caller's, or None if none are free."""
        return self._lend(_aligned(length))

    def _lend(self, need: int) -> int | None:
        for index, (start, free) in enumerate(self._free):
            if free >= need:
                if free == need:
                    del self._free[index]
                else:
                    self._free[index] = (start + need, free - need)
                self._lent[start] = need
                return start
        return None

    async def lend_when_free(self, length: int, timeout: float | None = None) -> int | None:
        """The offset of ``length`` bytes now the caller's, once calls ahead of it have given
        back room; None at once if the region could never hold them, or when it is closed.
        asyncio.TimeoutError past ``timeout`` seconds."""
        need = _aligned(length)
        if need > self.size or self.closed:
            return None
        if not self._waiters:
            offset = self._lend(need)
            if offset is not None:
                return offset
        waiter: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiters.append((need, waiter))
        try:
            return await asyncio.wait_for(waiter, timeout)
        except BaseException:  # timed out, or the call was cancelled
            lent = waiter.result() if waiter.done() and not waiter.cancelled() else None
            if lent is not None:
                self.give_back(lent)  # lent just as the wait ended
            elif (need, waiter) in self._waiters:
                self._waiters.remove((need, waiter))
                self._serve_waiters()  # it may have held up smaller bodies behind it
            raise

    def give_back(self, offset: int) -> None:
        """The call that used the piece at ``offset`` has ended: lend it again."""
        length = self._lent.pop(offset)
        index = bisect.bisect(self._free, (offset, length))
        if index < len(self._free) and self._free[index][0] == offset + length:
            length += self._free.pop(index)[1]  # joins the free piece after it
        if index and sum(self._free[index - 1]) == offset:
            start, before = self._free[index - 1]
            self._free[index - 1] = (start, before + length)  # joins the free piece before it
        else:
            self._free.insert(index, (offset, length))
        self._serve_waiters()

    def _serve_waiters(self) -> None:
        """Lend to the waiting calls in order, as long as the first of them fits."""
        waiters = self._waiters
        while waiters:
            need, waiter = waiters[0]
            if waiter.done():  # cancelled, not yet out of the queue
                waiters.popleft()
                continue
            offset = self._lend(need)
            if offset is None:
                return
            waiters.popleft()
            waiter.set_result(offset)

    def write(self, offset: int, pieces: Iterable[bytes | memoryview]) -> None:
        """Copy ``pieces`` one after the other into the region from ``offset`` on."""
        for piece in pieces:
            end = offset + len(piece)
            self._memory[offset:end] = piece
            offset = end

    @property
    def closed(self) -> bool:
        return self._memory.closed

    @property
    def free_bytes(self) -> int:
        return sum(length for _start, length in self._free)

    def close(self) -> None:
        """Unmap the region; calls waiting for room go over HTTP (``lend_when_free``: None)."""
        while self._waiters:
            waiter = self._waiters.popleft()[1]
            if not waiter.done():
                waiter.set_result(None)
        self._memory.close()


def _aligned(length: int) -> int:
    return -(-length // ALIGNMENT) * ALIGNMENT or ALIGNMENT
