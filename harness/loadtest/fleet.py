"""The load test per production variant and per instance: who served what, hits, loaded models.

Each sample carries the variant that served it (SageMaker's ``x-Amzn-Invoked-Production-Variant``,
also sent by real endpoints) and, from the emulator only, the instance (``X-Mme-Instance:
<variant>/<instance-id>``) and whether the model was already loaded (``X-Mme-Model-Cache-Hit``).
Loaded models per instance come from ``/_emulator/models`` samples taken during the run. Against
AWS the instance columns are absent and hit ratios are ``None``: only the variant is known.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from emulator.cloudwatch.statistics import percentile
from harness.loadtest.runner import FleetPoll, LoadResult, Sample


def _natural(key: str) -> list[Any]:
    """``A/i-2`` before ``A/i-10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def _variant_of(instance: str) -> str:
    return instance.split("/", 1)[0]


def _figures(samples: list[Sample]) -> dict[str, Any]:
    ok = [s for s in samples if s.ok]
    looked_up = [s for s in ok if s.cache_hit is not None]
    hits = sum(1 for s in looked_up if s.cache_hit)
    latencies = [s.latency_ms for s in ok]
    return {
        "requests": len(samples),
        "successes": len(ok),
        "errors": len(samples) - len(ok),
        "cache_hits": hits if looked_up else None,
        "cache_misses": len(looked_up) - hits if looked_up else None,
        "hit_ratio": round(hits / len(looked_up), 4) if looked_up else None,
        "p50_ms": round(percentile(latencies, 50), 3) if latencies else None,
        "p99_ms": round(percentile(latencies, 99), 3) if latencies else None,
    }


def loaded_series(polls: list[FleetPoll]) -> dict[str, list[list[float]]]:
    """``{instance: [[t, loaded models], ...]}``, from the instance's first sample to its last."""
    series: dict[str, list[list[float]]] = defaultdict(list)
    for poll in polls:
        for instance, figures in poll.instances.items():
            series[instance].append([round(poll.t, 3), int(figures.get("loaded_models", 0))])
    return dict(series)


def _variant_loaded(polls: list[FleetPoll], variant: str) -> list[int]:
    """The variant's loaded models (its instances added up) at each sample."""
    return [
        sum(int(f.get("loaded_models", 0)) for i, f in poll.instances.items()
            if f.get("variant", _variant_of(i)) == variant)
        for poll in polls
    ]


def requests_timeline(
    samples: Iterable[Sample], duration_s: float, bin_s: float = 1.0
) -> dict[str, Any]:
    """Completed requests per instance (or per variant when no instance is known) per bin."""
    bins = max(1, math.ceil(duration_s / bin_s))
    counts: dict[str, list[int]] = {}
    for sample in samples:
        key = sample.instance or sample.variant
        if key is None:
            continue
        row = counts.setdefault(key, [0] * bins)
        row[min(int(sample.end / bin_s), bins - 1)] += 1
    return {
        "bin_s": bin_s,
        "t": [round(i * bin_s, 3) for i in range(bins)],
        "requests": {k: counts[k] for k in sorted(counts, key=_natural)},
    }


def fleet_summary(result: LoadResult, bin_s: float = 1.0) -> dict[str, Any] | None:
    """Per-variant and per-instance tables and time series; None when nothing names a variant
    or an instance (an endpoint that sends neither header, and no fleet samples)."""
    samples = result.samples
    polls = result.fleet
    if not polls and not any(s.variant or s.instance for s in samples):
        return None
    by_instance: dict[str, list[Sample]] = defaultdict(list)
    by_variant: dict[str, list[Sample]] = defaultdict(list)
    for sample in samples:
        if sample.instance:
            by_instance[sample.instance].append(sample)
        variant = sample.variant or (_variant_of(sample.instance) if sample.instance else None)
        if variant:
            by_variant[variant].append(sample)
    loaded = loaded_series(polls)
    last = polls[-1].instances if polls else {}
    instance_names = sorted(set(by_instance) | set(loaded), key=_natural)
    instance_variant = {
        name: (last.get(name) or {}).get("variant") or _variant_of(name) for name in instance_names
    }
    total = len(samples)
    instances = []
    for name in instance_names:
        counts = [c for _, c in loaded.get(name, [])]
        instances.append({
            "instance": name,
            "variant": instance_variant[name],
            **_figures(by_instance.get(name, [])),
            "share": round(len(by_instance.get(name, [])) / total, 4) if total else None,
            # None when the instance was not sampled at the end (removed by a scale-in).
            "loaded_models_final": last[name]["loaded_models"] if name in last else None,
            "loaded_models_max": max(counts) if counts else None,
        })
    variant_names = sorted(set(by_variant) | set(instance_variant.values()), key=_natural)
    variants = []
    for name in variant_names:
        sums = _variant_loaded(polls, name) if polls else []
        variants.append({
            "variant": name,
            "instances": sum(1 for v in instance_variant.values() if v == name) or None,
            **_figures(by_variant.get(name, [])),
            "share": round(len(by_variant.get(name, [])) / total, 4) if total else None,
            "loaded_models_final": sums[-1] if sums else None,
            "loaded_models_max": max(sums) if sums else None,
        })
    nameless = [s for s in samples if not (s.variant or s.instance)]
    return {
        "variants": variants,
        "instances": instances,
        # Calls no variant answered for: an error answer carries no variant header.
        "unattributed": {
            "requests": len(nameless),
            "errors": sum(1 for s in nameless if not s.ok),
            "share": round(len(nameless) / total, 4) if total else None,
        } if nameless else None,
        # Requests the endpoint did not attribute (errors before routing, or no headers).
        "unattributed_variant": sum(1 for s in samples
                                    if not (s.variant or s.instance)),
        "unattributed_instance": sum(1 for s in samples if not s.instance),
        "timeline": requests_timeline(samples, result.duration_s, bin_s),
        "loaded_models": {name: loaded[name] for name in instance_names if name in loaded},
    }


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}" if value < 1 else f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def fleet_markdown(fleet: dict[str, Any] | None) -> list[str]:
    """Two tables, per variant and per instance (empty when the run saw no fleet)."""
    if not fleet:
        return []
    lines = [
        "",
        "| variant | instances | requests | share | errors | hit ratio | p50 ms | p99 ms | "
        "loaded models (final / max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in fleet["variants"]:
        lines.append(
            f"| {row['variant']} | {_cell(row['instances'])} | {row['requests']} | "
            f"{_cell(row['share'])} | {row['errors']} | {_cell(row['hit_ratio'])} | "
            f"{_cell(row['p50_ms'])} | {_cell(row['p99_ms'])} | "
            f"{_cell(row['loaded_models_final'])} / {_cell(row['loaded_models_max'])} |"
        )
    unattributed = fleet.get("unattributed")
    if unattributed:  # error answers name no variant (SageMaker's do not either)
        lines.append(
            f"| (no variant named: errors before routing, or error answers) | n/a | "
            f"{unattributed['requests']} | {_cell(unattributed['share'])} | "
            f"{unattributed['errors']} | n/a | n/a | n/a | n/a |"
        )
    if fleet["instances"]:
        lines += [
            "",
            "| instance | variant | requests | share | errors | hits / misses | hit ratio | "
            "p50 ms | p99 ms | loaded models (final / max) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in fleet["instances"]:
            lines.append(
                f"| {row['instance']} | {row['variant']} | {row['requests']} | "
                f"{_cell(row['share'])} | {row['errors']} | "
                f"{_cell(row['cache_hits'])} / {_cell(row['cache_misses'])} | "
                f"{_cell(row['hit_ratio'])} | {_cell(row['p50_ms'])} | {_cell(row['p99_ms'])} | "
                f"{_cell(row['loaded_models_final'])} / {_cell(row['loaded_models_max'])} |"
            )
    return lines


_VARIANT_MAPS = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys")
_STYLES = ("-", "--", "-.", ":")


def colours(fleet: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """(colour, line style) per series key: one colour family per variant, a shade and a line
    style per instance within it."""
    import matplotlib

    keys = sorted(set(fleet["timeline"]["requests"]) | set(fleet["loaded_models"]), key=_natural)
    variants = sorted({_variant_of(k) for k in keys}, key=_natural)
    out: dict[str, tuple[Any, str]] = {}
    for v_index, variant in enumerate(variants):
        cmap = matplotlib.colormaps[_VARIANT_MAPS[v_index % len(_VARIANT_MAPS)]]
        members = [k for k in keys if _variant_of(k) == variant]
        for i, key in enumerate(members):
            shade = 0.9 - 0.45 * (i / max(len(members) - 1, 1)) if len(members) > 1 else 0.75
            out[key] = (cmap(shade), _STYLES[i % len(_STYLES)])
    return out


def plot_fleet(fleet: dict[str, Any], ax_requests: Any, ax_models: Any) -> None:
    """Requests per second per instance, and loaded models per instance, over time."""
    style = colours(fleet)
    timeline = fleet["timeline"]
    for key, counts in timeline["requests"].items():
        colour, line = style[key]
        ax_requests.plot(  # at each bin's start, as the throughput panel above
            timeline["t"],
            [c / timeline["bin_s"] for c in counts],
            color=colour, linestyle=line, marker="o", markersize=2, label=key,
        )
    ax_requests.set_ylabel("requests / s\nper instance")
    if timeline["requests"]:
        ax_requests.legend(loc="best", fontsize="small", ncol=min(4, len(style)))
    for key, series in fleet["loaded_models"].items():
        colour, line = style[key]
        ax_models.step([p[0] for p in series], [p[1] for p in series], where="post",
                       color=colour, linestyle=line, label=key)
    ax_models.set_ylabel("loaded models\nper instance")
    ax_models.yaxis.get_major_locator().set_params(integer=True)
    if fleet["loaded_models"]:
        ax_models.legend(loc="best", fontsize="small", ncol=min(4, len(style)))
