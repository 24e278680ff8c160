"""How much of a request body the APIs beside the runtime read: at most ``MAX_API_BODY_BYTES``.

The runtime has its own limit (SageMaker's 6 MB payload, ``--max-payload-bytes``), checked as
the body arrives. The control plane, Application Auto Scaling and CloudWatch parse a whole JSON,
CBOR or form body; without a bound one client could make the server hold any number of bytes.
A declared length over the bound is refused before a byte is read; a chunked body (which botocore
never sends) is refused as soon as it passes the bound, and the app behind is told the client
left. [U] AWS documents no request-size limit for these APIs beyond CloudWatch's 1 MB
PutMetricData; the bound is far above any request botocore makes, and the error is AWS's
generic one for an entity too large (413).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emulator.contract.apis import API_SCOPE_KEY, ApiRequest, Protocol, Service
from emulator.contract.protocol_errors import render_error

MAX_API_BODY_BYTES = 8 * 1024 * 1024
TOO_LARGE_CODE = "RequestEntityTooLargeException"  # [U]


class ApiBodyLimit:
    """ASGI layer: bounds the bodies of every API but the runtime (and the emulator's own)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_API_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        api: ApiRequest | None = scope.get(API_SCOPE_KEY)
        if api is None or api.service in (Service.RUNTIME, Service.EMULATOR):
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None:
            if declared.isdigit() and int(declared) > self.limit:
                await self._refuse(api, send, f"{int(declared)} bytes")
                return
            await self.app(scope, receive, send)  # the server reads no more than declared
            return
        await self._bounded(api, scope, receive, send)

    async def _bounded(self, api: ApiRequest, scope: Scope, receive: Receive,
                       send: Send) -> None:
        """A body of no declared length: counted as it comes, cut past the limit."""
        received = 0
        refused = False

        async def counting_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                refused = True
                await self._refuse(api, send, f"more than {self.limit} bytes")
                return {"type": "http.disconnect"}
            return message

        async def quiet_send(message: Message) -> None:
            if not refused:  # after the refusal, whatever the app answers is dropped
                await send(message)

        await self.app(scope, counting_receive, quiet_send)

    async def _refuse(self, api: ApiRequest, send: Send, size: str) -> None:
        status, headers, body = render_error(
            api.protocol, "RequestEntityTooLarge" if api.protocol is Protocol.QUERY
            else TOO_LARGE_CODE, 413,
            f"Request body of {size} is over the {self.limit} bytes this API reads; "
            "send a smaller request.")
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
