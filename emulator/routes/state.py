"""HTTP binding of the server's whole state (``emulator/state``): reset it, save it, restore it.

- ``POST /_emulator/reset``      empty the server (JSON body optional: ``{"keep_cache": true}``
                                 leaves the stopped instances' models on disk); 200 once it is
                                 empty: ``{"removed": {kind: count}, "stopped_endpoints": N,
                                 "restarted": [the --model-data endpoint]}``
- ``GET  /_emulator/snapshot``   the state as a snapshot document (``?with_models=true``: the
                                 loaded TargetModels too)
- ``POST /_emulator/snapshot``   a snapshot document restored into an empty server: 200 once its
                                 endpoints have started (and its models loaded); 409 if the
                                 server holds something (reset first); 400 if it is not a snapshot

Every refusal is ``{"error": "what to fix"}``. With ``--auth sigv4`` they are the
``emulator:Reset``, ``emulator:GetSnapshot`` and ``emulator:RestoreSnapshot`` actions
(docs/auth.md).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from emulator.state.server_state import NotEmpty, ServerState
from emulator.state.snapshot_format import SnapshotError

_RESET_FIELDS = {"keep_cache"}
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


def _refused(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _json_body(request: Request) -> tuple[Any, str | None]:
    """The body parsed (None when there is none), or why it is not JSON."""
    raw = await request.body()
    if not raw.strip():
        return None, None
    try:
        return json.loads(raw), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"The body is not JSON ({exc})."


def build_state_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.post("/_emulator/reset")
    async def reset(request: Request) -> JSONResponse:
        body, not_json = await _json_body(request)
        if not_json is not None:
            return _refused(f'{not_json} Send no body, or {{"keep_cache": true|false}}.')
        body = {} if body is None else body
        if not isinstance(body, dict):
            return _refused('The body is a JSON object: {"keep_cache": true|false}, or none.')
        unknown = sorted(set(body) - _RESET_FIELDS)
        if unknown:
            return _refused(f"Unknown fields {', '.join(unknown)}; a reset takes only "
                            '"keep_cache" (true|false).')
        keep_cache = body.get("keep_cache", False)
        if not isinstance(keep_cache, bool):
            return _refused(f'"keep_cache" is true or false, not {json.dumps(keep_cache)}.')
        return JSONResponse(await state.reset(keep_cache=keep_cache))

    @router.get("/_emulator/snapshot")
    async def snapshot(with_models: str = "false") -> JSONResponse:
        if with_models.lower() not in (*_TRUE, *_FALSE):
            return _refused(f"with_models is true or false, not {with_models!r}.")
        return JSONResponse(state.export(with_models=with_models.lower() in _TRUE))

    @router.post("/_emulator/snapshot")
    async def restore(request: Request) -> JSONResponse:
        body, not_json = await _json_body(request)
        if not_json is not None:
            return _refused(f"{not_json} Send a snapshot document (GET /_emulator/snapshot "
                            "answers one).")
        try:
            return JSONResponse(await state.restore(body))
        except NotEmpty as exc:
            return _refused(f"The server is not empty ({exc}): POST /_emulator/reset first, "
                            "then restore the snapshot.", 409)
        except SnapshotError as exc:
            return _refused(str(exc))

    return router
