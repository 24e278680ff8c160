"""uvicorn's httptools protocol, sending a response's head and body in one write.

uvicorn writes the status line and headers when the app sends ``http.response.start`` and the
body when it sends ``http.response.body``: two sends on the socket per response. On loopback a
send also does the receiving side's TCP work and wakes the client up once more. Here writes made
during one step of the event loop are kept and sent together (one ``writev``) right after that
step, by a callback queued on the first of them, or as soon as the response is complete,
whichever comes first. Nothing waits longer than that step: a streamed response still goes out
chunk by chunk and a ``100 Continue`` is not held back. Sending a complete response at once lets
the request path leave its bookkeeping (metrics) to the loop's next callbacks, after the write.

``mme bench overhead`` measures it (the emulator's CPU per call).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """A transport whose writes in one loop step reach the socket as one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._pending is None:
            self._pending = [data]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what is kept now."""
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.writelines(pending)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending or ()))

    def close(self) -> None:
        self.flush()  # asyncio's close() sends what is buffered first; so does this one
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    # Called for every request by uvicorn: spelled out rather than found by __getattr__.
    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class EmulatorHttpProtocol(HttpToolsProtocol):
    """uvicorn's HttpToolsProtocol on a ``CoalescingTransport``, which sends a response as soon
    as it is complete."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._coalescing = CoalescingTransport(transport, self.loop)
        super().connection_made(self._coalescing)  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        self._coalescing.flush()  # nothing more to join it with
        super().on_response_complete()
