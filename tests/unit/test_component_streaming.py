"""A SageMaker container copy's streamed answer (emulator/hosting/component_streaming.py), relayed
from a real local HTTP server standing in for the container's ``POST /invocations``.

The endpoint and its copies are stand-ins (the routing and the copies' start are tested with
real Tritons in tests/integration/test_component_streaming.py); the container is real HTTP with
chunked transfer encoding, as a streaming SageMaker container answers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from botocore.eventstream import EventStreamBuffer

from emulator.contract import event_stream, runtime, runtime_errors
from emulator.hosting import component_streaming
from emulator.hosting.call_record import CallRecord
from emulator.hosting.instance import ErrorContext
from emulator.hosting.multi_container import MultiContainerInstance, ServeMember

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Copies:
    """What the stream asks of a component's copies: the one ready copy, counting a call in and
    out, and the sink of its samples."""

    def __init__(self, copy: MultiContainerInstance) -> None:
        self.ready = [copy]
        self.in_flight = 0
        self.samples: dict[str, float] = {}

    def choose(self, request: object = None) -> tuple[MultiContainerInstance, None]:
        return self.ready[0], None

    def arrive(self, started: float) -> CallRecord:
        self.in_flight += 1
        return CallRecord(self, started, "InvocationsPerCopy", len(self.ready),
                          ("ConcurrentRequestsPerCopy", self.in_flight / len(self.ready)))

    def leave(self) -> None:
        self.in_flight -= 1

    def record_now(self, samples: list[tuple[str, float]], unit_id: str | None) -> None:
        self.samples.update(samples)

    record_soon = record_now

    def record_container_latencies(self, latencies: list[tuple[str, float]]) -> None:
        pass


class _Endpoint:
    call_log = None  # not recording (mme serve --record)

    def __init__(self, copies: _Copies, timeout_s: float) -> None:
        self.copies = copies
        self.invocation_timeout_s = timeout_s
        self.errors = ErrorContext("ep", "us-east-1", "123456789012")

    def serving_copies(self, request: runtime.InvokeRequest) -> tuple[_Copies, Any]:
        return self.copies, SimpleNamespace(variant="AllTraffic")

    def generation(self) -> _Endpoint:  # no deployment under way: itself
        return self


def _copy_of(url: str) -> MultiContainerInstance:
    """A copy running one SageMaker container at ``url`` (no process: the server is the test's)."""
    member = ServeMember.__new__(ServeMember)
    member.label = "primary"
    member.container = SimpleNamespace(http_url=url)  # type: ignore[assignment]
    copy = MultiContainerInstance.__new__(MultiContainerInstance)
    copy.id, copy.members, copy.in_flight = "copy-1", [member], 0
    copy._idle = asyncio.Event()
    copy._idle.set()
    return copy


REQUEST = runtime.InvokeRequest(
    endpoint_name="ep", request_id="r-1", body=b'{"inputs": "hi"}',
    content_type="application/json", accept="text/event-stream", target_model=None,
    custom_attributes=None, inference_id=None, target_variant=None, inference_component="ic")


async def _served(handler: Handler, timeout_s: float,
                  use: Callable[[_Endpoint, MultiContainerInstance], Awaitable[Any]]) -> Any:
    app = web.Application()
    app.router.add_post("/invocations", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    copy = _copy_of(f"http://127.0.0.1:{port}")
    try:
        return await use(_Endpoint(_Copies(copy), timeout_s), copy)
    finally:
        await runner.cleanup()


def _decoded(events: list[bytes]) -> list[tuple[str, bytes]]:
    """(event or exception type, payload) of each event, read by botocore's decoder."""
    decoder = EventStreamBuffer()
    decoder.add_data(b"".join(events))
    return [(m.headers.get(":event-type") or m.headers[":exception-type"], m.payload)
            for m in decoder]


async def _chunks(request: web.Request, pieces: list[bytes],
                  between: Callable[[int], Awaitable[None]]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    for index, piece in enumerate(pieces):
        await between(index)
        await response.write(piece)
    await response.write_eof()
    return response


def test_each_piece_is_relayed_as_it_arrives_and_the_call_is_counted() -> None:
    """The second piece is sent only once the first event reached the caller: the stream is
    relayed, not gathered."""
    first_relayed = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        assert request.headers["Accept"] == "text/event-stream"
        assert await request.read() == REQUEST.body

        async def between(index: int) -> None:
            if index == 1:
                await first_relayed.wait()
        return await _chunks(request, [b"data: one\n\n", b"data: two\n\n"], between)

    async def use(endpoint: _Endpoint, copy: MultiContainerInstance) -> Any:
        answer = await component_streaming.open_stream(endpoint, REQUEST)  # type: ignore[arg-type]
        assert copy.in_flight == 1 and endpoint.copies.in_flight == 1
        events = []
        async for event in answer.events:
            events.append(event)
            first_relayed.set()
        return answer.headers, events, endpoint.copies, copy

    headers, events, copies, copy = asyncio.run(_served(handler, 30.0, use))
    assert headers["X-Amzn-SageMaker-Content-Type"] == "text/event-stream"
    assert headers["Content-Type"] == event_stream.CONTENT_TYPE
    assert _decoded(events) == [("PayloadPart", b"data: one\n\n"),
                                ("PayloadPart", b"data: two\n\n")]
    assert copy.in_flight == 0 and copies.in_flight == 0 and copy._idle.is_set()
    assert copies.samples["Invocations"] == 1 and copies.samples["ModelLatency"] > 0
    assert copies.samples["InvocationModelErrors"] == 0


def test_an_error_status_before_the_first_byte_is_a_model_error() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=500, text='{"error": "out of memory"}')

    async def use(endpoint: _Endpoint, copy: MultiContainerInstance) -> Any:
        with pytest.raises(runtime_errors.ModelError) as raised:
            await component_streaming.open_stream(endpoint, REQUEST)  # type: ignore[arg-type]
        return raised.value, endpoint.copies, copy

    error, copies, copy = asyncio.run(_served(handler, 30.0, use))
    assert error.members()["OriginalStatusCode"] == 500
    assert "out of memory" in error.members()["OriginalMessage"]
    # Counted by the status the model answered (500), not by the 424 the client gets.
    assert copies.samples["Invocation5XXErrors"] == 1
    assert copies.samples["Invocation4XXErrors"] == 0 and copies.samples[
        "InvocationModelErrors"] == 1
    assert copy.in_flight == 0 and copies.in_flight == 0


async def _events_of(endpoint: _Endpoint, copy: MultiContainerInstance) -> Any:
    answer = await component_streaming.open_stream(endpoint, REQUEST)  # type: ignore[arg-type]
    return [event async for event in answer.events], endpoint.copies


def test_a_connection_broken_mid_stream_ends_it_with_a_stream_broken_error() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b"partial")
        assert request.transport is not None
        request.transport.close()  # no last chunk: the container died mid-answer
        return response

    events, copies = asyncio.run(_served(handler, 30.0, _events_of))
    _assert_ends_in_model_error(events, copies, b"partial", event_stream.STREAM_BROKEN)


def _assert_ends_in_model_error(events: Any, copies: Any, first: bytes, code: str) -> None:
    """The stream's first piece came through, then a ModelStreamError ``code`` ended it, counted
    as a model error with no call left in flight."""
    decoded = _decoded(events)
    assert decoded[0] == ("PayloadPart", first)
    kind, payload = decoded[-1]
    assert kind == "ModelStreamError"
    assert json.loads(payload)["ErrorCode"] == code
    assert copies.samples["InvocationModelErrors"] == 1 and copies.in_flight == 0


def test_a_model_slower_than_the_timeout_ends_with_model_invocation_time_exceeded() -> None:
    """The timeout (a setting of 1 s here) bounds the whole answer, its first piece sent."""
    never = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        async def between(index: int) -> None:
            if index == 1:
                await never.wait()  # the rest never comes
        return await _chunks(request, [b"first", b"never"], between)

    async def use(endpoint: _Endpoint, copy: MultiContainerInstance) -> Any:
        try:
            return await _events_of(endpoint, copy)
        finally:
            never.set()  # the handler ends, so the server stops at once

    events, copies = asyncio.run(_served(handler, 1.0, use))
    _assert_ends_in_model_error(events, copies, b"first",
                                event_stream.MODEL_INVOCATION_TIME_EXCEEDED)


def test_a_client_that_leaves_ends_the_calls_bookkeeping() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        async def between(index: int) -> None:
            await asyncio.sleep(0)
        return await _chunks(request, [b"a", b"b", b"c"], between)

    async def use(endpoint: _Endpoint, copy: MultiContainerInstance) -> Any:
        answer = await component_streaming.open_stream(endpoint, REQUEST)  # type: ignore[arg-type]
        events: AsyncIterator[bytes] = answer.events
        await events.__anext__()
        await answer.events.aclose()  # what the route does when the client is gone
        return endpoint.copies, copy

    copies, copy = asyncio.run(_served(handler, 30.0, use))
    assert copies.in_flight == 0 and copy.in_flight == 0 and copy._idle.is_set()
    assert copies.samples["Invocations"] == 1
