"""Per-model figures of the server ``mme ci up`` runs: calls, latency, cold loads, errors.

The emulator's own metrics are SageMaker's, per endpoint and variant (``/_emulator/metrics``,
``/metrics``); a pull request's reviewer wants them per model. This recorder watches every
runtime answer the server writes, whichever client sent the request (boto3, the SageMaker SDK,
curl), and keeps per TargetModel:

- each successful call's ModelLatency (the emulator's ``X-Mme-Model-Latency-Us`` header: the
  same figure as SageMaker's ModelLatency metric) and, for warm calls, its time in the server
  (request in -> answer out);
- cold loads: calls answered with ``X-Mme-Model-Cache-Hit: 0``, and their time in the server;
- errors by the code the client read (``x-amzn-ErrorType``).

It wraps the two ways an invocation is answered (``EmulatorApp.front``, the ASGI chain, and
``EmulatorApp.direct_invocations``, the path that skips ASGI while auth is off) after
``build_app``; nothing in ``emulator/`` knows of it. The samples stay in memory (a float per
call) and are written as JSON when the server stops.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emulator.cloudwatch.statistics import percentile

LATENCY_HEADER = b"x-mme-model-latency-us"
CACHE_HIT_HEADER = b"x-mme-model-cache-hit"
ERROR_TYPE_HEADER = b"x-amzn-errortype"
TARGET_MODEL_HEADER = b"x-amzn-sagemaker-target-model"
# The model of an endpoint invoked without TargetModel (a single-model endpoint).
NO_TARGET = "(no TargetModel)"


@dataclass
class ModelFigures:
    """What one TargetModel's calls came to; ``summary()`` is its row in the report."""

    calls: int = 0
    model_latency_us: list[float] = field(default_factory=list)  # successful calls
    server_s: list[float] = field(default_factory=list)  # successful warm calls
    cold_load_s: list[float] = field(default_factory=list)  # calls that loaded the model
    errors: dict[str, int] = field(default_factory=dict)  # code -> count

    def summary(self) -> dict[str, Any]:
        def ms(values: Sequence[float], q: float, scale: float) -> float | None:
            return round(percentile(values, q) * scale, 3) if values else None

        return {
            "calls": self.calls,
            "ok": len(self.server_s) + len(self.cold_load_s),
            "model_latency_p50_ms": ms(self.model_latency_us, 50, 1e-3),
            "model_latency_p99_ms": ms(self.model_latency_us, 99, 1e-3),
            "server_p50_ms": ms(self.server_s, 50, 1e3),
            "server_p99_ms": ms(self.server_s, 99, 1e3),
            "cold_loads": len(self.cold_load_s),
            "cold_load_s": [round(s, 4) for s in self.cold_load_s],
            "errors": dict(sorted(self.errors.items())),
        }


class ModelStats:
    """Answers seen, per TargetModel. ``install(app)`` hooks it into a built emulator app."""

    def __init__(self) -> None:
        self.models: dict[str, ModelFigures] = {}

    def record(self, target: str | None, status: int, headers: Iterable[tuple[bytes, bytes]],
               seconds: float) -> None:
        values = {k.lower(): v for k, v in headers}
        figures = self.models.setdefault(target or NO_TARGET, ModelFigures())
        figures.calls += 1
        if status >= 400:
            code = values.get(ERROR_TYPE_HEADER, b"").decode("latin-1") or f"HTTP {status}"
            figures.errors[code] = figures.errors.get(code, 0) + 1
            return
        latency = values.get(LATENCY_HEADER)
        if latency is not None and latency.isdigit():
            figures.model_latency_us.append(float(latency))
        if values.get(CACHE_HIT_HEADER) == b"0":
            figures.cold_load_s.append(seconds)
        else:  # a warm call: a cold one's download and load would swamp the percentiles
            figures.server_s.append(seconds)

    def summary(self) -> dict[str, dict[str, Any]]:
        return {name: figures.summary() for name, figures in sorted(self.models.items())}

    def dump(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"Models": self.summary()}, indent=2))
        tmp.replace(path)

    def install(self, app: Any) -> None:
        """Watch ``app``'s invocation answers (an ``emulator.app.EmulatorApp`` as built by
        ``build_app``: its ``front`` chain and, auth off, its ``direct_invocations``)."""
        if getattr(app, "front", None) is None:
            # The app was built differently: say so rather than report no calls at all.
            logging.getLogger(__name__).warning(
                "mme ci: the app has no front door to watch; the report has no per-model figures")
            return
        app.front = _Recording(app.front, self)
        direct = getattr(app, "direct_invocations", None)
        if direct is not None:
            async def answer_directly(scope: Scope, body_source: Any) -> Any:
                started = time.perf_counter()
                answer = await direct(scope, body_source)
                status, headers, _body = answer
                self.record(_target(scope), status, headers, time.perf_counter() - started)
                return answer

            app.direct_invocations = answer_directly


def _is_runtime_call(scope: Scope) -> bool:
    path = str(scope.get("path", ""))
    return scope.get("type") == "http" and path.startswith("/endpoints/") \
        and path.rsplit("/", 1)[-1] in ("invocations", "invocations-response-stream")


def _target(scope: Scope) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == TARGET_MODEL_HEADER:
            return str(value.decode("latin-1"))
    return None


class _Recording:
    """ASGI middleware: times each runtime call from its arrival to the end of its answer."""

    def __init__(self, app: ASGIApp, stats: ModelStats) -> None:
        self.app = app
        self.stats = stats

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_runtime_call(scope):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen: dict[str, Any] = {}

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
                seen["headers"] = list(message.get("headers", []))
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body") \
                    and "status" in seen and "done" not in seen:
                seen["done"] = True
                self.stats.record(_target(scope), seen["status"], seen["headers"],
                                  time.perf_counter() - started)

        await self.app(scope, receive, watching_send)
