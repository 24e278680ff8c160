"""The load test's report: a summary dict (JSON), a Markdown table and a PNG plot.

Latency names follow CloudWatch: ModelLatency is the time the model (Triton) took, OverheadLatency
the rest of the endpoint's time. Per-request ModelLatency comes from the emulator's response
header when it sends one; ``client`` latency is what the generator measured end to end, and
``client_minus_ModelLatency`` their difference per call (the endpoint's overhead plus the network
and the client: not CloudWatch's OverheadLatency, which is only the endpoint's share). The
endpoint's own ModelLatency and OverheadLatency averages come from its counters
(``/_emulator/metrics`` deltas over the run).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from emulator.cloudwatch.statistics import percentile
from harness.loadtest.fleet import fleet_markdown, fleet_summary, plot_fleet
from harness.loadtest.runner import LoadResult, MetricsPoll, Sample

PERCENTILES = (50, 90, 95, 99)


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    out = {f"p{q}": round(percentile(values, q), 3) for q in PERCENTILES}
    out["mean"] = round(sum(values) / len(values), 3)
    out["max"] = round(max(values), 3)
    return out


def _delta(polls: list[MetricsPoll], metric: str, stat: str) -> float | None:
    if len(polls) < 2:
        return None
    first = polls[0].metrics.get(metric, {})
    last = polls[-1].metrics.get(metric, {})
    if stat not in last:
        return None
    return float(last.get(stat, 0) or 0) - float(first.get(stat, 0) or 0)


def _average_delta_ms(polls: list[MetricsPoll], metric: str) -> float | None:
    count = _delta(polls, metric, "SampleCount")
    total = _delta(polls, metric, "Sum")
    if not count or total is None:
        return None
    return round(total / count / 1000.0, 3)  # the metrics are in microseconds


def loaded_models(polls: list[MetricsPoll]) -> list[tuple[float, int]]:
    series = []
    for poll in polls:
        current = poll.metrics.get("LoadedModelCount", {}).get("Current")
        if current is not None:
            series.append((round(poll.t, 3), int(current)))
    return series


def _phase_rows(result: LoadResult) -> list[dict[str, Any]]:
    rows = []
    starts = [0.0]
    for phase in result.plan.phases:
        starts.append(starts[-1] + phase.duration_s)
    for index, phase in enumerate(result.plan.phases):
        samples = [s for s in result.samples if s.phase == index]
        if not samples:
            continue
        ok = [s for s in samples if s.ok]
        span = min(starts[index + 1], result.duration_s) - starts[index]
        stats = _stats([s.latency_ms for s in ok]) or {}
        end = starts[index] + span
        seen = [u for t, u in result.users if starts[index] <= t < end and u > 0]
        rows.append(
            {
                "phase": index + 1,
                "users": f"{phase.initial_users}->{max(seen, default=phase.initial_users)}",
                "seconds": round(span, 2),
                "invocations": len(samples),
                "errors": len(samples) - len(ok),
                "invocations_per_minute": round(len(ok) * 60.0 / span, 1) if span > 0 else 0.0,
                **{f"client_{k}_ms": v for k, v in stats.items() if k.startswith("p")},
            }
        )
    return rows


def _model_rows(result: LoadResult) -> list[dict[str, Any]]:
    """Per TargetModel: calls, errors, cold starts (calls that loaded it), client latency."""
    by_model: dict[str | None, list[Sample]] = {}
    for sample in result.samples:
        by_model.setdefault(sample.target_model, []).append(sample)
    order = {m: i for i, m in enumerate(result.plan.target_models)}
    rows = []
    for model in sorted(by_model, key=lambda m: order.get(m, len(order))):
        samples = by_model[model]
        ok = [s.latency_ms for s in samples if s.ok]
        known = any(s.cache_hit is not None for s in samples)
        rows.append({
            "target_model": model,
            "invocations": len(samples),
            "errors": sum(1 for s in samples if not s.ok),
            "cold_starts": sum(1 for s in samples if s.cache_hit is False) if known else None,
            "p50_ms": round(percentile(ok, 50), 3) if ok else None,
            "p99_ms": round(percentile(ok, 99), 3) if ok else None,
        })
    return rows


def timeline(result: LoadResult, bin_s: float = 1.0) -> list[dict[str, Any]]:
    """Per-``bin_s`` throughput and latency, with the users and loaded models of that moment."""
    bins = max(1, math.ceil(result.duration_s / bin_s))
    buckets: list[list[Sample]] = [[] for _ in range(bins)]
    for sample in result.samples:
        buckets[min(int(sample.end / bin_s), bins - 1)].append(sample)
    loaded = loaded_models(result.polls)
    rows = []
    for i, bucket in enumerate(buckets):
        t = (i + 1) * bin_s
        ok = [s.latency_ms for s in bucket if s.ok]
        users = [u for ut, u in result.users if ut <= i * bin_s + bin_s / 2]
        models = [m for mt, m in loaded if mt <= t]
        rows.append(
            {
                "t": round(i * bin_s, 3),
                "invocations_per_minute": round(len(ok) * 60.0 / bin_s, 1),
                "errors": len(bucket) - len(ok),
                "p50_ms": round(percentile(ok, 50), 3) if ok else None,
                "p99_ms": round(percentile(ok, 99), 3) if ok else None,
                "users": users[-1] if users else 0,
                "loaded_models": models[-1] if models else None,
            }
        )
    return rows


def summarize(result: LoadResult) -> dict[str, Any]:
    samples = result.samples
    ok = [s for s in samples if s.ok]
    errors = Counter(s.error_code or str(s.status) for s in samples if not s.ok)
    client = [s.latency_ms for s in ok]
    model = [s.model_latency_us / 1000.0 for s in ok if s.model_latency_us is not None]
    beside_model = [
        s.latency_ms - s.model_latency_us / 1000.0 for s in ok if s.model_latency_us is not None
    ]
    per_request = len(model) == len(ok) and bool(ok)
    polls = result.polls
    hits = _delta(polls, "ModelCacheHit", "Sum")
    lookups = _delta(polls, "ModelCacheHit", "SampleCount")
    header_cold = sum(1 for s in samples if s.cache_hit is False)
    has_header_cache = any(s.cache_hit is not None for s in samples)
    cold_starts: int | None
    if lookups is not None and hits is not None:
        cold_starts = int(round(lookups - hits))
    elif has_header_cache:
        cold_starts = header_cold
    else:
        cold_starts = None
    hit_ratio = round(hits / lookups, 4) if lookups and hits is not None else None
    loaded = loaded_models(polls)
    duration = result.duration_s
    return {
        "label": result.label,
        "generator": result.generator,
        "plan": result.plan.as_dict(),
        "started_at": result.started_at,
        "duration_s": round(duration, 3),
        "stop_reason": result.stop_reason,
        "invocations": len(samples),
        "successes": len(ok),
        "invocations_per_minute": round(len(ok) * 60.0 / duration, 1) if duration > 0 else 0.0,
        "errors_by_code": dict(sorted(errors.items())),
        # error code -> the last message the endpoint (or the connection) gave with it
        "error_messages": dict(sorted(result.error_messages.items())),
        "peak_users": max((u for _, u in result.users), default=0),
        "latency_ms": {
            "client": _stats(client),
            "ModelLatency": _stats(model) if per_request else None,
            "client_minus_ModelLatency": _stats(beside_model) if per_request else None,
        },
        # Averages from the endpoint's own counters: present even without per-request headers.
        "endpoint_average_ms": {
            "ModelLatency": _average_delta_ms(polls, "ModelLatency"),
            "OverheadLatency": _average_delta_ms(polls, "OverheadLatency"),
        },
        "cold_starts": cold_starts,
        "cache_hit_ratio": hit_ratio,
        "model_loads": _int_or_none(_delta(polls, "ModelLoadingTime", "SampleCount")),
        "model_unloads": _int_or_none(_delta(polls, "ModelUnloadingTime", "SampleCount")),
        "loaded_models": {
            "max": max((c for _, c in loaded), default=None),
            "final": loaded[-1][1] if loaded else None,
            "series": loaded,
        },
        "phases": _phase_rows(result),
        # Per TargetModel, in the plan's order (cold starts from the emulator's header)
        "models": _model_rows(result),
        # Per variant and per instance (None when the endpoint names neither): fleet.py
        "fleet": fleet_summary(result),
        # Per variant: [t, current, desired] instance counts (empty without a ScalingWatch).
        "instances": {
            variant: [[round(t, 3), *counts[variant]] for t, counts in result.instances
                      if variant in counts]
            for variant in sorted({v for _, counts in result.instances for v in counts})
        },
        "events": [
            {"t": round(e.t, 3), "kind": e.kind, "detail": e.detail}
            for e in result.events
            if e.kind != "cold-start"
        ],
        "timeline": timeline(result),
    }


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1000 else f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


# What each per-call latency row is (the endpoint's own averages are in the table above).
LATENCY_LABELS = {
    "client": "client, end to end",
    "ModelLatency": "ModelLatency",
    "client_minus_ModelLatency": "client - ModelLatency (endpoint overhead + network + client)",
}


def to_markdown(summary: dict[str, Any]) -> str:
    lines = [f"# Load test{': ' + summary['label'] if summary.get('label') else ''}", ""]
    lines += ["| metric | value |", "|---|---|"]
    rows = [
        ("duration (s)", summary["duration_s"]),
        ("stop reason", summary["stop_reason"]),
        ("invocations", summary["invocations"]),
        ("invocations per minute", summary["invocations_per_minute"]),
        ("peak users", summary["peak_users"]),
        ("errors", ", ".join(f"{k}: {v}" for k, v in summary["errors_by_code"].items()) or "none"),
        ("cold starts", summary["cold_starts"]),
        ("cache hit ratio", summary["cache_hit_ratio"]),
        (
            "model loads / unloads",
            f"{_fmt(summary['model_loads'])} / {_fmt(summary['model_unloads'])}",
        ),
        (
            "loaded models (max / final)",
            f"{_fmt(summary['loaded_models']['max'])} / {_fmt(summary['loaded_models']['final'])}",
        ),
        ("endpoint ModelLatency avg (ms)", summary["endpoint_average_ms"]["ModelLatency"]),
        ("endpoint OverheadLatency avg (ms)", summary["endpoint_average_ms"]["OverheadLatency"]),
        ("generator", summary["generator"]),
    ]
    for variant, series in summary.get("instances", {}).items():
        counts = [row[1] for row in series]
        rows.append((f"instances of {variant} (min / max / final)",
                     f"{min(counts)} / {max(counts)} / {counts[-1]}" if counts else "n/a"))
    if summary.get("instances"):
        rows.append(("scaling activities",
                     sum(1 for e in summary["events"] if e["kind"] == "scaling")))
    lines += [f"| {k} | {_fmt(v)} |" for k, v in rows]
    messages = summary.get("error_messages") or {}
    if summary["errors_by_code"]:
        lines += ["", "| error | calls | last message |", "|---|---|---|"]
        for code, count in summary["errors_by_code"].items():
            message = str(messages.get(code, "n/a")).replace("|", "\\|")
            lines.append(f"| {code} | {count} | {message} |")
    lines += [
        "",
        "| latency per call (ms) | p50 | p90 | p95 | p99 | mean | max |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, stats in summary["latency_ms"].items():
        label = LATENCY_LABELS.get(name, name)
        if stats is None:
            lines.append(f"| {label} | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        cells = " | ".join(_fmt(stats[k]) for k in ("p50", "p90", "p95", "p99", "mean", "max"))
        lines.append(f"| {label} | {cells} |")
    if summary["phases"]:
        lines += [
            "",
            "| phase | users | seconds | invocations | errors | invocations/min | "
            "p50 ms | p90 ms | p99 ms |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in summary["phases"]:
            lines.append(
                f"| {row['phase']} | {row['users']} | {_fmt(row['seconds'])} | "
                f"{row['invocations']} | {row['errors']} | "
                f"{_fmt(row['invocations_per_minute'])} | {_fmt(row.get('client_p50_ms'))} | "
                f"{_fmt(row.get('client_p90_ms'))} | {_fmt(row.get('client_p99_ms'))} |"
            )
    models = summary.get("models") or []
    if len(models) > 1 or (models and models[0]["target_model"] is not None):
        lines += ["", "| TargetModel | invocations | errors | cold starts | p50 ms | p99 ms |",
                  "|---|---|---|---|---|---|"]
        for row in models:
            lines.append(
                f"| {row['target_model']} | {row['invocations']} | {row['errors']} | "
                f"{_fmt(row['cold_starts'])} | {_fmt(row['p50_ms'])} | {_fmt(row['p99_ms'])} |")
    lines += fleet_markdown(summary.get("fleet"))
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: Path) -> Path:
    """Throughput, latency and loaded models over time, with phase and load events marked."""
    import matplotlib

    matplotlib.use("Agg")  # no display in CI
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rows = summary["timeline"]
    t = [r["t"] for r in rows]
    instances = summary.get("instances") or {}
    fleet = summary.get("fleet")  # two panels: requests and loaded models per instance
    panels = 3 + bool(instances) + 2 * bool(fleet)
    fig, axes = plt.subplots(panels, 1, figsize=(10, 8 + 2 * (panels - 3)), sharex=True)
    ax_tp, ax_lat, ax_models = axes[:3]
    if instances:  # instance counts: solid current, dashed desired, one colour per variant
        ax_inst = axes[3]
        for variant, series in instances.items():
            times = [row[0] for row in series]
            (line,) = ax_inst.step(times, [row[1] for row in series], where="post",
                                   label=f"{variant} current")
            ax_inst.step(times, [row[2] for row in series], where="post", linestyle="--",
                         color=line.get_color(), alpha=0.6, label=f"{variant} desired")
        ax_inst.set_ylabel("instances")
        ax_inst.yaxis.get_major_locator().set_params(integer=True)
        ax_inst.legend(loc="upper left", fontsize="small")
    if fleet:
        plot_fleet(fleet, axes[3 + bool(instances)], axes[4 + bool(instances)])
    ax_tp.plot(
        t, [r["invocations_per_minute"] for r in rows], marker="o", markersize=3, label="inv/min"
    )
    ax_tp.set_ylabel("invocations / min")
    users_ax = ax_tp.twinx()
    users_ax.step(
        t, [r["users"] for r in rows], where="post", color="grey", alpha=0.6, label="users"
    )
    users_ax.set_ylabel("users")
    # Markers: a bin with a single completed request is still visible between empty bins.
    ax_lat.plot(t, [r["p50_ms"] for r in rows], marker="o", markersize=3, label="p50")
    ax_lat.plot(t, [r["p99_ms"] for r in rows], marker="o", markersize=3, label="p99")
    ax_lat.set_ylabel("client latency (ms)")
    ax_lat.legend(loc="upper left")
    series = summary["loaded_models"]["series"]
    if series:
        ax_models.step([s[0] for s in series], [s[1] for s in series], where="post")
    ax_models.set_ylabel("loaded models")
    axes[-1].set_xlabel("seconds")
    colours = {"phase": "black", "load": "tab:green", "unload": "tab:red", "stop": "tab:purple",
               "scaling": "tab:orange"}
    for event in summary["events"]:
        colour = colours.get(event["kind"], "grey")
        for ax in axes:
            ax.axvline(
                event["t"],
                color=colour,
                alpha=0.35 if event["kind"] != "phase" else 0.8,
                linestyle="--" if event["kind"] == "phase" else ":",
            )
    handles = [Line2D([], [], color=c, linestyle=":", label=k) for k, c in colours.items()]
    ax_models.legend(handles=handles, loc="upper left", fontsize="small")
    fig.suptitle(
        f"{summary.get('label') or 'load test'}: "
        f"{summary['invocations_per_minute']:.0f} invocations/min, "
        f"stop: {summary['stop_reason']}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_report(result: LoadResult, out_dir: Path, *, png: bool = True) -> dict[str, Path]:
    """``report.json``, ``report.md`` and (unless ``png`` is False) ``report.png`` in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(result)
    paths = {"json": out_dir / "report.json", "markdown": out_dir / "report.md"}
    paths["json"].write_text(json.dumps(summary, indent=2, default=str) + "\n")
    paths["markdown"].write_text(to_markdown(summary))
    if png:
        paths["png"] = plot(summary, out_dir / "report.png")
    return paths
