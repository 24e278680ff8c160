"""HTTP binding of Application Auto Scaling: a ``POST /`` handler for its target prefix, and the
router whose lifespan runs the scaling engine."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import APIRouter, FastAPI, Request, Response

from emulator.autoscaling import wire
from emulator.autoscaling.scaling_engine import ScalingEngine
from emulator.autoscaling.service import AutoScalingService

log = logging.getLogger(__name__)


def json_handler(service: AutoScalingService) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            operation, params = wire.parse_request(request.headers.get("x-amz-target", ""),
                                                   await request.body())
            status, body = 200, wire.encode_output(operation,
                                                   await service.handle(operation, params))
        except wire.ScalingError as exc:
            status, body = exc.status, wire.encode_error(exc)
        except Exception as exc:  # answer in the protocol's shape
            log.exception("application-autoscaling request failed")
            status = 500
            body = wire.encode_error(wire.ScalingError(str(exc), "InternalServiceException", 500))
        return Response(body, status_code=status, media_type=wire.JSON_CONTENT_TYPE,
                        headers={"x-amzn-RequestId": str(uuid.uuid4())})

    return handle


def build_autoscaling_router(engine: ScalingEngine) -> APIRouter:
    """No routes of its own: its lifespan runs the engine while the app runs."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with engine.running():
            yield

    return APIRouter(lifespan=lifespan)
