"""The Markdown job summary of ``mme ci down``: what a reviewer reads on the pull request.

Per model (from ``stats.py``, whatever client made the calls): calls, ModelLatency p50/p99,
time in the server p50/p99, cold loads and their time, errors by code; the endpoint's own
SageMaker figures; then what pytest reported against the server (golden results, budget
verdicts against the base branch: ``harness.ci_results``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.ci_results import results_markdown


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3g} ms" if value < 1000 else f"{value / 1000:.3g} s"


def _cold(seconds: Sequence[float]) -> str:
    if not seconds:
        return "–"
    if len(seconds) == 1:
        return f"{seconds[0]:.2f} s"
    return f"{min(seconds):.2f}–{max(seconds):.2f} s (total {sum(seconds):.2f} s)"


def _errors(errors: Mapping[str, int]) -> str:
    return ", ".join(f"{code} ×{count}" for code, count in errors.items()) or "0"


def models_table(models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    if not models:
        return ["No invocation reached the emulator."]
    lines = ["| model | calls | errors | ModelLatency p50 | ModelLatency p99 | in server p50 "
             "| in server p99 (warm) | cold loads | cold load time |",
             "|---|--:|---|--:|--:|--:|--:|--:|---|"]
    for name, m in models.items():
        lines.append(
            f"| `{name}` | {m.get('calls', 0)} | {_errors(m.get('errors', {}))} "
            f"| {_ms(m.get('model_latency_p50_ms'))} | {_ms(m.get('model_latency_p99_ms'))} "
            f"| {_ms(m.get('server_p50_ms'))} | {_ms(m.get('server_p99_ms'))} "
            f"| {m.get('cold_loads', 0)} | {_cold(m.get('cold_load_s', []))} |")
    totals: dict[str, int] = {}
    for m in models.values():
        for code, count in m.get("errors", {}).items():
            totals[code] = totals.get(code, 0) + count
    lines.append("")
    lines.append("**Errors by code:** " + (", ".join(f"{code} {count}" for code, count in
                                                   sorted(totals.items()))
                                          if totals else "none."))
    return lines


def endpoint_lines(metrics: Any) -> list[str]:
    """One line per endpoint from ``/_emulator/metrics`` (SageMaker's own figures)."""
    lines = []
    endpoints = metrics.get("Endpoints", {}) if isinstance(metrics, dict) else {}
    for name, snapshot in endpoints.items():
        m = snapshot.get("Metrics", {}) if isinstance(snapshot, dict) else {}

        def stat(metric: str, key: str, m: dict[str, Any] = m) -> float:
            value = m.get(metric, {}).get(key, 0)
            return float(value) if isinstance(value, int | float) else 0.0

        hits = stat("ModelCacheHit", "SampleCount")
        ratio = f"{stat('ModelCacheHit', 'Sum') / hits:.0%}" if hits else "–"
        loads = int(stat("ModelLoadingTime", "SampleCount"))
        load_avg = stat("ModelLoadingTime", "Average") / 1e6 if loads else 0.0
        lines.append(
            f"- endpoint `{name}`: {int(stat('Invocations', 'Sum'))} invocations, "
            f"{int(stat('Invocation4XXErrors', 'Sum'))} 4xx, "
            f"{int(stat('Invocation5XXErrors', 'Sum'))} 5xx, cache hit ratio {ratio}, "
            f"{loads} model loads" + (f" (ModelLoadingTime avg {load_avg:.2f} s)" if loads
                                      else ""))
    return lines


def job_summary(*, url: str, stop: str, report: str | None, models: Mapping[str, Any] | None,
                metrics: Any, results: Sequence[Mapping[str, Any]],
                problems: Sequence[str] = ()) -> str:
    lines = [f"## SageMaker MME emulator at {url}", "", stop]
    if report:
        lines.append(f"Report: `{report}` (server log, models and metrics JSON, Prometheus "
                     "text, page snapshot `page.html`).")
    lines += ["", "### Models"]
    lines += models_table(models or {}) if models is not None else [
        "No per-model figures: the server did not write them (it was killed or crashed)."]
    endpoint = endpoint_lines(metrics)
    if endpoint:
        lines += ["", *endpoint]
    lines += results_markdown(results)
    if problems:
        lines += ["", "### Not in the report", *(f"- {p}" for p in problems)]
    return "\n".join(lines) + "\n"
