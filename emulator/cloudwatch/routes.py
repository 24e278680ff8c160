"""HTTP binding of the CloudWatch API on the emulator's port (all three protocols).

The CBOR route is CloudWatch's own path; JSON 1.0 and query share ``POST /`` with the other
services, so ``emulator/control/routes.py`` dispatches them here (``json_handler``,
``query_handler``). A request is parsed, answered and encoded in a worker thread: a large
GetMetricData (500 queries, 100,800 datapoints) is seconds of work that ``/ping`` and the
invocations must not wait behind.

A body sent with ``Content-Encoding: gzip`` (botocore compresses PutMetricData once it reaches
10,240 bytes, on every protocol) is inflated first, never past ``MAX_INFLATED_BYTES``; then the
documented request sizes apply to what was inflated: PutMetricData at most 1 MB, PutMetricAlarm
120 KB (``BODY_LIMITS``); over either is 413 ``RequestEntityTooLarge``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from fastapi import APIRouter, FastAPI, Request, Response

from emulator.cloudwatch import wire
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError
from emulator.cloudwatch.service import CloudWatchService
from emulator.contract import request_compression
from emulator.contract.json_errors import SERIALIZATION

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]

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


def build_cloudwatch_router(service: CloudWatchService) -> APIRouter:
    """The rpc-v2-cbor routes; the router's lifespan runs the alarms' evaluation loop."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if service.alarms is None:
            yield
            return
        async with service.alarms.running():
            yield

    router = APIRouter(lifespan=lifespan)

    @router.post(wire.CBOR_PATH, include_in_schema=False)
    async def cbor_operation(operation: str, request: Request) -> Response:
        def answer(body: bytes) -> bytes:
            body = _inflated(request.headers, body)
            params = wire.parse_cbor(operation, body)
            _check_size(operation, body)
            return wire.cbor_body(operation, service.call(operation, params))

        async def call() -> bytes:
            return await asyncio.to_thread(answer, await request.body())

        return await _answer(call, lambda e: (wire.cbor_error(e), wire.error_headers(e)),
                             wire.CBOR_CONTENT_TYPE, {"x-amzn-RequestId": str(uuid.uuid4()),
                                                      "smithy-protocol": "rpc-v2-cbor"})

    return router


def json_handler(service: CloudWatchService) -> Handler:
    """``X-Amz-Target: GraniteServiceVersion20100801.<Op>`` (JSON 1.0)."""

    async def handle(request: Request) -> Response:
        def answer(target: str, body: bytes) -> bytes:
            body = _inflated(request.headers, body)
            operation, params = wire.parse_json(target, body)
            _check_size(operation, body)
            return wire.json_body(operation, service.call(operation, params))

        async def call() -> bytes:
            return await asyncio.to_thread(answer, request.headers.get("x-amz-target", ""),
                                           await request.body())

        return await _answer(call, lambda e: (wire.json_error(e), wire.error_headers(e)),
                             wire.JSON_CONTENT_TYPE, {"x-amzn-RequestId": str(uuid.uuid4())})

    return handle


def query_handler(service: CloudWatchService) -> Handler:
    """A form-encoded ``Action=<Op>&Version=2010-08-01`` body (the query protocol)."""

    async def handle(request: Request) -> Response:
        request_id = str(uuid.uuid4())

        def answer(body: bytes) -> bytes:
            body = _inflated(request.headers, body)
            operation, params = wire.parse_query(body)
            _check_size(operation, body)
            return wire.xml_body(operation, service.call(operation, params), request_id)

        async def call() -> bytes:
            return await asyncio.to_thread(answer, await request.body())

        return await _answer(call, lambda e: (wire.xml_error(e, request_id), {}),
                             wire.XML_CONTENT_TYPE, {"x-amzn-RequestId": request_id})

    return handle
