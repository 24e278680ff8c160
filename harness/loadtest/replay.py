"""``mme loadtest --trace FILE``: a trace's calls sent at their own times, and the comparison.

Open loop: each call leaves at its offset in the trace divided by ``--speed``, whatever the
answers before it are doing (a closed-loop user would wait, and bend the arrivals to the
endpoint's latency). The calls go over keep-alive HTTP as boto3 sends them (SageMaker's headers,
no signing: the emulator's own runtime path), each to the endpoint the trace names unless
``--endpoint-name`` is given. Each call's body is the trace's when it has one (a data-capture
``endpointInput``, a recording made with ``--record-bodies``), else ``--body``/``--inputs``,
else random tensors shaped by the model's ``config.pbtxt`` (the store of ``--model-data``).

The report compares the replay with what the trace recorded: calls per TargetModel (or
component), which must match exactly; latency percentiles and the cache hit ratio (recordings
carry both; data capture neither); the two-sample Kolmogorov-Smirnov distance between the
trace's inter-arrival times (scaled by the speed) and the replay's; how late each call left
against its offset (p50, p99, max).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.cloudwatch.statistics import percentile
from harness.loadtest.invokers import CACHE_HIT_HEADER, _bool, error_code_from
from harness.loadtest.trace import Trace, TraceCall, TraceError, inter_arrivals, ks_distance

START_DELAY_S = 0.2  # between the last body prepared and the first call sent
TARGET_HEADER = "X-Amzn-SageMaker-Target-Model"
COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"
DEFAULT_CONTENT_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class Sent:
    call: TraceCall
    scheduled_s: float  # offset / speed, from the replay's start
    sent_s: float  # when it left, from the replay's start
    latency_ms: float  # to the last byte of the answer (0 when none came)
    status: int  # 0: no answer (a refused or broken connection)
    error: str | None
    cache_hit: bool | None


# (body, content type) for a call without a body of its own; None: none can be made.
FallbackBody = Callable[[TraceCall], tuple[bytes, str] | None]


def bodies_for(trace: Trace, fallback: FallbackBody | None) -> list[tuple[bytes, str]]:
    """Every call's body and content type, decided before anything is sent."""
    out: list[tuple[bytes, str]] = []
    missing: dict[str, int] = {}
    for call in trace.calls:
        if call.body is not None:
            out.append((call.body, call.content_type or DEFAULT_CONTENT_TYPE))
            continue
        made = fallback(call) if fallback is not None else None
        if made is None:
            missing[call.key] = missing.get(call.key, 0) + 1
            continue
        out.append(made)
    if missing:
        named = ", ".join(f"{key} ({n})" for key, n in sorted(missing.items())[:5])
        raise TraceError(f"{sum(missing.values())} calls of the trace have no body and none can "
                         f"be made for them: {named}; record with --record-bodies, or give "
                         "--body FILE --content-type TYPE or --inputs FILE.npz, or --model-data "
                         "STORE (bodies from each model's config.pbtxt)")
    return out


async def replay(url: str, trace: Trace, bodies: list[tuple[bytes, str]], *, speed: float = 1.0,
                 endpoint: str | None = None, interrupt: asyncio.Event | None = None,
                 progress: Callable[[int, int], None] | None = None) -> list[Sent]:
    """Send every call at ``offset / speed`` after the start; the calls as they went."""
    import aiohttp

    loop = asyncio.get_running_loop()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    sent: list[Sent] = []
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     skip_auto_headers=("User-Agent",)) as session:
        start = loop.time() + START_DELAY_S

        async def one(call: TraceCall, body: bytes, content_type: str, scheduled: float) -> None:
            headers = {"Content-Type": content_type}
            if call.target_model is not None:
                headers[TARGET_HEADER] = call.target_model
            if call.inference_component is not None:
                headers[COMPONENT_HEADER] = call.inference_component
            name = endpoint or call.endpoint or "local"
            left = loop.time()
            status, error, hit = 0, None, None
            try:
                async with session.post(f"{url}/endpoints/{name}/invocations", data=body,
                                        headers=headers) as resp:
                    await resp.read()
                    status = resp.status
                    error = error_code_from(status, resp.headers)
                    hit = _bool(resp.headers.get(CACHE_HIT_HEADER))
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                error = type(exc).__name__
            done = loop.time()
            sent.append(Sent(call, scheduled, left - start, (done - left) * 1e3 if status else 0,
                             status, error, hit))

        total = len(trace.calls)
        for index, (call, (body, content_type)) in enumerate(zip(trace.calls, bodies,
                                                                 strict=True)):
            if interrupt is not None and interrupt.is_set():
                break
            scheduled = call.offset_s / speed
            delay = start + scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = loop.create_task(one(call, body, content_type, scheduled))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            if progress is not None and index % 1000 == 999:
                progress(index + 1, total)
        if tasks:
            await asyncio.gather(*tasks)
    sent.sort(key=lambda s: s.scheduled_s)
    return sent


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    return {"p50": round(percentile(values, 50), 3), "p90": round(percentile(values, 90), 3),
            "p99": round(percentile(values, 99), 3), "max": round(max(values), 3)}


def _hit_ratio(hits: list[bool | None]) -> float | None:
    known = [h for h in hits if h is not None]
    return round(sum(known) / len(known), 4) if known else None


def summarize(trace: Trace, sent: list[Sent], speed: float, interrupted: bool = False
              ) -> dict[str, Any]:
    """The replay against the trace (JSON-ready)."""
    recorded_counts = trace.counts()
    replayed_counts: dict[str, int] = {}
    for s in sent:
        replayed_counts[s.call.key] = replayed_counts.get(s.call.key, 0) + 1
    keys = sorted(set(recorded_counts) | set(replayed_counts))
    per_model = {k: {"recorded": recorded_counts.get(k, 0), "replayed": replayed_counts.get(k, 0)}
                 for k in keys}
    lateness = [(s.sent_s - s.scheduled_s) * 1e3 for s in sent]
    answered = [s for s in sent if s.status]
    errors: dict[str, int] = {}
    for s in sent:
        if s.error is not None:
            errors[s.error] = errors.get(s.error, 0) + 1
    recorded_errors: dict[str, int] = {}
    for c in trace.calls:
        if c.status is not None and c.status != 200:
            recorded_errors[str(c.status)] = recorded_errors.get(str(c.status), 0) + 1
    replay_span = max((s.sent_s for s in sent), default=0.0) - min(
        (s.sent_s for s in sent), default=0.0)
    recorded_latencies = [c.latency_ms for c in trace.calls if c.latency_ms is not None]
    return {
        "trace": {"kind": trace.kind, "sources": trace.sources, "calls": len(trace.calls),
                  "span_s": round(trace.span_s, 3)},
        "speed": speed,
        "interrupted": interrupted,
        "calls": len(sent),
        "rate_per_s": round(len(sent) / replay_span, 2) if replay_span > 0 else None,
        "per_model": per_model,
        "counts_match": all(v["recorded"] == v["replayed"] for v in per_model.values()),
        "errors": dict(sorted(errors.items())),
        "recorded_errors": dict(sorted(recorded_errors.items())),
        "latency_ms": {"recorded": _percentiles(recorded_latencies) if recorded_latencies
                       else None,
                       "replayed": _percentiles([s.latency_ms for s in answered])},
        "cache_hit_ratio": {"recorded": _hit_ratio([c.cache_hit for c in trace.calls]),
                            "replayed": _hit_ratio([s.cache_hit for s in answered])},
        "inter_arrival_ks": round(ks_distance(
            [round(d / speed, 6) for d in inter_arrivals([c.offset_s for c in trace.calls])],
            inter_arrivals([s.sent_s for s in sent])), 4),
        "offset_error_ms": _percentiles(lateness),
    }


def _shown(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}{unit}" if not math.isnan(value) else "-"
    return f"{value}{unit}"


def to_markdown(summary: Mapping[str, Any]) -> str:
    trace = summary["trace"]
    lines = [f"# Replay of {trace['calls']} calls ({trace['kind']}, {trace['span_s']:.1f} s) "
             f"at speed {summary['speed']:g}", "",
             f"- sent {summary['calls']} calls at {_shown(summary['rate_per_s'])} calls/s"
             + (" (interrupted)" if summary["interrupted"] else ""),
             f"- calls per model {'match' if summary['counts_match'] else 'DO NOT match'} the "
             "trace",
             f"- inter-arrival KS distance: {summary['inter_arrival_ks']:.4f}",
             "- left late against the trace's offset (ms): " + ", ".join(
                 f"{k} {_shown(v)}" for k, v in summary["offset_error_ms"].items()),
             f"- errors: {summary['errors'] or 'none'} (recorded: "
             f"{summary['recorded_errors'] or 'none'})", "",
             "| | recorded | replayed |", "|---|---|---|"]
    latency = summary["latency_ms"]
    for key in ("p50", "p90", "p99", "max"):
        recorded = latency["recorded"][key] if latency["recorded"] else None
        lines.append(f"| latency {key} (ms) | {_shown(recorded)} | "
                     f"{_shown(latency['replayed'][key])} |")
    hits = summary["cache_hit_ratio"]
    lines.append(f"| cache hit ratio | {_shown(hits['recorded'])} | {_shown(hits['replayed'])} |")
    lines += ["", "| model | recorded calls | replayed calls |", "|---|---|---|"]
    lines += [f"| {k} | {v['recorded']} | {v['replayed']} |"
              for k, v in summary["per_model"].items()]
    return "\n".join(lines)


def write_summary(summary: Mapping[str, Any], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "replay.json", "markdown": out / "replay.md"}
    paths["json"].write_text(json.dumps(summary, indent=2) + "\n")
    paths["markdown"].write_text(to_markdown(summary) + "\n")
    return paths
