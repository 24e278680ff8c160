"""``mme loadtest --report-format aiperf``: a load test's figures in aiperf's summary shape.

aiperf (NVIDIA's benchmark client, PyPI ``aiperf``) writes ``profile_export_aiperf.json``: its
``JsonExportData`` (schema 1.4 in aiperf 0.13), whose metrics are each a ``JsonMetricResult``
(``unit``, ``avg``, ``p1`` ... ``p99``, ``min``, ``max``, ``std``, ``count``, ``sum``) under
the metric's tag, with ``start_time``, ``end_time``, ``was_cancelled`` and ``error_summary``
(``error_details``: ``code``, ``type``, ``message``; ``count``) beside them. The metrics an
InvokeEndpoint load has are written in aiperf's display units: ``request_latency`` (ms),
``request_throughput`` (requests/sec), ``request_count`` and ``error_request_count``
(requests), ``benchmark_duration`` (sec), ``min_request_timestamp`` and
``max_response_timestamp`` (ns since the epoch, as aiperf's). Token metrics are left out: a
Triton model's calls have none. What only the emulator knows goes under ``mme`` (aiperf's
model allows extra keys). [U] aiperf fills ``input_config`` with its own configuration; it is
left out here, not faked.
"""

from __future__ import annotations

import datetime
import json
import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emulator.cloudwatch.statistics import percentile

SCHEMA_VERSION = "1.4"  # aiperf 0.13.0's JsonExportData.SCHEMA_VERSION
FILE_NAME = "profile_export_aiperf.json"
_PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)


def metric(unit: str, values: list[float]) -> dict[str, Any]:
    """A distribution as aiperf's ``JsonMetricResult``."""
    if not values:
        return {"unit": unit, "count": 0}
    out: dict[str, Any] = {"unit": unit, "avg": sum(values) / len(values)}
    out.update({f"p{q}": percentile(values, q) for q in _PERCENTILES})
    out.update({"min": min(values), "max": max(values),
                "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
                "count": len(values), "sum": sum(values)})
    return out


def scalar(unit: str, value: float) -> dict[str, Any]:
    """A run-level figure (a rate, a count, a duration): ``avg`` alone, as aiperf writes it."""
    return {"unit": unit, "avg": value}


def _iso(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s).isoformat()  # naive local, as aiperf's


def export(*, latencies_ms: list[float], started_at: float, duration_s: float,
           errors: Mapping[str, int], cancelled: bool, extra: Mapping[str, Any],
           messages: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The summary document; ``errors``: error code (SageMaker's, or an HTTP status) ->
    count."""
    total = len(latencies_ms) + sum(errors.values())
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "aiperf_version": None, "benchmark_id": None,
        "request_throughput": scalar("requests/sec",
                                     len(latencies_ms) / duration_s if duration_s > 0 else 0.0),
        "request_latency": metric("ms", latencies_ms),
        "request_count": scalar("requests", float(len(latencies_ms))),
        "benchmark_duration": scalar("sec", duration_s),
        "min_request_timestamp": scalar("ns", math.floor(started_at * 1e9)),
        "max_response_timestamp": scalar("ns", math.floor((started_at + duration_s) * 1e9)),
        "was_cancelled": cancelled,
        "is_complete": not cancelled,
        "error_summary": [
            {"error_details": {"code": int(code) if code.isdigit() else None, "type": code,
                               "message": (messages or {}).get(code) or code},
             "count": count} for code, count in sorted(errors.items())],
        "start_time": _iso(started_at),
        "end_time": _iso(started_at + duration_s),
        "mme": {"requests_sent": total, **extra},
    }
    if errors:
        out["error_request_count"] = scalar("requests", float(sum(errors.values())))
    return out


def from_loadtest(result: Any, summary: Mapping[str, Any]) -> dict[str, Any]:
    """A Locust load test (``LoadResult``) and its summary."""
    ok = [s for s in result.samples if s.ok]
    return export(latencies_ms=[(s.end - s.start) * 1e3 for s in ok],
                  started_at=result.started_at, duration_s=result.duration_s,
                  errors=summary["errors_by_code"], messages=summary.get("error_messages"),
                  cancelled=str(result.stop_reason).startswith(("interrupted", "aborted")),
                  extra={"source": "mme loadtest", "stop_reason": result.stop_reason,
                         "cache_hit_ratio": summary.get("cache_hit_ratio"),
                         "cold_starts": summary.get("cold_starts")})


def write_export(document: Mapping[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE_NAME
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def from_replay(sent: list[Any], summary: Mapping[str, Any], started_at: float
                ) -> dict[str, Any]:
    """A trace's replay (``replay.Sent`` rows) and its summary."""
    answered_ok = [s.latency_ms for s in sent if 200 <= s.status < 300]
    duration = max((s.sent_s + s.latency_ms / 1e3 for s in sent), default=0.0)
    errors: dict[str, int] = {}
    for s in sent:
        if not 200 <= s.status < 300:
            code = s.error or str(s.status)
            errors[code] = errors.get(code, 0) + 1
    return export(latencies_ms=answered_ok, started_at=started_at, duration_s=duration,
                  errors=errors, cancelled=bool(summary.get("interrupted")),
                  extra={"source": "mme loadtest --trace", "trace": summary["trace"],
                         "speed": summary["speed"],
                         "cache_hit_ratio": summary["cache_hit_ratio"]["replayed"],
                         "inter_arrival_ks": summary["inter_arrival_ks"],
                         "offset_error_ms": summary["offset_error_ms"]})
