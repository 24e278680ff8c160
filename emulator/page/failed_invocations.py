"""Tells the page's feed of every failed invocation, with the SageMaker error the client got.

A pure ASGI middleware, so the runtime route stays unaware of the page: it looks only at the
requests the front door read as sagemaker-runtime calls (``emulator/contract/apis.py``), and reads
the answer only when its status is an error (the error body is small JSON; successful bodies pass
through untouched and unbuffered).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emulator.contract.apis import API_SCOPE_KEY, ApiRequest, Service
from emulator.contract.runtime import H_TARGET_MODEL
from emulator.page.feed import Feed

ERROR_TYPE_HEADER = b"x-amzn-errortype"
MAX_MESSAGE_CHARS = 500


class InvocationErrors:
    def __init__(self, app: ASGIApp, feed: Feed) -> None:
        self.app = app
        self.feed = feed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        api: ApiRequest | None = scope.get(API_SCOPE_KEY)
        if api is None or api.service is not Service.RUNTIME:
            await self.app(scope, receive, send)
            return
        failure: dict[str, Any] = {}
        body: list[bytes] = []

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                failure["status"] = message["status"]
                failure["headers"] = message.get("headers", [])
            elif message["type"] == "http.response.body" and failure:
                body.append(message.get("body", b""))
                if not message.get("more_body"):
                    self.answered(scope, failure["status"], failure["headers"], b"".join(body))
            await send(message)

        await self.app(scope, receive, watching_send)

    def answered(self, scope: Scope, status: int, headers: Iterable[tuple[bytes, bytes]],
                 body: bytes) -> None:
        """What a runtime call was answered, whole (a server that writes the answer itself,
        bypassing this middleware, tells it here)."""
        if status < 400:
            return
        api: ApiRequest | None = scope.get(API_SCOPE_KEY)
        code = dict(headers).get(ERROR_TYPE_HEADER, b"").decode() or "Unknown"
        endpoint = api.endpoint if api is not None and api.endpoint else ""
        self._tell(scope, endpoint, {"status": status, "code": code}, body)

    def _tell(self, scope: Scope, endpoint: str, failure: dict[str, Any], body: bytes) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        try:
            members = json.loads(body)
            message = str(members.get("Message") or members.get("message") or "")
        except (ValueError, AttributeError):
            message = body[:MAX_MESSAGE_CHARS].decode(errors="replace")
        self.feed.invocation_failed(endpoint, headers.get(H_TARGET_MODEL), failure["status"],
                                    failure["code"], message[:MAX_MESSAGE_CHARS])
