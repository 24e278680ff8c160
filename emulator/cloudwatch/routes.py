"""HTTP binding of the CloudWatch API on the emulator's port (all three protocols).

The CBOR route is CloudWatch's own path; JSON 1.0 and query share ``POST /`` with the other
services, so ``emulator/control/routes.py`` dispatches them here (``json_handler``,
``query_handler``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request, Response

from emulator.cloudwatch import wire
from emulator.cloudwatch.errors import CloudWatchError
from emulator.cloudwatch.service import CloudWatchService

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]


def _internal(exc: Exception) -> CloudWatchError:
    log.exception("cloudwatch request failed")
    return CloudWatchError("InternalServiceError", f"internal failure: {exc}", status=500)


def build_cloudwatch_router(service: CloudWatchService) -> APIRouter:
    router = APIRouter()

    @router.post(wire.CBOR_PATH, include_in_schema=False)
    async def cbor_operation(operation: str, request: Request) -> Response:
        request_id = str(uuid.uuid4())
        headers = {"x-amzn-RequestId": request_id, "smithy-protocol": "rpc-v2-cbor"}
        try:
            params = wire.parse_cbor(operation, await request.body())
            body = wire.cbor_body(operation, await service.handle(operation, params))
            status = 200
        except Exception as exc:  # noqa: BLE001 - every failure answers in the protocol's shape
            error = exc if isinstance(exc, CloudWatchError) else _internal(exc)
            body, status = wire.cbor_error(error), error.status
            headers.update(wire.error_headers(error))
        return Response(body, status_code=status, media_type=wire.CBOR_CONTENT_TYPE,
                        headers=headers)

    return router


def json_handler(service: CloudWatchService) -> Handler:
    """``X-Amz-Target: GraniteServiceVersion20100801.<Op>`` (JSON 1.0)."""

    async def handle(request: Request) -> Response:
        request_id = str(uuid.uuid4())
        headers = {"x-amzn-RequestId": request_id}
        try:
            operation, params = wire.parse_json(request.headers.get("x-amz-target", ""),
                                                await request.body())
            body = wire.json_body(operation, await service.handle(operation, params))
            status = 200
        except Exception as exc:  # noqa: BLE001
            error = exc if isinstance(exc, CloudWatchError) else _internal(exc)
            body, status = wire.json_error(error), error.status
            headers.update(wire.error_headers(error))
        return Response(body, status_code=status, media_type=wire.JSON_CONTENT_TYPE,
                        headers=headers)

    return handle


def query_handler(service: CloudWatchService) -> Handler:
    """A form-encoded ``Action=<Op>&Version=2010-08-01`` body (the query protocol)."""

    async def handle(request: Request) -> Response:
        request_id = str(uuid.uuid4())
        try:
            operation, params = wire.parse_query(await request.body())
            body = wire.xml_body(operation, await service.handle(operation, params), request_id)
            status = 200
        except Exception as exc:  # noqa: BLE001
            error = exc if isinstance(exc, CloudWatchError) else _internal(exc)
            body, status = wire.xml_error(error, request_id), error.status
        return Response(body, status_code=status, media_type=wire.XML_CONTENT_TYPE,
                        headers={"x-amzn-RequestId": request_id})

    return handle
