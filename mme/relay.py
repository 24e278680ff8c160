"""A bare TCP relay: the floor under any proxy's cost, for ``mme bench overhead``.

Each client connection gets its own connection to the upstream address, and bytes are copied
both ways as they arrive, on the same event loop (uvloop) as ``mme serve``, with no HTTP parsing
and no other work. Whatever a call through it costs over a direct call is what one more process
on the path costs on this machine (two more socket reads and writes, and the wake-ups between
processes), before a proxy does anything of its own.

    python -m mme.relay --fd FD --to HOST:PORT    (FD: a listening socket, inherited)
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
from typing import cast

import uvloop


class _Half(asyncio.Protocol):
    """One side of a relayed connection: what it receives is written to its peer's transport,
    and its reading pauses while the peer cannot take more (so a large body is not buffered)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not asyncio's class

    def data_received(self, data: bytes) -> None:
        assert self.peer is not None and self.peer.transport is not None
        self.peer.transport.write(data)

    def pause_writing(self) -> None:  # our transport is full: stop reading the peer
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Client(_Half):
    """The accepted side: it opens its upstream connection and holds what arrives until then."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__()
        self.upstream = upstream
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.early.append(data)
            if self.transport is not None:
                self.transport.pause_reading()
            return
        super().data_received(data)

    async def _connect(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:
            upstream_transport, upstream = await loop.create_connection(_Half, *self.upstream)
        except OSError:
            self.transport.close()
            return
        if self.transport.is_closing():  # the client left meanwhile
            upstream_transport.close()
            return
        upstream.peer, self.peer = self, upstream
        assert upstream.transport is not None
        upstream.transport.writelines(self.early)
        self.early.clear()
        self.transport.resume_reading()


async def serve(listening: socket.socket, upstream: tuple[str, int]) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set_result, None)
    server = await loop.create_server(lambda: _Client(upstream), sock=listening)
    async with server:
        await stop


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m mme.relay", description=__doc__.split("\n")[0])
    parser.add_argument("--fd", type=int, required=True, help="an inherited listening socket")
    parser.add_argument("--to", required=True, metavar="HOST:PORT", help="the upstream address")
    args = parser.parse_args()
    host, _, port = args.to.rpartition(":")
    listening = socket.socket(fileno=args.fd)
    uvloop.run(serve(listening, (host, int(port))))


if __name__ == "__main__":
    main()
