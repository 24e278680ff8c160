"""A response's head and body leave in one write; nothing is held past its event loop step."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from emulator.http_protocol import BODY_HIGH_WATER, CoalescingTransport, EmulatorHttpProtocol
from emulator.processes import bound_socket
from tests.support import wait_until


class RecordingTransport:
    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []
        self.closed = False
        self.aborted = False

    def writelines(self, lines: list[bytes]) -> None:
        self.sent.append(list(lines))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0


def test_writes_of_one_step_are_sent_together_and_later_ones_apart() -> None:
    async def scenario() -> RecordingTransport:
        raw = RecordingTransport()
        transport = CoalescingTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b"body")
        assert raw.sent == []  # not before the step ends
        assert transport.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\n") + 4
        await asyncio.sleep(0)
        assert raw.sent == [[b"HTTP/1.1 200 OK\r\n\r\n", b"body"]]
        transport.write(b"next")
        await asyncio.sleep(0)
        transport.write(b"last")
        transport.close()  # sends what is kept first, as asyncio's close does
        return raw

    raw = asyncio.run(scenario())
    assert raw.sent[1:] == [[b"next"], [b"last"]] and raw.closed


def test_abort_drops_what_is_kept() -> None:
    async def scenario() -> RecordingTransport:
        raw = RecordingTransport()
        transport = CoalescingTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        transport.write(b"never sent")
        transport.abort()
        await asyncio.sleep(0)
        return raw

    raw = asyncio.run(scenario())
    assert raw.sent == [] and raw.aborted


# --- on a real uvicorn --------------------------------------------------------------------------

chunk_read = threading.Event()
answer_read = threading.Event()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/first-piece":  # answers without waiting for the rest of the body
        first = await receive()
        answer = b"first piece: %d" % len(first["body"])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer})
        return
    body = b""
    more = True
    messages = 0
    while more:
        message = await receive()
        assert type(message.get("body", b"")) is bytes  # as ASGI says, whatever we keep
        body += message.get("body", b"")
        more = message.get("more_body", False)
        messages += 1
    if scope["path"] == "/count":
        answer = b"%d messages, %s" % (messages, hashlib.sha256(body).hexdigest().encode())
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer})
        return
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first;", "more_body": True})
        # The second chunk only once the client has read the first: a held chunk would hang.
        await asyncio.get_running_loop().run_in_executor(None, chunk_read.wait, 30)
        await send({"type": "http.response.body", "body": b"second"})
        return
    answer = b"echo:" + body
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(answer)).encode())]})
    await send({"type": "http.response.body", "body": answer})
    if scope["path"] == "/then-block":
        # The loop is held here, so the answer must already have left with the last send.
        assert answer_read.wait(30), "the complete response waited for the app's next step"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    listening = bound_socket("127.0.0.1", 0)
    config = uvicorn.Config(app, http=EmulatorHttpProtocol, log_level="warning",
                            lifespan="off")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, args=([listening],), daemon=True)
    thread.start()
    wait_until(lambda: uv.started, what="uvicorn to start")
    try:
        yield listening.getsockname()
    finally:
        uv.should_exit = True
        thread.join(30)
        listening.close()


def _connect(address: tuple[str, int]) -> socket.socket:
    client = socket.create_connection(address, timeout=30)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client


def _read_until(client: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = client.recv(65536)
        assert chunk, f"connection closed before {marker!r}: {data!r}"
        data += chunk
    return data


def test_answers_again_on_the_kept_alive_connection(server: tuple[str, int]) -> None:
    with _connect(server) as client:
        for body in (b"hi", b"there"):
            client.sendall(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(body), body))
            answer = _read_until(client, b"echo:" + body)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"echo:" + body)


def test_100_continue_is_sent_before_the_body_comes(server: tuple[str, int]) -> None:
    with _connect(server) as client:
        client.sendall(b"POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                       b"Content-Length: 5\r\n\r\n")
        assert _read_until(client, b"\r\n\r\n").startswith(b"HTTP/1.1 100 Continue\r\n")
        client.sendall(b"hello")
        assert _read_until(client, b"echo:hello").startswith(b"HTTP/1.1 200 OK\r\n")


def test_a_streamed_chunk_is_not_held_until_the_response_ends(server: tuple[str, int]) -> None:
    chunk_read.clear()
    with _connect(server) as client:
        client.sendall(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
        assert b"first;" in _read_until(client, b"first;")
        chunk_read.set()
        assert b"second" in _read_until(client, b"0\r\n\r\n")



def test_a_complete_response_leaves_before_the_app_goes_on(server: tuple[str, int]) -> None:
    """The request path leaves its metrics to the loop's next callbacks: they must follow the
    write, not precede it."""
    answer_read.clear()
    with _connect(server) as client:
        client.sendall(b"POST /then-block HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
        assert _read_until(client, b"echo:hi").startswith(b"HTTP/1.1 200 OK\r\n")
        answer_read.set()
        client.sendall(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nok")
        assert _read_until(client, b"echo:ok").startswith(b"HTTP/1.1 200 OK\r\n")


def _count_messages(server: tuple[str, int], body: bytes) -> tuple[int, str]:
    with _connect(server) as client:
        client.sendall(b"POST /count HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
                       % len(body))
        for start in range(0, len(body), 65536):  # as a client's socket writes it
            client.sendall(body[start:start + 65536])
        answer = _read_until(client, b"\r\n\r\n")
        answer += _read_until(client, b"messages, ") if b"messages, " not in answer else b""
        while len(answer.rsplit(b"messages, ", 1)[1]) < 64:
            answer += client.recv(65536)
    count, digest = answer.rsplit(b"\r\n\r\n", 1)[1].split(b" messages, ")
    return int(count), digest.decode()


def test_a_body_in_many_pieces_reaches_the_app_whole_in_one_message(
        server: tuple[str, int]) -> None:
    body = os.urandom(5 * 1024 * 1024)  # uvicorn alone: a message per 64 KiB or so
    assert _count_messages(server, body) == (1, hashlib.sha256(body).hexdigest())


def test_a_body_past_the_high_water_mark_comes_in_parts_and_intact(
        server: tuple[str, int]) -> None:
    body = os.urandom(BODY_HIGH_WATER + 3 * 1024 * 1024)
    count, digest = _count_messages(server, body)
    assert count >= 2 and digest == hashlib.sha256(body).hexdigest()


def test_a_chunked_body_wakes_the_app_before_it_ends(server: tuple[str, int]) -> None:
    """Nobody declared its length, so it may never end: the app must see what has come."""
    with _connect(server) as client:
        client.sendall(b"POST /first-piece HTTP/1.1\r\nHost: t\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        assert _read_until(client, b"first piece: 5").startswith(b"HTTP/1.1 200 OK\r\n")
