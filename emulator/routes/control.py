"""HTTP binding of the SageMaker control plane: ``POST /`` with ``X-Amz-Target:
SageMaker.<Operation>`` (JSON 1.1).

``control_rows`` are the control plane's rows of the front door's table
(``emulator/routes/table.py``): every operation, and the ones it does not know (answered with
SageMaker's ``UnknownOperationException``). ``build_control_router`` is ``POST /`` for a request
that names no API at all (no or an unknown ``X-Amz-Target``): SageMaker's error for it; on its
own it is a control plane without the front door (a test's app, the deployer's).
"""

from __future__ import annotations

import logging
import uuid

from fastapi import APIRouter, Request, Response

from emulator.contract import control_plane as wire
from emulator.contract import inference_components as component_rules
from emulator.contract.apis import Service
from emulator.control.service import ControlPlaneService
from emulator.faults.table import FaultTable
from emulator.routes.table import Handler, Rows, as_asgi, injected_error, rows

log = logging.getLogger(__name__)


def control_plane_handler(service: ControlPlaneService,
                          faults: FaultTable | None = None) -> Handler:
    """One control-plane request: parsed and validated, run, answered in JSON 1.1 (or as a
    fault rule in force says)."""

    async def handle(request: Request) -> Response:
        request_id = str(uuid.uuid4())
        try:
            fault = await injected_error(faults, request.scope)
            if fault is not None:
                raise wire.ControlPlaneError(fault.message, fault.code, fault.status)
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

    return handle


def control_rows(service: ControlPlaneService, faults: FaultTable | None = None) -> Rows:
    """The control plane's rows of the front door's table."""
    return rows(Service.SAGEMAKER, wire.OPERATIONS | component_rules.OPERATIONS,
                as_asgi(control_plane_handler(service, faults)))


def build_control_router(service: ControlPlaneService) -> APIRouter:
    """``POST /`` answered by the control plane."""
    router = APIRouter()
    router.add_api_route("/", control_plane_handler(service), methods=["POST"],
                         include_in_schema=False)
    return router
