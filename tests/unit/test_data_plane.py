"""The hot path's cheaper pieces answer exactly what the plain ones did.

The inference client is checked against a small HTTP server on a real socket: keep-alive reuse,
chunked answers, headers in any case, a connection closed mid-answer, a timeout, a rebind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from emulator.cloudwatch.series import MetricStore, SeriesKey
from emulator.contract import runtime
from emulator.contract.body import Body
from emulator.metrics import DURATION_BUCKETS_S, METRICS, EndpointMetrics
from emulator.triton.client import ResponseHeaders, TritonClient, TritonUnreachable

# --- request ids, renaming, metrics -------------------------------------------------------------


def test_request_ids_are_version_4_uuids_spelled_as_uuid4() -> None:
    ids = {runtime.new_request_id() for _ in range(2000)}
    assert len(ids) == 2000
    for request_id in ids:
        parsed = uuid.UUID(request_id)
        assert str(parsed) == request_id
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_rename_model_replaces_the_name_in_the_header_only() -> None:
    body = b'{"model_name":"m--k1","outputs":[]}' + b'"model_name":"m--k1"'
    renamed, length = runtime.rename_model(body, 36, "m--k1", "a/b.tar.gz")
    assert renamed == b'{"model_name":"a/b.tar.gz","outputs":[]}' + b'"model_name":"m--k1"'
    assert length == 36 + len("a/b.tar.gz") - len("m--k1")
    assert runtime.rename_model(b'{"outputs":[]}', None, "x", "y") == (b'{"outputs":[]}', None)


def test_record_many_is_record_one_by_one() -> None:
    samples = [("Invocations", 1), ("InvocationsPerInstance", 0.5), ("Invocation4XXErrors", 0),
               ("ModelLatency", 310.0), ("OverheadLatency", 2.0e6), ("ModelLatency", 50.0),
               ("ModelLatency", float(DURATION_BUCKETS_S[-1] * 2e6))]
    one_store, many_store = MetricStore(), MetricStore()
    one = EndpointMetrics("e", "v", one_store)
    many = EndpointMetrics("e", "v", many_store)
    for name, value in samples:
        one.record(name, value)
    many.record_many(samples[:3])
    many.record_many(samples[3:])
    assert many.statistics() == one.statistics()
    assert many.duration_buckets() == one.duration_buckets()
    assert many.snapshot() == one.snapshot()
    # The CloudWatch store got the same samples, in order, under the variant's dimensions.
    assert set(many_store.keys()) == set(one_store.keys())
    for name in {name for name, _value in samples}:
        namespace, unit = METRICS[name]
        key = SeriesKey.of(namespace, name, {"EndpointName": "e", "VariantName": "v"})
        sent = [float(value) for sample, value in samples if sample == name]
        for store in (one_store, many_store):
            _times, values = store.samples(key, 0, float("inf"), unit)
            assert values.tolist() == sent
    with pytest.raises(KeyError):
        many.record_many([("Invocations", 1), ("NoSuchMetric", 1)])
    assert many.statistics()["Invocations"].sample_count == 1  # nothing of a refused batch


def test_samples_recorded_soon_are_recorded_in_order_after_the_step() -> None:
    store = MetricStore()
    metrics = EndpointMetrics("e", "v", store)
    key = SeriesKey.of("AWS/SageMaker", "ModelLatency", {"EndpointName": "e", "VariantName": "v"})

    async def calls() -> tuple[int, int]:
        metrics.record_soon([("Invocations", 1), ("ModelLatency", 30.0)])
        metrics.record_soon([("Invocations", 1), ("ModelLatency", 10.0)])
        during = metrics.statistics()["Invocations"].sample_count
        await asyncio.sleep(0)  # the loop's next step: what was recorded soon is recorded
        metrics.record_soon([("ModelLatency", 20.0)])  # a later step's call: its own batch
        await asyncio.sleep(0)
        return during, metrics.statistics()["Invocations"].sample_count

    assert asyncio.run(calls()) == (0, 2)
    assert metrics.statistics()["ModelLatency"].sample_count == 3
    assert store.samples(key, 0, float("inf"))[1].tolist() == [30.0, 10.0, 20.0]


def test_response_headers_are_found_in_any_case() -> None:
    headers = ResponseHeaders({"inference-header-content-length": "12"})
    assert headers["Inference-Header-Content-Length"] == "12"
    assert headers.get("INFERENCE-header-content-length") == "12"
    assert headers.get("absent") is None and "absent" not in headers
    assert dict(headers) == {"inference-header-content-length": "12"}


# --- the inference client -----------------------------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    request_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, v in (x.split(": ", 1) for x in lines if x)}
    body = await reader.readexactly(int(headers["content-length"]))
    return request_line.encode(), headers, body


class Server:
    """A test server that closes every connection it accepted when it stops."""

    def __init__(self, server: asyncio.Server, writers: set[asyncio.StreamWriter]) -> None:
        self._server = server
        self._writers = writers

    def close(self) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()

    async def wait_closed(self) -> None:
        await self._server.wait_closed()
        for writer in self._writers:
            await writer.wait_closed()


@contextlib.asynccontextmanager
async def triton_client(handler: Handler, **options: Any) -> AsyncIterator[TritonClient]:
    """A client (``options``) of a fake Triton that ``handler`` serves; both closed after."""
    server, url = await serve(handler)
    client = TritonClient(url, **options)
    try:
        yield client
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


async def serve(handler: Handler) -> tuple[Server, str]:
    writers: set[asyncio.StreamWriter] = set()

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        try:
            await handler(reader, writer)
        except ConnectionError:
            pass  # the client went away first (a timed-out call)
        finally:
            writer.close()

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return Server(server, writers), f"http://127.0.0.1:{port}"


def answer_once(raw: bytes) -> Handler:
    """A Triton that reads a request, writes ``raw`` (an HTTP answer, whole or cut short) and
    closes the connection."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(raw)
        await writer.drain()
        writer.close()
    return handler


def test_infer_reuses_one_connection_and_passes_bytes_through() -> None:
    connections = 0
    seen: list[tuple[bytes, dict[str, str], bytes]] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while not reader.at_eof():
            try:
                request = await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            seen.append(request)
            body = request[2][::-1]
            if len(seen) == 2:  # chunked, in two parts
                half = len(body) // 2
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                             b"INFERENCE-HEADER-CONTENT-LENGTH: 3\r\n\r\n"
                             + b"%x\r\n" % half + body[:half] + b"\r\n"
                             + b"%x\r\n" % (len(body) - half) + body[half:] + b"\r\n0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
        writer.close()

    async def main() -> None:
        async with triton_client(echo) as client:
            small = b'{"inputs":[]}'
            large = bytes(range(256)) * 4096  # 1 MiB: written without joining
            first = await client.infer("m--k", small, {"Content-Type": "application/json"}, 5)
            second = await client.infer("m--k", large, {"Content-Type": "application/octet-stream",
                                                        "Inference-Header-Content-Length": "3"},
                                        5)
            third = await client.infer("a b", small, {}, None)
        assert (first.status, first.body) == (200, small[::-1])
        assert second.body == large[::-1]
        assert runtime.binary_header_length(second.headers) == 3
        assert third.body == small[::-1]
        assert connections == 1
        assert [r[0] for r in seen] == [b"POST /v2/models/m--k/infer HTTP/1.1"] * 2 + [
            b"POST /v2/models/a%20b/infer HTTP/1.1"]
        assert seen[0][1]["content-type"] == "application/json"
        assert seen[1][1]["inference-header-content-length"] == "3"
        assert seen[1][2] == large

    asyncio.run(main())


def test_an_error_status_reaches_the_listeners_and_the_caller() -> None:
    heard: list[tuple[str, int, bytes]] = []

    async def main() -> int:
        async with triton_client(answer_once(
            b'HTTP/1.1 400 Bad Request\r\nContent-Length: 13\r\n\r\n{"error":"x"}')) as client:
            client.add_infer_listener(lambda *answer: heard.append(answer))
            return (await client.infer("m", b"{}", {}, 5)).status

    assert asyncio.run(main()) == 400
    assert heard == [("m", 400, b'{"error":"x"}')]


def test_a_connection_closed_mid_answer_or_refused_is_unreachable() -> None:
    async def main() -> None:
        # The answer says 100 bytes; the connection closes after 7.
        server, url = await serve(answer_once(
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial"))
        client = TritonClient(url)
        try:
            with pytest.raises(TritonUnreachable, match="unreachable"):
                await client.infer("m", b"{}", {}, 5)
            server.close()
            await server.wait_closed()
            with pytest.raises(TritonUnreachable, match="unreachable"):
                await client.infer("m", b"{}", {}, 5)  # nobody listens any more
        finally:
            await client.close()

    asyncio.run(main())


def test_a_slow_answer_times_out_and_the_connection_is_not_reused() -> None:
    connections = 0
    release = asyncio.Event()

    async def slow_then_fast(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        if connections == 1:
            await release.wait()  # never answers the first request in time
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def main() -> bytes:
        async with triton_client(slow_then_fast) as client:
            with pytest.raises(asyncio.TimeoutError):
                await client.infer("m", b"{}", {}, 0.05)
            release.set()
            return (await client.infer("m", b"{}", {}, 5)).body

    assert asyncio.run(main()) == b"ok"
    assert connections == 2


def test_rebind_sends_the_next_call_to_the_new_address() -> None:
    def answering(text: bytes) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    await read_request(reader)
                except asyncio.IncompleteReadError:
                    break
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(text) + text)
                await writer.drain()
            writer.close()
        return handler

    async def main() -> list[bytes]:
        old, old_url = await serve(answering(b"old"))
        new, new_url = await serve(answering(b"new"))
        client = TritonClient(old_url)
        try:
            answers = [(await client.infer("m", b"{}", {}, 5)).body]
            client.rebind(new_url)
            answers.append((await client.infer("m", b"{}", {}, 5)).body)
            return answers
        finally:
            await client.close()
            for server in (old, new):
                server.close()
                await server.wait_closed()

    assert asyncio.run(main()) == [b"old", b"new"]


def test_calls_past_the_connection_limit_wait_for_a_slot_within_their_timeout() -> None:
    connections = 0
    received = asyncio.Event()
    release = asyncio.Event()

    async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            received.set()
            await release.wait()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    async def main() -> list[bytes]:
        async with triton_client(held, connections=1) as client:
            first = asyncio.create_task(client.infer("m", b"{}", {}, 5))
            await received.wait()  # the first call holds the one connection
            with pytest.raises(asyncio.TimeoutError):  # no slot within its timeout
                await client.infer("m", b"{}", {}, 0.05)
            queued = asyncio.create_task(client.infer("m", b"{}", {}, 5))
            release.set()
            return [(await first).body, (await queued).body]

    assert asyncio.run(main()) == [b"ok", b"ok"]
    assert connections == 1


# A large binary body (400 KB of tensor bytes) as the contract layer hands it to the client.
LARGE_HEADER = json.dumps({"inputs": [{"name": "X", "shape": [100_000], "datatype": "FP32",
                                       "parameters": {"binary_data_size": 400_000}}]}).encode()
LARGE_BODY = LARGE_HEADER + bytes(400_000)
LARGE_HEADERS = {"Content-Type": "application/octet-stream",
                 "Inference-Header-Content-Length": str(len(LARGE_HEADER))}
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

Answer = Callable[[bytes, dict[str, str], bytes], Awaitable[bytes]]


def keep_alive(answer: Answer) -> Handler:
    """A fake Triton answering each request of a kept-alive connection with ``answer``."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                request_line, headers, body = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(await answer(request_line, headers, body))
            await writer.drain()
    return handler


async def with_shared_memory(handler: Handler, region_bytes: int, shm_dir: Path,
                             calls: Callable[[TritonClient], Awaitable[None]]) -> int:
    """Run ``calls`` on a client of a fake Triton that may map ``shm_dir``; its shared count."""
    async with triton_client(handler, shared_memory_bytes=region_bytes) as client:
        client.rebind(client.base_url, shm_dir)  # the same Triton, its /dev/shm now known
        await calls(client)
        return client.shared_bodies


def test_a_large_body_goes_as_a_header_and_its_piece_is_lent_again_after_a_timeout(
        tmp_path: Path) -> None:
    """After a timeout Triton may still read the piece, but only reads: the next request may
    have it (and must, in a region that holds one body)."""
    infers: list[dict[str, Any]] = []
    release = asyncio.Event()

    async def triton(request_line: bytes, _headers: dict[str, str], body: bytes) -> bytes:
        if b"/infer" in request_line:
            infers.append(json.loads(body))
            if len(infers) == 1:
                await release.wait()  # the first call is not answered in time
        return OK

    async def calls(client: TritonClient) -> None:
        with pytest.raises(asyncio.TimeoutError):
            await client.infer("m", LARGE_BODY, LARGE_HEADERS, 0.2)
        release.set()
        assert (await client.infer("m", LARGE_BODY, LARGE_HEADERS, 5)).status == 200

    asyncio.run(with_shared_memory(keep_alive(triton), 512 * 1024, tmp_path, calls))
    pieces = [call["inputs"][0]["parameters"] for call in infers]
    assert pieces == [{"shared_memory_region": "mme-request-bodies",
                       "shared_memory_byte_size": 400_000, "shared_memory_offset": 0}] * 2
    assert list(tmp_path.iterdir()) == []  # the region's file, unlinked once registered


def test_a_large_body_waits_for_room_within_its_own_timeout(tmp_path: Path) -> None:
    """The region holds one body: a second waits for it instead of going over HTTP, and a wait
    longer than its call's timeout is that call's TimeoutError, Triton never asked."""
    infers: list[dict[str, Any]] = []
    arrived, release = asyncio.Event(), asyncio.Event()

    async def triton(request_line: bytes, _headers: dict[str, str], body: bytes) -> bytes:
        if b"/infer" in request_line:
            infers.append(json.loads(body))  # over HTTP this would not be JSON
            if len(infers) == 1:
                arrived.set()
                await release.wait()
        return OK

    async def calls(client: TritonClient) -> None:
        first = asyncio.create_task(client.infer("m", LARGE_BODY, LARGE_HEADERS, 5))
        await arrived.wait()  # the first body holds the region
        with pytest.raises(asyncio.TimeoutError):
            await client.infer("m", LARGE_BODY, LARGE_HEADERS, 0.2)
        waiting = asyncio.create_task(client.infer("m", LARGE_BODY, LARGE_HEADERS, 5))
        await asyncio.sleep(0)
        release.set()
        assert [(await first).status, (await waiting).status] == [200, 200]

    assert asyncio.run(with_shared_memory(keep_alive(triton), 512 * 1024, tmp_path, calls)) == 2
    assert len(infers) == 2  # the call that timed out never reached Triton


def test_a_body_in_pieces_reaches_triton_whole_over_http_and_through_shared_memory(
        tmp_path: Path) -> None:
    """``Body``: joined for HTTP; for shared memory its pieces are copied into the region, the
    header read from the first of them even where it spans two."""
    seen: list[bytes] = []

    async def triton(request_line: bytes, _headers: dict[str, str], body: bytes) -> bytes:
        if b"/infer" in request_line:
            seen.append(body)
        return OK

    json_body = b'{"inputs":[{"name":"X","shape":[1],"datatype":"FP32","data":[1]}]}'
    tensors = (bytes(range(256)) * 1563)[:400_000]  # not zeros: a fresh region is zeros
    whole = LARGE_HEADER + tensors
    split = len(LARGE_HEADER) - 5  # the header spans the first two pieces
    large = Body([whole[:split], whole[split:200_000], whole[200_000:]])

    async def calls(client: TritonClient) -> None:
        small = Body([json_body[:10], json_body[10:]])
        assert (await client.infer("m", small, {"Content-Type": "application/json"}, 5)
                ).status == 200
        assert (await client.infer("m", large, LARGE_HEADERS, 5)).status == 200
        region = client._region
        assert region is not None
        offset = json.loads(seen[1])["inputs"][0]["parameters"]["shared_memory_offset"]
        assert region._memory[offset:offset + 400_000] == tensors

    assert asyncio.run(with_shared_memory(keep_alive(triton), 1 << 20, tmp_path, calls)) == 1
    assert seen[0] == json_body


def test_bodies_that_come_while_the_region_is_made_wait_for_it(tmp_path: Path) -> None:
    """The region is made once; the calls meanwhile go through it, not over HTTP."""
    asked, registered = asyncio.Event(), asyncio.Event()
    registers: list[bytes] = []
    infers: list[bytes] = []

    async def triton(request_line: bytes, _headers: dict[str, str], body: bytes) -> bytes:
        if b"/register" in request_line:
            registers.append(request_line)
            asked.set()
            await registered.wait()
        elif b"/infer" in request_line:
            infers.append(body)
        return OK

    async def calls(client: TritonClient) -> None:
        three = [asyncio.create_task(client.infer("m", LARGE_BODY, LARGE_HEADERS, 5))
                 for _ in range(3)]
        await asked.wait()  # the first call is making the region, the others have come
        registered.set()
        assert [(await call).status for call in three] == [200] * 3

    assert asyncio.run(with_shared_memory(keep_alive(triton), 2 << 20, tmp_path, calls)) == 3
    assert len(registers) == 1
    assert all(json.loads(body)["inputs"][0]["parameters"]["shared_memory_region"]
               for body in infers)


def test_a_region_triton_refuses_sends_large_bodies_over_http_as_they_came(
        tmp_path: Path) -> None:
    seen: list[tuple[bytes, dict[str, str], bytes]] = []

    async def refusing(request_line: bytes, headers: dict[str, str], body: bytes) -> bytes:
        seen.append((request_line, headers, body))
        if b"/register" in request_line:
            error = b'{"error":"Unable to open shared memory region"}'
            return b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (
                len(error), error)
        return OK

    async def calls(client: TritonClient) -> None:
        for _ in range(2):
            assert (await client.infer("m", LARGE_BODY, LARGE_HEADERS, 5)).status == 200

    assert asyncio.run(with_shared_memory(keep_alive(refusing), 1 << 20, tmp_path, calls)) == 0
    assert [line.split()[1] for line, _, _ in seen] == [
        b"/v2/systemsharedmemory/region/mme-request-bodies/register",  # asked once only
        b"/v2/models/m/infer", b"/v2/models/m/infer"]
    assert all(sent == LARGE_BODY
               and sent_headers["inference-header-content-length"] == str(len(LARGE_HEADER))
               for _line, sent_headers, sent in seen[1:])
    assert list(tmp_path.iterdir()) == []  # the refused region's file is gone too
