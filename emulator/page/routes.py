"""The live page of the fleet, served by the emulator itself (no CDN, no build step).

- ``GET /_emulator/``               the page (``static/index.html``; plain HTML, JS and CSS),
                                    with the state at the time of the request inside it, so
                                    its first paint is the fleet, not an empty shell. With
                                    ``--auth sigv4`` the HTML is open and its data is not: the
                                    state is inside it, and the page key's cookie set, only
                                    for ``?key=<the page key>`` or that cookie
                                    (``emulator/page_key.py``)
- ``GET /_emulator/page/{asset}``   its script and style sheet
- ``GET /_emulator/page/state``     everything the page shows, as JSON (one snapshot)
- ``GET /_emulator/page/stream``    the same snapshot as server-sent events, sent again at
                                    every model event, invocation error, or each second

A stream ends after ``STREAM_S`` seconds and the browser's EventSource reconnects at once (the
``retry`` field): uvicorn waits for open responses before it stops, so a page left open must
never hold up a Ctrl-C or SIGTERM of ``mme serve`` for longer than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse

from emulator import page_key as keys
from emulator.async_inference import AsyncInference
from emulator.cloudwatch.alarms import AlarmStore
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.metrics import endpoint_snapshot
from emulator.page.feed import Feed
from emulator.routes.introspection import describe_endpoint

STREAM_S = 2.0
RETRY_MS = 250
HEARTBEAT_S = 1.0
COALESCE_S = 0.05  # events of one step (unloading, loading, loaded) go out together
ASSETS = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}


def alarm_states(alarms: AlarmStore | None) -> list[dict[str, Any]]:
    """Every CloudWatch alarm: name, type, state, why, since when (real epoch seconds)."""
    return [{"Name": a.name, "Type": a.alarm_type, "State": a.state, "Reason": a.reason,
             "Since": a.state_transitioned} for a in (alarms.all() if alarms else [])]


def page_state(registry: EndpointRegistry, feed: Feed, alarms: AlarmStore | None = None,
               async_inference: AsyncInference | None = None) -> dict[str, Any]:
    now = time.time()
    return {
        "Alarms": alarm_states(alarms),
        "Time": now,
        # Bakes and waits run on the emulated clock: an emulated second is 1 / ClockScale real.
        "ClockScale": registry.settings.clock_scale,
        "Endpoints": {e.name: {**describe_endpoint(e, async_inference),
                               "MultiModel": e.is_multi_model,
                               # Every failed invocation the feed was told of (its list keeps
                               # the last ones): the tiles count these.
                               "ErrorCount": feed.error_counts.get(e.name, 0),
                               "Metrics": endpoint_snapshot(e.name, [v.metrics
                                                                     for v in e.variants]),
                               # A guarded deployment in progress (emulator/control/deployments)
                               "Deployment": (registry.deployments[e.name].describe()
                                              if e.name in registry.deployments else None)}
                      for e in registry.all()},
        "Timeline": feed.timeline(now),
        "Events": feed.recent_events(),
        "Errors": feed.recent_errors(),
        "Activity": feed.recent_activities(),
    }


INITIAL_STATE_AT = b'<script src="/_emulator/page/app.js"></script>'


def page_html(state: dict[str, Any] | None) -> bytes:
    """The page, with ``state`` inside it for the first paint (read by app.js before it opens
    the stream). ``<`` is escaped: no name in the state can end the script element."""
    html = _asset("index.html")
    if state is None:
        return html
    data = json.dumps(state, default=str).replace("<", "\\u003c").encode()
    return html.replace(INITIAL_STATE_AT, b'<script id="initial-state" type="application/json">'
                        + data + b"</script>\n  " + INITIAL_STATE_AT)


def _asset(name: str) -> bytes:
    return resources.files("emulator.page").joinpath("static").joinpath(name).read_bytes()


def build_page_router(registry: EndpointRegistry, feed: Feed,
                      alarms: AlarmStore | None = None,
                      page_key: str | None = None,
                      async_inference: AsyncInference | None = None) -> APIRouter:
    """The page's routes; with ``page_key`` (``--auth sigv4``) its HTML carries the state only
    for a browser that gave the key (``?key=``) or holds its cookie."""
    router = APIRouter()

    @router.get("/_emulator", include_in_schema=False)
    async def page_without_slash() -> RedirectResponse:
        return RedirectResponse("/_emulator/")

    @router.get("/_emulator/")
    async def page(request: Request, key: str | None = None) -> Response:
        given = keys.matches(key, page_key)
        allowed = page_key is None or given or keys.matches(
            request.cookies.get(keys.COOKIE), page_key)
        state = page_state(registry, feed, alarms, async_inference) if allowed else None
        headers = {"Cache-Control": "no-cache"}
        if given and page_key is not None:
            headers["Set-Cookie"] = keys.set_cookie_header(page_key)
        return Response(page_html(state), media_type="text/html; charset=utf-8",
                        headers=headers)

    @router.get("/_emulator/page/state")
    async def state() -> dict[str, Any]:
        return page_state(registry, feed, alarms, async_inference)

    @router.get("/_emulator/page/stream")
    async def stream(request: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[str]:
            loop = asyncio.get_running_loop()
            ends = loop.time() + STREAM_S
            yield f"retry: {RETRY_MS}\n\n"
            while loop.time() < ends and not await request.is_disconnected():
                change = feed.next_change()
                snapshot = json.dumps(page_state(registry, feed, alarms, async_inference),
                                      default=str)
                yield f"event: state\ndata: {snapshot}\n\n"
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(change.wait(),
                                           max(min(HEARTBEAT_S, ends - loop.time()), 0.001))
                    await asyncio.sleep(COALESCE_S)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    @router.get("/_emulator/page/{asset}")
    async def asset(asset: str) -> Response:
        if asset not in ASSETS:
            raise HTTPException(404, f"no asset {asset}; the page has {', '.join(ASSETS)}")
        return Response(_asset(asset), media_type=ASSETS[asset],
                        headers={"Cache-Control": "no-cache"})

    return router
