"""The live page at ``/_emulator/``: the fleet, its models' states, a timeline, recent errors.

``install_page(app, registry, feed)`` mounts its routes; the composition root puts
``InvocationErrors`` (which tells the feed of failed invocations) in the front door's chain,
and has the feed ``watch`` every instance built.
The assets (``static/``) ship inside the package.
"""

from __future__ import annotations

from fastapi import FastAPI

from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.page.feed import Feed
from emulator.page.routes import build_page_router

__all__ = ["Feed", "install_page"]


def install_page(app: FastAPI, registry: EndpointRegistry, feed: Feed) -> None:
    # the alarms' states too, when the app has an AlarmStore (emulator/cloudwatch/alarms.py);
    # with --auth sigv4 the page's data (and the state inside its HTML) only for the browser
    # that holds the page's key (emulator/page_key.py)
    # and the asynchronous endpoints' queues, when the app has asynchronous inference
    app.include_router(build_page_router(registry, feed, getattr(app.state, "alarms", None),
                                         page_key=getattr(app.state, "page_key", None),
                                         async_inference=getattr(app.state, "async_inference",
                                                                 None)))
    app.state.page_feed = feed
