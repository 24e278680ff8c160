"""HTTP binding of ``POST /``: every JSON-RPC AWS service the emulator speaks shares this path.

``X-Amz-Target: SageMaker.<Operation>`` is the control plane (here); other target prefixes
(``AnyScaleFrontendService.`` for Application Auto Scaling, ``GraniteServiceVersion20100801.``
for CloudWatch JSON 1.0) and a form-encoded body without a target (CloudWatch's query protocol)
go to the handlers the composition root passes in.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping

from fastapi import APIRouter, Request, Response

from emulator.contract import control_plane as wire
from emulator.control.service import ControlPlaneService

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"


def build_control_router(service: ControlPlaneService, *,
                         targets: Mapping[str, Handler] | None = None,
                         form: Handler | None = None) -> APIRouter:
    """``targets``: X-Amz-Target prefix -> handler; ``form``: the handler of query requests."""
    router = APIRouter()
    others = dict(targets or {})

    @router.post("/", include_in_schema=False)
    async def control_plane(request: Request) -> Response:
        target = request.headers.get("x-amz-target") or ""
        for prefix, handler in others.items():
            if target.startswith(prefix):
                return await handler(request)
        content_type = request.headers.get("content-type", "")
        if not target and form is not None and content_type.startswith(FORM_CONTENT_TYPE):
            return await form(request)
        request_id = str(uuid.uuid4())
        try:
            operation, params = wire.parse_request(target or None, await request.body())
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
