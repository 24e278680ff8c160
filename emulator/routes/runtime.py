"""sagemaker-runtime: ``POST /endpoints/{name}/invocations`` and the two it refuses on an MME."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from emulator.contract import errors, runtime
from emulator.hosting.registry import EndpointRegistry
from emulator.settings import Settings

log = logging.getLogger(__name__)


def error_response(error: errors.SageMakerError, request_id: str) -> JSONResponse:
    return JSONResponse(error.members(), status_code=error.status,
                        headers=runtime.error_headers(error, request_id))


async def read_bounded(request: Request, limit: int, request_id: str) -> bytes:
    """The body, read as it arrives (chunked bodies have no Content-Length) and never past the
    limit: more than ``limit`` bytes is the same ValidationError as a declared oversize body."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise errors.oversize_body(request_id, limit)  # the rest stays unread
        chunks.append(chunk)
    return b"".join(chunks)


def build_runtime_router(settings: Settings, registry: EndpointRegistry) -> APIRouter:
    router = APIRouter()

    @router.post("/endpoints/{endpoint_name}/invocations")
    async def invoke_endpoint(endpoint_name: str, request: Request) -> Response:
        request_id = runtime.new_request_id()
        try:
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > settings.max_payload_bytes:
                raise errors.oversize_body(request_id, settings.max_payload_bytes)  # unread
            body = await read_bounded(request, settings.max_payload_bytes, request_id)
            parsed = runtime.parse_invoke(endpoint_name, request.headers, body,
                                          settings.max_payload_bytes, request_id)
            endpoint = registry.get(endpoint_name)
            if endpoint is None:
                raise errors.endpoint_not_found(endpoint_name, settings.account_id)
            result = await endpoint.invoke(parsed)
        except errors.SageMakerError as exc:
            return error_response(exc, request_id)
        except ClientDisconnect:  # the client left mid-body: not an error of ours, nobody to answer
            log.info("request=%s outcome=client-disconnected", request_id)
            return Response(status_code=400)
        except Exception as exc:  # a bug of ours: say so in SageMaker's shape, log the details
            log.exception("request=%s outcome=internal-failure", request_id)
            return error_response(errors.InternalFailure(f"internal failure: {exc}"), request_id)
        return Response(content=result.body, headers=result.headers)

    @router.post("/endpoints/{endpoint_name}/invocations-response-stream")
    @router.post("/endpoints/{endpoint_name}/async-invocations")
    async def unsupported_invocation(endpoint_name: str, request: Request) -> Response:
        """Neither operation has a TargetModel, so neither can reach a model of an MME."""
        request_id = runtime.new_request_id()
        operation = ("InvokeEndpointWithResponseStream"
                     if request.url.path.endswith("-response-stream") else "InvokeEndpointAsync")
        if registry.get(endpoint_name) is None:
            error: errors.SageMakerError = errors.endpoint_not_found(endpoint_name,
                                                                     settings.account_id)
        else:
            error = errors.unsupported_for_multi_model(operation, endpoint_name)
        return error_response(error, request_id)

    return router
