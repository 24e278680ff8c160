"""uvicorn's httptools protocol, sending a response's head and body in one write and taking a
request body in without copying it piece by piece.

uvicorn writes the status line and headers when the app sends ``http.response.start`` and the
body when it sends ``http.response.body``: two sends on the socket per response. On loopback a
send also does the receiving side's TCP work and wakes the client up once more. Here writes made
during one step of the event loop are kept and sent together (one ``writev``) right after that
step, by a callback queued on the first of them, or as soon as the response is complete,
whichever comes first. Nothing waits longer than that step: a streamed response still goes out
chunk by chunk and a ``100 Continue`` is not held back. Sending a complete response at once lets
the request path leave its bookkeeping (metrics) to the loop's next callbacks, after the write.

Bodies: uvicorn appends each piece httptools hands it to a bytearray, stops reading past 64 KiB
until the app asks for the body, and gives the app ``bytes(bytearray)``: a 5 MiB InvokeEndpoint
body took some eighty pauses and wake-ups and three copies before our code saw it. Here pieces
are kept as they come (``GatheredBody``) up to ``BODY_HIGH_WATER``, more than SageMaker's 6 MB
payload, and the app is woken once, with the body joined, when it is complete (a chunked body,
whose length nobody declared, still wakes it for each piece). InvokeEndpoint answered directly
gets the pieces themselves, not joined (``received_pieces``; ``emulator/contract/body.py``).

``mme bench overhead`` measures it (the emulator's CPU per call).
"""

from __future__ import annotations

import asyncio
import functools
import operator
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import (
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

# uvicorn's private code that this module and ``shutdown_protocol.py`` extend or re-implement,
# by the digest of its source in the uvicorn release they were written against (pyproject.toml
# pins that release). ``uvicorn_internals_moved`` names what changed, so that a newer uvicorn
# fails a test with a message (tests/unit/test_uvicorn_internals.py) rather than serving
# subtly wrong answers; ``emulator/server.py`` falls back to uvicorn's own protocol then.
UVICORN_TESTED = "0.54.0"
_UVICORN_SOURCES = {
    "HttpToolsProtocol.connection_made": "6efb565ff3d36b91",
    "HttpToolsProtocol.on_body": "dba9c32aeba35b6a",  # re-implemented in on_body
    "HttpToolsProtocol.on_response_complete": "64e254f28e389e76",
    "HttpToolsProtocol._start_asgi_task": "9c08c2571ae9b038",
    "HttpToolsProtocol.shutdown": "d7351fa33f00d430",
    "HttpToolsProtocol.connection_lost": "c91a4c9bf2e29c55",
    "RequestResponseCycle.__init__": "4d2f220910c33c12",  # the attributes we read and set
    "RequestResponseCycle.receive": "8124ae006be71184",  # re-implemented in received_pieces
    "RequestResponseCycle.send": "abdd8601b326a8da",  # re-implemented in _write_directly
}


def uvicorn_internals_moved() -> list[str]:
    """What of uvicorn's private code differs from the release this module was written against
    (empty: all as expected)."""
    import hashlib
    import inspect

    import uvicorn
    from uvicorn.protocols.http import httptools_impl

    moved = []
    for qualname, digest in _UVICORN_SOURCES.items():
        owner, _, name = qualname.partition(".")
        function = getattr(getattr(httptools_impl, owner, None), name, None)
        source = inspect.getsource(function) if function is not None else ""
        if hashlib.sha256(source.encode()).hexdigest()[:16] != digest:
            moved.append(f"uvicorn {uvicorn.__version__} changed {qualname} (written against "
                         f"{UVICORN_TESTED}): check emulator/http_protocol.py and "
                         "emulator/shutdown_protocol.py against the new code, then update "
                         "_UVICORN_SOURCES and the pin in pyproject.toml")
    return moved


# A complete answer: status, raw headers (Content-Length among them), body.
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
# The next part of a request body: its pieces, and whether more follows. ClientDisconnect if the
# client has gone.
BodySource = Callable[[], Awaitable[tuple[Sequence[bytes], bool]]]
# Answers a request without ASGI (the app's ``direct_answer`` says which requests).
DirectAnswer = Callable[[Scope, BodySource], Awaitable[Answer]]
# Told of each direct answer before it is written (the app's ``direct_answered``, if any): a
# call, not one more coroutine around the answer, whose every resume would pass through it.
Answered = Callable[[Scope, int, list[tuple[bytes, bytes]], bytes], None]


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

    def write_complete(self, data: bytes) -> None:
        """A complete response: sent now, after what this step kept before it. Nothing more of
        it can come to join, so no callback is queued (one fewer per directly answered call)."""
        if self._pending is not None:
            self._pending.append(data)
            self.flush()
        elif not self._transport.is_closing():
            self._transport.write(data)

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


# Body bytes kept for the app before reading from the client pauses (uvicorn's: 64 KiB).
BODY_HIGH_WATER = 8 * 1024 * 1024


class GatheredBody:
    """What uvicorn's request cycle keeps of a body not yet received, as its pieces.

    The cycle only measures it (``len``), hands it over (``bytes``, one join) and starts a new
    one (a bytearray, which ``on_body`` replaces with one of these). ``received_pieces`` hands
    over the pieces themselves.
    """

    __slots__ = ("_pieces", "_size", "sized")

    def __init__(self, sized: bool) -> None:
        self._pieces: list[bytes] = []
        self._size = 0
        self.sized = sized  # the request declared its length (else: chunked)

    def append(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._size += len(piece)

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        pieces = self._pieces
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    @property
    def pieces(self) -> list[bytes]:
        return self._pieces


class EmulatorHttpProtocol(HttpToolsProtocol):
    """uvicorn's HttpToolsProtocol on a ``CoalescingTransport``, which sends a response as soon
    as it is complete, keeping a request body as the pieces it arrives in."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's: asyncio's takes a BaseTransport
        self._coalescing = CoalescingTransport(transport, self.loop)
        super().connection_made(self._coalescing)  # type: ignore[arg-type]  # has the Transport methods uvicorn calls

    def on_body(self, body: bytes) -> None:
        # uvicorn's on_body, with the pieces kept whole and a higher mark before pausing.
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        kept: object = cycle.body  # uvicorn's fresh bytearray, or what we put there
        if isinstance(kept, GatheredBody):
            gathered = kept
        else:
            gathered = GatheredBody(any(name == b"content-length" for name, _ in self.headers))
            if cycle.body:
                gathered.append(bytes(cycle.body))
            cycle.body = gathered  # type: ignore[assignment]  # uvicorn only len()s and bytes() it
        gathered.append(body)
        if len(gathered) > BODY_HIGH_WATER:
            self.flow.pause_reading()
            cycle.message_event.set()
        elif not gathered.sized:
            # A chunked body may never end: the app sees each piece, so that it can refuse
            # one that grows past its limit.
            cycle.message_event.set()
        # Else the app is woken when the body is complete (on_message_complete): it gets the
        # body in one piece, not a piece per read from the socket. (A declared length over
        # the app's limit is refused before the body is read.)

    def on_response_complete(self) -> None:
        self._coalescing.flush()  # nothing more to join it with
        super().on_response_complete()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # Every request starts here, pipelined ones too. ``app`` is not ``self.app`` when
        # uvicorn answers itself (its concurrency limit).
        direct_answer = getattr(self.app, "direct_answer", None)
        answer = direct_answer(cycle.scope) if direct_answer and app is self.app else None
        if answer is not None:
            app = functools.partial(_write_directly, cycle, answer,
                                    getattr(self.app, "direct_answered", None))
        super()._start_asgi_task(cycle, app)


async def received_pieces(cycle: RequestResponseCycle) -> tuple[Sequence[bytes], bool]:
    """What ``RequestResponseCycle.receive`` would hand the app next, as the pieces kept instead
    of their join (the same 100 Continue, flow control and disconnect)."""
    if cycle.waiting_for_100_continue and not cycle.transport.is_closing():
        cycle.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        cycle.waiting_for_100_continue = False
    if not cycle.disconnected and not cycle.response_complete:
        cycle.flow.resume_reading()
        await cycle.message_event.wait()
        cycle.message_event.clear()
    if cycle.disconnected or cycle.response_complete:
        raise ClientDisconnect()
    kept: bytearray | GatheredBody = cycle.body  # uvicorn's bytearray until a piece came
    cycle.body = bytearray()
    if isinstance(kept, GatheredBody):
        return kept.pieces, cycle.more_body
    return ((bytes(kept),) if kept else ()), cycle.more_body


_value_of = operator.itemgetter(1)  # of a (name, value) header pair


async def _write_directly(cycle: RequestResponseCycle, answer: DirectAnswer,
                          answered: Answered | None, scope: Scope, _receive: Receive,
                          _send: Send) -> None:
    """Run as uvicorn's ASGI app (so its handling of an exception, a 500, still applies): the
    answer is written as ``RequestResponseCycle.send`` writes one (the same header-value check),
    in one go, without the ASGI messages and the app's middleware layers. Measured with the
    batched metrics of the same change: 3 % less CPU per call (docs/benchmarks.md)."""
    status, headers, body = await answer(scope, functools.partial(received_pieces, cycle))
    if answered is not None:
        answered(scope, status, headers, body)
    if cycle.flow.write_paused and not cycle.disconnected:
        await cycle.flow.drain()
    if cycle.disconnected:
        return
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    lines = (*cycle.default_headers, *headers)
    # Every value at once (the pattern is one byte class, so joining changes nothing it finds):
    # a relayed value (custom attributes) could carry a byte HTTP cannot. The head is built by
    # joins over maps, in C: no Python loop per header.
    if HEADER_VALUE_RE.search(b"".join(map(_value_of, lines))):
        raise RuntimeError("Invalid HTTP header value.")
    head = [STATUS_LINE[status]]
    if lines:
        head += (b"\r\n".join(map(b": ".join, lines)), b"\r\n")
    if not cycle.keep_alive:
        head.append(b"connection: close\r\n")
    head += (b"\r\n", body)
    transport = cycle.transport
    if isinstance(transport, CoalescingTransport):
        transport.write_complete(b"".join(head))
    else:
        transport.write(b"".join(head))
    cycle.response_complete = True
    cycle.message_event.set()
    if not cycle.keep_alive:
        cycle.transport.close()
    cycle.on_response()
