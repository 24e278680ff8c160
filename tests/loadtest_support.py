"""A fake SageMaker endpoint for load-test tests: real HTTP on 127.0.0.1, answers decided by a
Python function, in a thread of the test process (Locust, in its own processes, calls it with
boto3 like any endpoint). It counts what it served, so a test can hold the report to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from emulator.processes import free_port


@dataclass(frozen=True)
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    error_code: str | None = None  # x-amzn-ErrorType, as SageMaker names errors
    message: str | None = None
    delay_s: float = 0.002


def model_error(message: str) -> Answer:
    return Answer(424, error_code="ModelError", message=message)


def served(variant: str = "AllTraffic", instance: str | None = None, *,
           model_latency_us: float | None = None, cache_hit: bool | None = None) -> Answer:
    headers = {"x-Amzn-Invoked-Production-Variant": variant}
    if instance:
        headers["X-Mme-Instance"] = instance
    if model_latency_us is not None:
        headers["X-Mme-Model-Latency-Us"] = str(model_latency_us)
    if cache_hit is not None:
        headers["X-Mme-Model-Cache-Hit"] = "true" if cache_hit else "false"
    return Answer(headers=headers)


class FakeEndpoint:
    """``answer(target_model) -> Answer`` for each InvokeEndpoint; ``die_after`` answers, the
    server closes (connections refused, as a killed server)."""

    def __init__(self, answer: Callable[[str | None], Answer] | None = None, *,
                 die_after: int | None = None) -> None:
        self.answer = answer or (lambda target: served())
        self.die_after = die_after
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.calls: Counter[str | None] = Counter()
        self.in_flight = 0
        self.peak = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._dead = False

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    async def _invoke(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if self._dead:
            raise web.HTTPServiceUnavailable()
        target = request.headers.get("X-Amzn-SageMaker-Target-Model")
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            answer = self.answer(target)
            await asyncio.sleep(answer.delay_s)
        finally:
            self.in_flight -= 1
        self.calls[target] += 1
        if self.die_after is not None and self.total >= self.die_after and not self._dead:
            self._dead = True
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._close()))
        if answer.error_code is not None:
            return web.Response(status=answer.status, headers={
                "x-amzn-ErrorType": answer.error_code, **answer.headers},
                body=json.dumps({"ErrorCode": answer.error_code,
                                 "message": answer.message or ""}).encode(),
                content_type="application/json")
        return web.Response(status=answer.status, headers=answer.headers,
                            body=b'{"outputs": []}', content_type="application/json")

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/endpoints/{name}/invocations", self._invoke)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[FakeEndpoint]:
        thread = threading.Thread(target=self._serve, daemon=True)
        thread.start()
        assert self._ready.wait(10), "the fake endpoint did not start"
        try:
            yield self
        finally:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._loop.stop)
            thread.join(10)


def json_body() -> Any:
    from harness.payloads import Request

    return Request(b'{"inputs": []}', "application/json")
