"""sagemaker-runtime: InvokeEndpoint, InvokeEndpointWithResponseStream (on an endpoint for
inference components; refused elsewhere, as InvokeEndpointAsync is on an MME).

Each is a plain ASGI app that the front door (``emulator/app.py``) calls by the operation
``contract/apis.py`` read from the request, behind the same error feed and auth check as every
other API (``--auth sigv4`` checks every invocation): under load FastAPI's routing, request
objects and dependency solving cost the emulator more CPU than the call itself (``mme bench
overhead`` measures the difference). InvokeEndpoint is the one hot path; a server that writes
answers itself (``emulator/http_protocol.py``) takes its answer without ASGI
(``InvocationsApp.answer``). ``misdirected`` answers the runtime's paths with another method or
a trailing slash, as FastAPI's routing did when these were FastAPI routes.
"""

from __future__ import annotations

import functools
import logging
import operator
import re
from collections.abc import Awaitable, Mapping, Sequence

from fastapi import Response
from fastapi.responses import JSONResponse
from starlette.datastructures import URL
from starlette.requests import ClientDisconnect
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from emulator.contract import event_stream, runtime, runtime_errors, sessions
from emulator.contract.apis import API_SCOPE_KEY, RUNTIME_OPERATIONS, ApiRequest, Service
from emulator.contract.body import Body
from emulator.faults.rules import CallFacts
from emulator.faults.table import FaultTable, error_unless_clear
from emulator.hosting import component_streaming
from emulator.hosting.components import ComponentEndpoint
from emulator.hosting.endpoint import InvokeResult
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.http_protocol import Answer, BodySource
from emulator.settings import Settings

log = logging.getLogger(__name__)

# A runtime operation's path, with any trailing slashes (one non-empty segment for the name).
_RUNTIME_PATH = re.compile(
    r"/endpoints/[^/]+/(" + "|".join(map(re.escape, RUNTIME_OPERATIONS)) + r")(/*)")


def error_response(error: runtime_errors.SageMakerError, request_id: str) -> JSONResponse:
    return JSONResponse(error.members(), status_code=error.status,
                        headers=runtime.error_headers(error, request_id))


def asgi_body(receive: Receive) -> BodySource:
    """An ASGI app's ``receive`` as a source of body pieces."""
    async def next_part() -> tuple[Sequence[bytes], bool]:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        return (message.get("body", b""),), message.get("more_body", False)

    return next_part


async def read_bounded(source: BodySource, limit: int, request_id: str) -> bytes | Body:
    """The body, read as it arrives (chunked bodies have no Content-Length) and never past the
    limit: more than ``limit`` bytes is the same ValidationError as a declared oversize body.
    One piece is that bytes object; more stay pieces (``Body``), not joined."""
    part, more = await source()
    if not more and len(part) == 1:  # the usual: the whole body, in one piece
        if len(part[0]) > limit:
            raise runtime_errors.oversize_body(request_id, limit)
        return part[0]
    pieces: list[bytes] = []
    size = 0
    while True:
        size += sum(map(len, part))
        if size > limit:
            raise runtime_errors.oversize_body(request_id, limit)  # the rest stays unread
        pieces.extend(piece for piece in part if piece)
        if not more:
            if len(pieces) > 1:
                return Body(pieces)
            return pieces[0] if pieces else b""
        part, more = await source()


def _raw(response: Response) -> Answer:
    return response.status_code, response.raw_headers, bytes(response.body)


# Decoders and encoders that map() runs in C: the hot path converts every header once.
_from_latin_1 = functools.partial(bytes.decode, encoding="latin-1")
_to_latin_1 = functools.partial(str.encode, encoding="latin-1")
_name_of, _value_of = operator.itemgetter(0), operator.itemgetter(1)


@functools.lru_cache(maxsize=1024)  # few distinct names; a hit runs no Python
def _header_name(name: str) -> bytes:
    return name.lower().encode("latin-1")


def request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers by (lower-case) name, the first of repeated names winning as in
    Starlette's ``Headers``; one dictionary instead of a scan of the list per lookup."""
    raw = scope["headers"][::-1]  # the first of a repeated name is put last, so it stays
    return dict(zip(map(_from_latin_1, map(_name_of, raw)),
                    map(_from_latin_1, map(_value_of, raw)), strict=True))


def answer_headers(result: InvokeResult, request_id: str) -> dict[str, str]:
    """An answered call's headers: SageMaker's, then the emulator's own (which instance or copy
    answered, the model's time, its cache hit; during a deployment, the generation)."""
    headers = runtime.add_emulator_headers(
        runtime.response_headers(request_id, result.variant, result.content_type,
                                 result.custom_attributes),
        f"{result.variant}/{result.unit_id}", result.model_latency_s, result.cache_hit)
    if result.generation is not None:
        headers[runtime.H_GENERATION] = result.generation
    if result.routed_by is not None:
        headers[runtime.H_ROUTED_BY] = result.routed_by
    if result.new_session is not None:
        headers[sessions.H_NEW_SESSION_ID] = result.new_session
    if result.closed_session is not None:
        headers[sessions.H_CLOSED_SESSION_ID] = result.closed_session
    return headers


class Invocations:
    """InvokeEndpoint from the request's headers and body stream to the response."""

    def __init__(self, settings: Settings, registry: EndpointRegistry) -> None:
        self.settings = settings
        self.registry = registry

    async def answer(self, endpoint_name: str, headers: Mapping[str, str],
                     body_source: BodySource) -> Answer:
        settings = self.settings
        request_id = runtime.new_request_id()
        try:
            declared = headers.get("content-length", "")
            if declared.isdigit() and int(declared) > settings.max_payload_bytes:
                raise runtime_errors.oversize_body(request_id, settings.max_payload_bytes)  # unread
            body = await read_bounded(body_source, settings.max_payload_bytes, request_id)
            parsed = runtime.parse_invoke(endpoint_name, headers, body,
                                          settings.max_payload_bytes, request_id)
            endpoint = self.registry.get(endpoint_name)
            if endpoint is None:
                raise runtime_errors.endpoint_not_found(endpoint_name, settings.account_id)
            result = await endpoint.invoke(parsed)
        except runtime_errors.SageMakerError as exc:
            return _raw(error_response(exc, request_id))
        except ClientDisconnect:  # the client left mid-body: not an error of ours, nobody to answer
            log.info("request=%s outcome=client-disconnected", request_id)
            return _raw(Response(status_code=400))
        except Exception as exc:  # a bug of ours: say so in SageMaker's shape, log the details
            log.exception("request=%s outcome=internal-failure", request_id)
            return _raw(error_response(runtime_errors.InternalFailure(f"internal failure: {exc}"),
                                       request_id))
        # What Starlette's Response(content=body, headers=...) would send, built directly.
        headers = answer_headers(result, request_id)
        raw_headers = list(zip(map(_header_name, headers),
                               map(_to_latin_1, headers.values()), strict=True))
        raw_headers.append((b"content-length", str(len(result.body)).encode("latin-1")))
        return 200, raw_headers, result.body


class InvocationsApp:
    """Plain ASGI: answers InvokeEndpoint (the front door, ``emulator/app.py``, says which)."""

    def __init__(self, invocations: Invocations) -> None:
        self.invocations = invocations

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        status, headers, body = await self.answer(scope, asgi_body(receive))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def answer(self, scope: Scope, body_source: BodySource) -> Awaitable[Answer]:
        """The answer, for a server that writes it itself (``emulator/http_protocol.py``).
        Not a coroutine itself: the hot path awaits one frame fewer."""
        api: ApiRequest | None = scope.get(API_SCOPE_KEY)
        assert api is not None and api.endpoint is not None, "not an InvokeEndpoint request"
        return self.invocations.answer(api.endpoint, request_headers(scope), body_source)


class RefusedOnMultiModel:
    """Plain ASGI: InvokeEndpointWithResponseStream and InvokeEndpointAsync. Neither has a
    TargetModel, so neither can reach a model of an MME (the body is not read)."""

    def __init__(self, settings: Settings, registry: EndpointRegistry) -> None:
        self.settings = settings
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        api: ApiRequest | None = scope.get(API_SCOPE_KEY)
        assert api is not None and api.endpoint is not None, "not a runtime request"
        if self.registry.get(api.endpoint) is None:
            error: runtime_errors.SageMakerError = runtime_errors.endpoint_not_found(
                api.endpoint, self.settings.account_id)
        else:
            error = runtime_errors.unsupported_for_multi_model(api.operation, api.endpoint)
        await error_response(error, runtime.new_request_id())(scope, receive, send)


class ResponseStreams:
    """Plain ASGI: InvokeEndpointWithResponseStream. An endpoint for inference components
    streams the answer of one of the named component's copies
    (``hosting/component_streaming.py``) as an ``application/vnd.amazon.eventstream`` body;
    every other endpoint refuses it as before (``RefusedOnMultiModel``)."""

    def __init__(self, settings: Settings, registry: EndpointRegistry,
                 refused: RefusedOnMultiModel) -> None:
        self.settings = settings
        self.registry = registry
        self.refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        api: ApiRequest | None = scope.get(API_SCOPE_KEY)
        assert api is not None and api.endpoint is not None, "not a runtime request"
        endpoint = self.registry.get(api.endpoint)
        if not isinstance(endpoint, ComponentEndpoint):
            await self.refused(scope, receive, send)  # the body is not read
            return
        limit = self.settings.max_payload_bytes
        request_id = runtime.new_request_id()
        try:
            headers = event_stream.request_headers(request_headers(scope))
            declared = headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise runtime_errors.oversize_body(request_id, limit)  # unread
            body = await read_bounded(asgi_body(receive), limit, request_id)
            parsed = runtime.parse_invoke(api.endpoint, headers, body, limit, request_id,
                                          streaming=True)
            answer = await component_streaming.open_stream(endpoint, parsed)
        except runtime_errors.SageMakerError as exc:  # before the first byte: a plain error
            await error_response(exc, request_id)(scope, receive, send)
            return
        except ClientDisconnect:
            log.info("request=%s outcome=client-disconnected", request_id)
            return
        except Exception as exc:  # a bug of ours: SageMaker's shape, the details in the log
            log.exception("request=%s outcome=internal-failure", request_id)
            await error_response(runtime_errors.InternalFailure(f"internal failure: {exc}"),
                                 request_id)(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (_header_name(name), value.encode("latin-1"))
            for name, value in answer.headers.items()]})
        events = answer.events
        try:
            async for event in events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
        except Exception:  # a bug of ours mid-stream: the stream's own failure event
            log.exception("request=%s outcome=internal-stream-failure", request_id)
            await send({"type": "http.response.body", "more_body": True,
                         "body": event_stream.internal_stream_failure(
                             "The stream failed for an internal reason; try again.")})
        finally:
            await events.aclose()  # a client gone: the call's bookkeeping ends here
        await send({"type": "http.response.body", "body": b""})


class FaultsFirst:
    """Plain ASGI: a runtime operation other than InvokeEndpoint (whose fault rules are drawn
    once its serving unit is chosen, ``Endpoint.invoke``) answered as a fault rule in force
    says, else by ``app``."""

    def __init__(self, app: ASGIApp, faults: FaultTable | None) -> None:
        self.app = app
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        api: ApiRequest | None = scope.get(API_SCOPE_KEY)
        if api is not None and self.faults is not None and self.faults.armed:
            fault = await error_unless_clear(self.faults, CallFacts(
                api.service.value, api.operation, api.endpoint))
            if fault is not None:
                error = runtime_errors.error_class(fault.code, fault.status)(fault.message)
                await error_response(error, runtime.new_request_id())(scope, receive, send)
                return
        await self.app(scope, receive, send)


def runtime_handlers(settings: Settings, registry: EndpointRegistry,
                     invocations: InvocationsApp,
                     faults: FaultTable | None = None) -> dict[tuple[Service, str], ASGIApp]:
    """The runtime's rows of the front door's table, by (service, operation)."""
    refused = RefusedOnMultiModel(settings, registry)
    return {(Service.RUNTIME, "InvokeEndpoint"): invocations,
            (Service.RUNTIME, "InvokeEndpointWithResponseStream"):
                FaultsFirst(ResponseStreams(settings, registry, refused), faults),
            (Service.RUNTIME, "InvokeEndpointAsync"): FaultsFirst(refused, faults)}


class MethodNotAllowed(runtime_errors.SageMakerError):
    """[U] Another method than POST on a runtime operation's path. What the real runtime answers
    is not documented; the status (and ``Allow``) are those the emulator gave while these paths
    were FastAPI routes, the shape AWS's for a request that names no operation."""

    shape = "UnknownOperationException"
    status = 405

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "Allow": "POST"}


def misdirected(scope: Scope) -> Response | None:
    """The answer to a request on a runtime operation's path that is not that operation (see
    ``MethodNotAllowed``): a trailing slash is redirected (307) to the path without it, whatever
    the method, as Starlette's routing does [U]; another method is 405. None for other paths."""
    path: str = scope["path"]
    match = _RUNTIME_PATH.fullmatch(path)
    if match is None:
        return None
    if match.group(2):
        return RedirectResponse(str(URL(scope={**scope, "path": path.rstrip("/")})))
    if scope["method"] == "POST":
        return None  # the operation itself (not here: identify() names it)
    error = MethodNotAllowed(f"{scope['method']} is not allowed on {path}; "
                             f"{RUNTIME_OPERATIONS[match.group(1)]} is POST {path}.")
    return error_response(error, runtime.new_request_id())
