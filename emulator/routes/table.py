"""The front door's table: which handler answers each (service, operation).

Every AWS API the emulator serves is one row per operation, keyed by the front door's one
reading of the request (``emulator/contract/apis.py``): ``emulator/app.py`` looks a request up
here once, and nothing behind it dispatches on ``X-Amz-Target`` or ``Action`` again. A service
that answers operations it does not know in its own error shape has an ``OTHER_OPERATIONS`` row
(an unknown ``X-Amz-Target`` operation, a query-protocol request whose ``Action`` is in its
body). Handlers are plain ASGI apps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from emulator.contract.apis import ApiRequest, Service, read_request
from emulator.faults.rules import CallFacts, ErrorAnswer
from emulator.faults.table import FaultTable, error_unless_clear

# The row of a service's operations that have none of their own.
OTHER_OPERATIONS = "*"

Handler = Callable[[Request], Awaitable[Response]]
Rows = dict[tuple[Service, str], ASGIApp]


def as_asgi(handler: Handler) -> ASGIApp:
    """A request handler as a plain ASGI app."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await handler(Request(scope, receive))
        await response(scope, receive, send)

    return app


def rows(service: Service, operations: Iterable[str], app: ASGIApp) -> Rows:
    """One service's rows: each operation, and the ones it does not know, answered by ``app``."""
    return {**{(service, operation): app for operation in operations},
            (service, OTHER_OPERATIONS): app}


def lookup(table: Mapping[tuple[Service, str], ASGIApp], api: ApiRequest) -> ASGIApp | None:
    """The handler of a request the front door identified, if the table has one."""
    handler = table.get((api.service, api.operation))
    if handler is None:
        handler = table.get((api.service, OTHER_OPERATIONS))
    return handler


async def injected_error(faults: FaultTable | None, scope: Scope) -> ErrorAnswer | None:
    """The error a fault rule in force answers this request with (a latency is waited out
    here), for the service's handler to raise in its own shape; None: answer as usual."""
    api = read_request(scope)
    if api is None or faults is None or not faults.armed:
        return None
    return await error_unless_clear(faults, CallFacts(api.service.value, api.operation))
