"""HTTP binding of Application Auto Scaling: ``POST /`` with ``X-Amz-Target:
AnyScaleFrontendService.<Operation>`` (JSON 1.1). ``autoscaling_rows`` are its rows of the front
door's table (``emulator/routes/table.py``); the scaling engine runs for as long as the app does
(the composition root's lifespan, ``emulator/app.py``)."""

from __future__ import annotations

import logging
import uuid

from fastapi import Request, Response

from emulator.autoscaling import wire
from emulator.autoscaling.service import AutoScalingService
from emulator.contract.apis import Service
from emulator.faults.table import FaultTable
from emulator.routes.table import Handler, Rows, as_asgi, injected_error, rows

log = logging.getLogger(__name__)


def autoscaling_handler(service: AutoScalingService, faults: FaultTable | None = None) -> Handler:
    async def handle(request: Request) -> Response:
        try:
            fault = await injected_error(faults, request.scope)
            if fault is not None:
                raise wire.ScalingError(fault.message, fault.code, fault.status)
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


def autoscaling_rows(service: AutoScalingService, faults: FaultTable | None = None) -> Rows:
    """Application Auto Scaling's rows of the front door's table."""
    return rows(Service.AUTOSCALING, wire.OPERATIONS,
                as_asgi(autoscaling_handler(service, faults)))
