"""HTTP binding of ``POST /``: every JSON-RPC AWS service the emulator speaks shares this path.

``X-Amz-Target: SageMaker.<Operation>`` is the control plane (here); the other APIs that share
this path (Application Auto Scaling, CloudWatch's JSON 1.0 and query protocols) go to the handlers
the composition root passes in. Which API a request is was decided once, by the front door
(``emulator/contract/apis.py``), and IAM decided on that same reading.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping

from fastapi import APIRouter, Request, Response

from emulator.contract import control_plane as wire
from emulator.contract import inference_components as component_rules
from emulator.contract.apis import Protocol, Service, read_request
from emulator.control.service import ControlPlaneService

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]


def build_control_router(service: ControlPlaneService, *,
                         others: Mapping[tuple[Service, Protocol], Handler] | None = None
                         ) -> APIRouter:
    """``others``: the handler of each other API on ``POST /``, by service and protocol."""
    router = APIRouter()
    handlers = dict(others or {})

    @router.post("/", include_in_schema=False)
    async def control_plane(request: Request) -> Response:
        # The front door's reading of the request, the one IAM decided on (contract/apis.py).
        api = read_request(request.scope)
        handler = handlers.get((api.service, api.protocol)) if api is not None else None
        if handler is not None:
            return await handler(request)
        request_id = str(uuid.uuid4())
        try:
            # The headers are the front door's (each name once): the target identify() read.
            target, raw = request.headers.get("x-amz-target"), await request.body()
            # Inference components' operations and endpoint configs have rules of their own.
            operation, params = (component_rules.parse_request(target, raw)
                                 or wire.parse_request(target, raw))
            status, body = 200, await service.handle(operation, params)
        except wire.ControlPlaneError as exc:
            status, body = exc.status, exc.body()
        except Exception as exc:  # never leak a stack trace as HTML to boto3
            log.exception("control-plane request failed")
            status, body = 500, {"__type": "InternalFailure", "message": str(exc)}
        return Response(
            content=wire.encode(body),
            status_code=status,
            media_type=wire.JSON_CONTENT_TYPE,
            headers={"x-amzn-RequestId": request_id},
        )

    return router
