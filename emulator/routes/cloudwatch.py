"""HTTP binding of the CloudWatch API on the emulator's port (all three protocols).

``cloudwatch_rows`` are CloudWatch's rows of the front door's table (``emulator/routes/table.py``):
one handler for every operation, framed by the protocol the front door read (rpc-v2-cbor on
CloudWatch's own path; JSON 1.0 and query on ``POST /``, the query protocol's ``Action`` in its
body). The alarms are evaluated for as long as the app runs (the composition root's lifespan,
``emulator/app.py``). A request is parsed, answered and encoded in a worker thread: a large
GetMetricData (500 queries, 100,800 datapoints) is seconds of work that ``/ping`` and the
invocations must not wait behind.

A body sent with ``Content-Encoding: gzip`` (botocore compresses PutMetricData once it reaches
10,240 bytes, on every protocol) is inflated first, never past ``MAX_INFLATED_BYTES``; then the
documented request sizes apply to what was inflated: PutMetricData at most 1 MB, PutMetricAlarm
120 KB (``BODY_LIMITS``); over either is 413 ``RequestEntityTooLarge``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from emulator.cloudwatch import wire
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError
from emulator.cloudwatch.service import CloudWatchService
from emulator.contract import request_compression
from emulator.contract.apis import Protocol, Service, parse_form, read_request
from emulator.contract.json_errors import SERIALIZATION
from emulator.faults.rules import CallFacts
from emulator.faults.table import FaultTable, error_unless_clear
from emulator.routes.table import Handler, Rows, as_asgi, rows

log = logging.getLogger(__name__)

# [U] as large as a plain body may be (emulator/routes/limits.py's bound)
MAX_INFLATED_BYTES = 8 * 1024 * 1024
# "Each PutMetricData request is limited to 1 MB in size for HTTP POST requests", "Each
# PutMetricAlarm action has a maximum uncompressed payload of 120 KB" [U: 1 MB = 1 MiB]
BODY_LIMITS = {"PutMetricData": 1024 * 1024, "PutMetricAlarm": 120 * 1024}
TOO_LARGE = "RequestEntityTooLarge"


def _inflated(headers: Mapping[str, str], body: bytes) -> bytes:
    """The body as the client wrote it (gzip undone), or the error that says why not."""
    try:
        return request_compression.inflate(body, headers, MAX_INFLATED_BYTES)
    except request_compression.TooLarge as exc:
        raise CloudWatchError(TOO_LARGE, f"{exc} Send a smaller request.", 413) from exc
    except request_compression.Undecodable as exc:
        raise CloudWatchError(SERIALIZATION, str(exc)) from exc


def _check_size(operation: str, body: bytes) -> None:
    limit = BODY_LIMITS.get(operation)
    if limit is not None and len(body) > limit:
        raise CloudWatchError(TOO_LARGE, f"The {operation} request is {len(body)} bytes "
                              f"(uncompressed); it must be at most {limit} bytes. Split it "
                              "into smaller requests.", 413)


async def _injected(faults: FaultTable | None, operation: Callable[[], str]) -> None:
    """A fault rule's error for this call raised (a latency waited out); the operation is only
    read (a query body's ``Action``) while a rule is in force."""
    if faults is None or not faults.armed:
        return
    fault = await error_unless_clear(faults, CallFacts(Service.CLOUDWATCH.value, operation()))
    if fault is not None:
        raise CloudWatchError(fault.code, fault.message, fault.status)


def _query_action(headers: Mapping[str, str], body: bytes) -> str:
    """A query body's ``Action``, or "" when the body cannot be read (answered as such later)."""
    try:
        return parse_form(_inflated(headers, body)).get("Action", "")
    except (CloudWatchError, ValueError):
        return ""


async def _answer(call: Callable[[], Awaitable[bytes]],
                  error_body: Callable[[CloudWatchError], tuple[bytes, dict[str, str]]],
                  media_type: str, headers: dict[str, str]) -> Response:
    """Run one request; any failure answers in the protocol's own error shape."""
    try:
        body, status = await call(), 200
    except Exception as exc:  # every failure answers in the protocol's shape
        error = exc if isinstance(exc, CloudWatchError) else None
        if error is None:
            log.exception("cloudwatch request failed")
            error = CloudWatchError("InternalServiceError", f"internal failure: {exc}", status=500)
        body, extra = error_body(error)
        status, headers = error.status, {**headers, **extra}
    return Response(body, status_code=status, media_type=media_type, headers=headers)


def cbor_handler(service: CloudWatchService, faults: FaultTable | None = None) -> Handler:
    """``POST /service/GraniteServiceVersion20100801/operation/<Op>`` (rpc-v2-cbor)."""

    async def handle(request: Request) -> Response:
        api = read_request(request.scope)
        operation = api.operation if api is not None else ""
        if not operation or "/" in operation:  # not one path segment: no such path
            return JSONResponse({"detail": "Not Found"}, status_code=404)

        def answer(body: bytes) -> bytes:
            body = _inflated(request.headers, body)
            params = wire.parse_cbor(operation, body)
            _check_size(operation, body)
            return wire.cbor_body(operation, service.call(operation, params))

        async def call() -> bytes:
            await _injected(faults, lambda: operation)
            return await asyncio.to_thread(answer, await request.body())

        return await _answer(call, lambda e: (wire.cbor_error(e), wire.error_headers(e)),
                             wire.CBOR_CONTENT_TYPE, {"x-amzn-RequestId": str(uuid.uuid4()),
                                                      "smithy-protocol": "rpc-v2-cbor"})

    return handle


def json_handler(service: CloudWatchService, faults: FaultTable | None = None) -> Handler:
    """``X-Amz-Target: GraniteServiceVersion20100801.<Op>`` (JSON 1.0)."""

    async def handle(request: Request) -> Response:
        def answer(target: str, body: bytes) -> bytes:
            body = _inflated(request.headers, body)
            operation, params = wire.parse_json(target, body)
            _check_size(operation, body)
            return wire.json_body(operation, service.call(operation, params))

        async def call() -> bytes:
            target = request.headers.get("x-amz-target", "")
            await _injected(faults, lambda: target.partition(".")[2])
            return await asyncio.to_thread(answer, target, await request.body())

        return await _answer(call, lambda e: (wire.json_error(e), wire.error_headers(e)),
                             wire.JSON_CONTENT_TYPE, {"x-amzn-RequestId": str(uuid.uuid4())})

    return handle


def query_handler(service: CloudWatchService, faults: FaultTable | None = None) -> Handler:
    """A form-encoded ``Action=<Op>&Version=2010-08-01`` body (the query protocol)."""

    async def handle(request: Request) -> Response:
        request_id = str(uuid.uuid4())

        def answer(body: bytes) -> bytes:
            body = _inflated(request.headers, body)
            operation, params = wire.parse_query(body)
            _check_size(operation, body)
            return wire.xml_body(operation, service.call(operation, params), request_id)

        async def call() -> bytes:
            body = await request.body()
            await _injected(faults, lambda: _query_action(request.headers, body))
            return await asyncio.to_thread(answer, body)

        return await _answer(call, lambda e: (wire.xml_error(e, request_id), {}),
                             wire.XML_CONTENT_TYPE, {"x-amzn-RequestId": request_id})

    return handle


def cloudwatch_rows(service: CloudWatchService, faults: FaultTable | None = None) -> Rows:
    """CloudWatch's rows of the front door's table: each request framed by its protocol."""
    framed = {Protocol.CBOR: cbor_handler(service, faults),
              Protocol.JSON: json_handler(service, faults),
              Protocol.QUERY: query_handler(service, faults)}

    async def handle(request: Request) -> Response:
        api = read_request(request.scope)
        protocol = api.protocol if api is not None else Protocol.QUERY
        return await framed[protocol](request)

    return rows(Service.CLOUDWATCH, wire.OPERATIONS, as_asgi(handle))
