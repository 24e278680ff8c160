"""HTTP binding of the control plane: ``POST /`` with ``X-Amz-Target: SageMaker.<Operation>``."""

from __future__ import annotations

import logging
import uuid

from fastapi import APIRouter, Request, Response

from emulator.contract import control_plane as wire
from emulator.control.service import ControlPlaneService

log = logging.getLogger(__name__)


def build_control_router(service: ControlPlaneService) -> APIRouter:
    router = APIRouter()

    @router.post("/", include_in_schema=False)
    async def control_plane(request: Request) -> Response:
        request_id = str(uuid.uuid4())
        try:
            operation, params = wire.parse_request(
                request.headers.get("x-amz-target"), await request.body()
            )
            status, body = 200, await service.handle(operation, params)
        except wire.ControlPlaneError as exc:
            status, body = exc.status, exc.body()
        except Exception as exc:  # noqa: BLE001 - never leak a stack trace as HTML to boto3
            log.exception("control-plane request failed")
            status, body = 500, {"__type": "InternalFailure", "message": str(exc)}
        return Response(
            content=wire.encode(body),
            status_code=status,
            media_type=wire.JSON_CONTENT_TYPE,
            headers={"x-amzn-RequestId": request_id},
        )

    return router
