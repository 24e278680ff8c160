"""The pure ASGI middleware: read the body, verify SigV4, evaluate IAM, replay the body to the app.

Only installed with ``--auth sigv4``; with auth off nothing is added to the request path.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emulator import page_key as page_keys
from emulator.auth import auth_errors
from emulator.auth.credentials import Principal
from emulator.auth.policy import Decision, evaluate, normalise_context
from emulator.auth.requests import ApiCall, classify, global_keys
from emulator.auth.sigv4 import verify
from emulator.contract.apis import Protocol, RepeatedParameter, Service, read_request

log = logging.getLogger(__name__)


# What holds nothing tenant-specific stays open to a plain GET: health checks and Prometheus
# scrape /ping and /metrics, and the live page's HTML, script and style (its data is not open:
# contract/apis.py names the emulator's own actions). Anything else that is no AWS API needs a
# valid signature from a known principal.
OPEN_GET_PREFIXES = ("/ping", "/metrics", "/_emulator/")
# Read at most this much of a body whose length is not declared (chunked): the largest payload
# SageMaker takes (6 MiB) plus room for a control-plane document.
MAX_UNDECLARED_BODY = 7 * 1024 * 1024


class SigV4Middleware:
    def __init__(self, app: ASGIApp, principals: Mapping[str, Principal], region: str,
                 account: str, max_payload_bytes: int,
                 clock: Callable[[], datetime] | None = None,
                 page_key: str | None = None) -> None:
        self.app = app
        self.page_key = page_key  # the live page's data, for a browser (emulator/page_key.py)
        self.principals = principals
        self.region = region
        self.account = account
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock or (lambda: datetime.now(timezone.utc))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method: str = scope["method"]
        path: str = scope["path"]
        # The front door's reading (headers joined, API identified): IAM decides on what runs.
        api = read_request(scope)
        if api is None and method in ("GET", "HEAD") and path.startswith(OPEN_GET_PREFIXES):
            await self.app(scope, receive, send)
            return
        if (method in ("GET", "HEAD") and path in page_keys.PAGE_DATA_PATHS
                and page_keys.matches(page_keys.cookie_value(scope["headers"]), self.page_key)):
            await self.app(scope, receive, send)
            return
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1"))
                   for k, v in scope["headers"]]
        lookup = dict(headers)  # canonical: each name once
        declared = lookup.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_payload_bytes:
            if api is not None and api.service is Service.RUNTIME:
                # The runtime refuses an oversize body unread, before it looks at anything else
                # (ValidationError, as SageMaker): nothing is revealed or run, so let it answer
                # rather than buffer megabytes from an unauthenticated caller.
                await self.app(scope, receive, send)
                return
            await self._refuse(send, auth_errors.incomplete(  # [U] AWS's answer to an oversize body
                f"Request body of {declared} bytes is over {self.max_payload_bytes} bytes; "
                "not read."), api.protocol if api else Protocol.REST_JSON)
            return
        body, more = await _read_body(receive, MAX_UNDECLARED_BODY)
        protocol = api.protocol if api else Protocol.REST_JSON
        try:
            if more:
                raise auth_errors.incomplete("Request body too large to verify.")
            try:
                # No API (the front door found none): nothing to classify again.
                call = None if api is None else classify(method, path, lookup, body,
                                                         self.region, self.account, api)
            except RepeatedParameter as exc:
                raise auth_errors.repeated_parameter(str(exc)) from exc
            principal = verify(
                method=method, raw_path=scope.get("raw_path") or scope["path"].encode(),
                query=scope.get("query_string", b""), headers=headers, body=body,
                principals=self.principals,
                service=call.service if call and call.service else _scope_service(lookup),
                region=self.region, now=self.clock())
            if call is not None:
                self._authorize(principal, call, scope)
        except auth_errors.AuthError as exc:
            log.info("auth refused %s %s: %s", method, path, exc)
            await self._refuse(send, exc, protocol)
            return
        await self.app(scope, _replay(body, receive), send)

    def _authorize(self, principal: Principal, call: ApiCall, scope: Scope) -> None:
        client = scope.get("client")
        keys: dict[str, Any] = dict(global_keys(_ip(client[0] if client else None),
                                                self.region, self.clock()))
        keys.update({"aws:username": principal.name, "aws:PrincipalArn": principal.arn,
                     "aws:PrincipalAccount": self.account, "aws:PrincipalType": "User"})
        keys.update(call.keys)
        decision = evaluate(principal.policies, call.action, call.resource,
                            normalise_context(keys))
        if decision is not Decision.ALLOW:
            raise auth_errors.access_denied(principal.arn, call.action, call.resource,
                                       explicit=decision is Decision.EXPLICIT_DENY)

    async def _refuse(self, send: Send, error: auth_errors.AuthError,
                      protocol: Protocol) -> None:
        status, headers, body = error.render(protocol)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _scope_service(headers: Mapping[str, str]) -> str:
    """For the emulator's own routes, any service the caller scoped its signature to is
    accepted (they belong to no AWS service)."""
    credential = headers.get("authorization", "").partition("Credential=")[2].split(",")[0]
    parts = credential.split("/")
    return parts[3] if len(parts) == 5 else ""


def _ip(host: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address(host)) if host else None
    except ValueError:
        return None


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The whole body (up to ``limit``) and whether more was left unread."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks), True
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _replay(body: bytes, receive: Receive) -> Receive:
    """Give the app the body already read, then pass through (e.g. http.disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
