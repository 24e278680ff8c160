"""``mme sweep``: the same load on variants of a model's ``config.pbtxt``, compared in one table.

Each variant (dynamic batching on or off, preferred batch sizes, queue delay, instance count,
max batch size) is written into a copy of the repository and packaged as its own TargetModel
``<variant>.tar.gz``, so one emulator serves them all; they are loaded and measured one after
the other (a warm-up request first, so the cold start does not count) and unloaded in between.

Config files are edited through Triton's own ``ModelConfig`` protobuf, not with regular
expressions: comments are lost, but every field the file had is kept exactly.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.model_config import (
    ModelRepositoryError,
    model_dirs,
    platform,
    protobuf,
)
from harness.model_store import package_repository


class SweepError(ModelRepositoryError):
    """A variant or repository the sweep cannot use."""


@dataclass(frozen=True)
class Variant:
    name: str
    dynamic_batching: bool | None = None  # None: as in the base config
    preferred_batch_sizes: tuple[int, ...] | None = None
    max_queue_delay_us: int | None = None
    instances: int | None = None
    max_batch_size: int | None = None

    def describe(self) -> str:
        parts = []
        if self.dynamic_batching is not None:
            parts.append(f"dynamic_batching={'on' if self.dynamic_batching else 'off'}")
        if self.preferred_batch_sizes is not None:
            parts.append("preferred=" + "/".join(str(s) for s in self.preferred_batch_sizes))
        if self.max_queue_delay_us is not None:
            parts.append(f"delay_us={self.max_queue_delay_us}")
        if self.instances is not None:
            parts.append(f"instances={self.instances}")
        if self.max_batch_size is not None:
            parts.append(f"max_batch_size={self.max_batch_size}")
        return ", ".join(parts) or "as in config.pbtxt"


BASE = Variant("base")

_ON = {"on", "true", "1", "yes"}
_OFF = {"off", "false", "0", "no"}


def parse_variant(text: str) -> Variant:
    """``NAME:key=value,...`` with keys ``dynamic_batching`` (on/off), ``preferred`` (4/8),
    ``delay_us``, ``instances``, ``max_batch_size``. Example: ``db8:preferred=8,delay_us=500``."""
    name, sep, spec = text.partition(":")
    name = name.strip()
    if not name or not sep and "=" in name:
        raise SweepError(f"variant {text!r}: expected NAME:key=value,...")
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise SweepError(f"variant {text!r}: {item!r} is not key=value")
        values[key.strip()] = value.strip()
    return variant_from_dict(name, values)


def variant_from_dict(name: str, values: dict[str, Any]) -> Variant:
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise SweepError(f"variant name {name!r}: letters, digits, '-', '_' and '.' only")
    known = {"dynamic_batching", "preferred", "delay_us", "instances", "max_batch_size"}
    unknown = set(values) - known
    if unknown:
        raise SweepError(f"variant {name}: unknown keys {sorted(unknown)} (known: {sorted(known)})")
    try:
        batching: bool | None = None
        if "dynamic_batching" in values:
            flag = str(values["dynamic_batching"]).lower()
            if flag not in _ON | _OFF:
                raise SweepError(f"variant {name}: dynamic_batching must be on or off")
            batching = flag in _ON
        preferred = None
        if "preferred" in values:
            raw = values["preferred"]
            items = raw if isinstance(raw, list) else str(raw).replace(" ", "/").split("/")
            preferred = tuple(int(x) for x in items if str(x))
        delay = int(values["delay_us"]) if "delay_us" in values else None
        instances = int(values["instances"]) if "instances" in values else None
        max_batch = int(values["max_batch_size"]) if "max_batch_size" in values else None
    except ValueError as exc:
        raise SweepError(f"variant {name}: {exc}") from exc
    if batching is False and (preferred or delay is not None):
        raise SweepError(f"variant {name}: preferred sizes and delay need dynamic batching on")
    if instances is not None and instances < 1:
        raise SweepError(f"variant {name}: instances must be at least 1")
    return Variant(name, batching, preferred, delay, instances, max_batch)


def load_variants_file(path: Path) -> list[Variant]:
    """JSON ``{"name": {"dynamic_batching": "on", "preferred": [4, 8], ...}, ...}``."""
    data = json.loads(Path(path).read_text())
    return [variant_from_dict(name, dict(values)) for name, values in data.items()]


def apply_variant(config_text: str, variant: Variant) -> str:
    """The config with the variant's settings applied (others untouched)."""
    text_format, pb = protobuf()
    config = text_format.Parse(config_text, pb.ModelConfig())
    if variant.max_batch_size is not None:
        config.max_batch_size = variant.max_batch_size
    wants_batching = variant.dynamic_batching or (
        variant.dynamic_batching is None
        and (variant.preferred_batch_sizes is not None or variant.max_queue_delay_us is not None)
    )
    if variant.dynamic_batching is False:
        config.ClearField("dynamic_batching")
    elif wants_batching:
        config.dynamic_batching.SetInParent()
    if variant.preferred_batch_sizes is not None:
        config.dynamic_batching.preferred_batch_size[:] = list(variant.preferred_batch_sizes)
    if variant.max_queue_delay_us is not None:
        config.dynamic_batching.max_queue_delay_microseconds = variant.max_queue_delay_us
    if config.HasField("dynamic_batching") and config.max_batch_size == 0:
        raise SweepError(f"variant {variant.name}: dynamic batching needs max_batch_size > 0")
    too_big = [s for s in config.dynamic_batching.preferred_batch_size if s > config.max_batch_size]
    if config.HasField("dynamic_batching") and too_big:
        raise SweepError(
            f"variant {variant.name}: preferred sizes {too_big} exceed "
            f"max_batch_size {config.max_batch_size}"
        )
    if variant.instances is not None:
        if not config.instance_group:
            config.instance_group.add()
        for group in config.instance_group:
            group.count = variant.instances
    return str(text_format.MessageToString(config))


def pick_model(repository: Path, model: str | None) -> Path:
    """The model folder a sweep varies: ``model``, or the only non-ensemble model."""
    dirs = model_dirs(repository)
    if not dirs:
        raise SweepError(f"{repository} is not a model repository (no <model>/config.pbtxt)")
    if model is not None:
        for d in dirs:
            if d.name == model:
                return d
        raise SweepError(f"no model {model!r} in {repository}; it has {[d.name for d in dirs]}")
    candidates = [d for d in dirs if platform((d / "config.pbtxt").read_text()) != "ensemble"]
    if len(candidates) != 1:
        raise SweepError(
            f"{repository} has models {[d.name for d in candidates]}: "
            "say which to vary with --model"
        )
    return candidates[0]


def build_variant_store(
    repository: Path, variants: Sequence[Variant], work_dir: Path, model: str | None = None
) -> dict[str, Path]:
    """Package one tarball per variant (``<name>.tar.gz``) into ``work_dir/store``."""
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise SweepError(f"variant names must be unique: {names}")
    target = pick_model(repository, model)
    store = work_dir / "store"
    tarballs: dict[str, Path] = {}
    for variant in variants:
        copy = work_dir / "repos" / variant.name
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(repository, copy, ignore=shutil.ignore_patterns("__pycache__"))
        config = copy / target.name / "config.pbtxt"
        config.write_text(apply_variant(config.read_text(), variant))
        tarballs[variant.name] = package_repository(copy, store / f"{variant.name}.tar.gz")
    return tarballs


@dataclass
class SweepRow:
    variant: Variant
    summary: dict[str, Any]

    @property
    def throughput(self) -> float:
        return float(self.summary["invocations_per_minute"])

    def latency(self, key: str) -> float | None:
        stats = self.summary["latency_ms"].get("client")
        return None if stats is None else float(stats[key])


def comparison_table(rows: Iterable[SweepRow]) -> str:
    rows = list(rows)
    base = rows[0].throughput if rows else 0.0
    lines = [
        "| configuration | settings | invocations/min | p50 ms | p90 ms | p99 ms | errors | "
        "ratio to base |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = f"{row.throughput / base:.2f}x" if base > 0 else "n/a"
        errors = sum(row.summary["errors_by_code"].values())
        cells = [row.variant.name, row.variant.describe(), f"{row.throughput:.0f}"]
        for key in ("p50", "p90", "p99"):
            value = row.latency(key)
            cells.append("n/a" if value is None else f"{value:.2f}")
        cells += [str(errors), ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


async def run_variants(
    url: str,
    endpoint: str,
    variants: Sequence[Variant],
    plan_for: Any,
    request: Any,
    *,
    on_result: Any = None,
) -> list[SweepRow]:
    """Warm, load and unload each variant in turn on a running emulator.

    ``plan_for(target_model)`` gives the load plan for one variant's TargetModel.
    """
    from harness.loadtest.report import summarize
    from harness.loadtest.session import invoke_once, run_http, unload

    rows = []
    for variant in variants:
        target = f"{variant.name}.tar.gz"
        warm = await invoke_once(url, endpoint, target, request)
        if not warm.ok:
            raise SweepError(
                f"variant {variant.name}: the warm-up request failed with "
                f"{warm.status} {warm.error_code}; see the emulator log"
            )
        result = await run_http(url, endpoint, plan_for(target), request, label=variant.name)
        row = SweepRow(variant, summarize(result))
        rows.append(row)
        if on_result is not None:
            on_result(row, result)
        await unload(url, endpoint, target)
    return rows
