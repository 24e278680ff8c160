"""``mme plan``: capacity planning for a multi-model endpoint.

Will my models fit on this instance, and how often will they miss? Inference Recommender does
not serve multi-model endpoints; this does, in two steps:

1. **Measure.** An emulator is started on the model store with no budget; each model is loaded
   once (an invocation with an empty body: the load happens whatever Triton then answers) and
   unloaded, recording its measured memory (docs/memory.md), load and unload time.
2. **Predict.** For each instance type (its memory less the platform's share, or
   ``--memory-budget``) and instance count, an LRU simulation on the measured sizes replays the
   traffic (Zipf over the models in name order, as ``mme loadtest --popularity zipf:S`` draws
   them, or a recorded trace): models resident, hit ratio, misses per minute at ``--rps``, and
   the latency the misses add (a miss under a full byte budget costs the longer of its load and
   its victims' unloads, which run side by side; the sum where the victims' memory could pass an
   instance type's: docs/memory.md, "Where a miss goes") at p50 and p99 over all
   requests. [U] Several instances: each model is served by one instance (SageMaker routes a
   TargetModel to an instance that has it loaded), models dealt to instances by popularity rank.

The cheapest configuration that meets ``--max-miss-ratio`` and/or ``--p99`` is named: by
``--price TYPE=USD_PER_HOUR`` when given for every type, else by the instances' total memory
(a proxy: on SageMaker's price list, more memory costs more within a family).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import random
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from emulator.cloudwatch.statistics import percentile
from emulator.instance_types import lookup
from emulator.settings import format_size, parse_size
from harness.model_costs import ModelCost, measure
from mme.arguments import model_folder, writable_file

MIB = 1024**2


@dataclass(frozen=True)
class Instance:
    name: str  # an instance type, or "--memory-budget 60MiB"
    budget_bytes: int
    memory_bytes: int  # the whole instance's memory (the proxy for its price)


@dataclass(frozen=True)
class Prediction:
    instance: str
    count: int
    budget_bytes: int
    models_resident: float  # on average per instance, at the end of the replay
    hit_ratio: float
    misses_per_minute: float
    added_p50_ms: float
    added_p99_ms: float
    price_per_hour: float | None
    meets_target: bool


# --- traffic --------------------------------------------------------------------------------

def zipf_requests(targets: Sequence[str], s: float, count: int, seed: int) -> list[str]:
    """``count`` TargetModels drawn as ``mme loadtest --popularity zipf:S --seed SEED`` draws
    them for one user (harness/loadtest/popularity.py: k-th model in the order given ~ 1/k**s)."""
    raw = [1.0 / (k**s) for k in range(1, len(targets) + 1)]
    total = sum(raw)
    cumulative = list(itertools.accumulate(w / total for w in raw))
    cumulative[-1] = 1.0
    draw = random.Random(seed)
    if len(targets) == 1:
        return [targets[0]] * count
    return [targets[bisect.bisect_right(cumulative, draw.random())] for _ in range(count)]


def trace_requests(source: str, count: int) -> tuple[list[str], list[float] | None]:
    """The TargetModels of a trace: a recording of ``mme serve --record`` or SageMaker
    data-capture files (a file, a folder or ``s3://``: harness/loadtest/trace.py), each call
    once and in order, as ``mme loadtest --trace`` replays them (``count`` is not used: the
    prediction is for that replay, cold caches first), with their times (seconds from the
    first); or a plain list, one TargetModel per line (or JSON lines with ``TargetModel``),
    repeated to ``count`` requests, without times."""
    from harness.loadtest.trace import TraceError, read_trace

    path = Path(source)
    if source.startswith("s3://") or path.is_dir() or _is_call_trace(path):
        try:
            calls = read_trace([source]).calls
        except TraceError as exc:
            raise SystemExit(f"mme plan: {exc}") from None
        return [call.key for call in calls], [call.offset_s for call in calls]
    names = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            names.append(json.loads(line)["TargetModel"] if line.startswith("{") else line)
        except (ValueError, KeyError, TypeError):
            raise SystemExit(f"mme plan: {path} line {number}: expected a TargetModel, or a "
                             "JSON object with \"TargetModel\"") from None
    if not names:
        raise ValueError(f"{path}: no TargetModel in the trace")
    return list(itertools.islice(itertools.cycle(names), count)), None


def _is_call_trace(path: Path) -> bool:
    """Whether the file's first line is a recording's or a data capture's (not a name list)."""
    with path.open(encoding="utf-8", errors="replace") as lines:
        first = next((line.strip() for line in lines if line.strip()), "")
    if not first.startswith("{"):
        return False
    try:
        line = json.loads(first)
    except ValueError:
        return True  # a broken first line: the trace reader names it
    return isinstance(line, dict) and "TargetModel" not in line


# --- the LRU replay -------------------------------------------------------------------------

def replay(requests: Sequence[str], costs: dict[str, ModelCost], budget: int,
           count: int, hard_limit: int | None = None,
           times: Sequence[float] | None = None) -> tuple[int, list[float], float]:
    """(hits, the latency each request had added in seconds, models resident per instance).

    A miss that evicts costs as the emulator's manager spends it: the load starts once Triton
    has accepted the victims' unloads and the model is measured once they are gone, so the
    longer of the two; where the victims' memory, still held, would pass ``hard_limit`` (an
    instance type's whole memory), the load waits for the unloads first.

    With ``times`` (each request's arrival, seconds: a recorded trace) a load takes that long:
    a request for a model still loading waits for it and is a miss, as the emulator counts it
    (one load per model, the calls that come meanwhile wait on it: ModelCacheHit 0).
    """
    calls = Counter(requests)
    by_popularity = sorted(calls, key=lambda t: (-calls[t], t))
    home = {t: i % count for i, t in enumerate(by_popularity)}
    caches: list[OrderedDict[str, int]] = [OrderedDict() for _ in range(count)]
    ready: dict[str, float] = {}  # with times: when each cached model's load completes
    hits, added = 0, []
    for index, target in enumerate(requests):
        cache, cost = caches[home[target]], costs[target]
        now = times[index] if times is not None else 0.0
        if target in cache:
            cache.move_to_end(target)
            waited = max(ready.get(target, 0.0) - now, 0.0) if times is not None else 0.0
            hits += waited == 0.0
            added.append(waited)
            continue
        unload_s, victims_bytes = 0.0, 0
        while cache and sum(cache.values()) + cost.memory_bytes > budget:
            victim, size = cache.popitem(last=False)
            unload_s = max(unload_s, costs[victim].unload_s)  # the unloads run side by side
            victims_bytes += size
        held = sum(cache.values()) + cost.memory_bytes + victims_bytes
        if hard_limit is None or held <= hard_limit:
            seconds = max(cost.load_s, unload_s)
        else:
            seconds = cost.load_s + unload_s
        if cost.memory_bytes <= budget:
            cache[target] = cost.memory_bytes
            ready[target] = now + seconds
        added.append(seconds)
    return hits, added, sum(len(c) for c in caches) / count


def predict(requests: Sequence[str], costs: dict[str, ModelCost], instances: list[Instance],
            counts: list[int], rps: float, max_miss_ratio: float | None, p99_ms: float | None,
            prices: dict[str, float], times: Sequence[float] | None = None
            ) -> list[Prediction]:
    rows = []
    for instance, count in itertools.product(instances, counts):
        typed = not instance.name.startswith("--memory-budget")  # kills past its memory
        hits, added, resident = replay(requests, costs, instance.budget_bytes, count,
                                       instance.memory_bytes if typed else None, times)
        hit_ratio = hits / len(requests)
        p99 = percentile(added, 99) * 1000
        meets = ((max_miss_ratio is None or 1 - hit_ratio <= max_miss_ratio)
                 and (p99_ms is None or p99 <= p99_ms))
        price = prices.get(instance.name)
        rows.append(Prediction(
            instance.name, count, instance.budget_bytes, round(resident, 2),
            round(hit_ratio, 4), round((1 - hit_ratio) * rps * 60, 2),
            round(percentile(added, 50) * 1000, 1), round(p99, 1),
            None if price is None else round(price * count, 4), meets))
    return rows


def cheapest(rows: list[Prediction], instances: list[Instance]) -> Prediction | None:
    meeting = [r for r in rows if r.meets_target]
    if not meeting:
        return None
    memory = {i.name: i.memory_bytes for i in instances}
    if all(r.price_per_hour is not None for r in meeting):
        return min(meeting, key=lambda r: (r.price_per_hour or 0.0, r.count))
    return min(meeting, key=lambda r: (memory[r.instance] * r.count, r.count))


# --- the command ----------------------------------------------------------------------------

def _instances(types: list[str], memory_budget: str | None) -> list[Instance]:
    found = []
    for name in types:
        known = lookup(name)
        if known is None:
            raise SystemExit(f"mme plan: --instance-type {name}: not an ml.* type whose memory "
                             "is known (examples: ml.m5.xlarge, ml.c5.2xlarge, ml.g5.xlarge); "
                             "give --memory-budget instead")
        found.append(Instance(name, known.model_memory_bytes, known.memory_bytes))
    if memory_budget:
        budget = parse_size(memory_budget)
        if budget is None:
            raise SystemExit("mme plan: --memory-budget needs a size (60MiB, 4GiB)")
        found.append(Instance(f"--memory-budget {memory_budget}", budget, budget))
    if not found:
        raise SystemExit("mme plan: give at least one --instance-type (or --memory-budget)")
    return found


def _prices(values: list[str]) -> dict[str, float]:
    prices = {}
    for value in values:
        name, sep, price = value.partition("=")
        try:
            prices[name] = float(price)
        except ValueError:
            sep = ""
        if not sep:
            raise SystemExit(f"mme plan: --price {value!r}: expected TYPE=USD_PER_HOUR")
    return prices


def table(rows: list[Prediction], best: Prediction | None) -> str:
    head = ("instance", "count", "budget", "resident", "hit ratio", "misses/min",
            "added p50 ms", "added p99 ms", "$/h", "meets")
    lines = [head] + [(
        r.instance, str(r.count), format_size(r.budget_bytes), f"{r.models_resident:g}",
        f"{r.hit_ratio:.1%}", f"{r.misses_per_minute:g}", f"{r.added_p50_ms:g}",
        f"{r.added_p99_ms:g}", "-" if r.price_per_hour is None else f"{r.price_per_hour:g}",
        ("yes *" if r is best else "yes") if r.meets_target else "no") for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)
    return text + ("\n* the cheapest configuration that meets the target" if best else "")


def plot(rows: list[Prediction], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.instance} x{r.count}" for r in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(max(8, len(rows) * 1.2), 4))
    left.bar(labels, [r.hit_ratio * 100 for r in rows])
    left.set_ylabel("predicted hit ratio (%)")
    right.bar(labels, [r.added_p99_ms for r in rows], color="tab:orange")
    right.set_ylabel("latency added by misses, p99 (ms)")
    for axis in (left, right):
        axis.tick_params(axis="x", rotation=45)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _check_arguments(args: argparse.Namespace) -> None:
    """What would fail after the measurements (or start an emulator on nothing), refused
    before anything starts."""
    if not str(args.model_data).startswith("s3://"):
        folder = Path(args.model_data)
        problem = model_folder(folder, "--model-data") if not args.target_model else (
            None if folder.is_dir() else f"--model-data {folder}: no such folder")
        if problem:
            raise SystemExit(f"mme plan: {problem}")
    if args.rps <= 0 or args.requests < 1:
        raise SystemExit("mme plan: --rps must be more than 0 and --requests at least 1")
    if args.max_miss_ratio is not None and not 0 <= args.max_miss_ratio <= 1:
        raise SystemExit("mme plan: --max-miss-ratio is a ratio between 0 and 1")
    if args.trace and not (args.trace.startswith("s3://") or Path(args.trace).exists()):
        raise SystemExit(f"mme plan: --trace {args.trace}: no such file or folder")
    for flag, value in (("--json", args.json), ("--plot", args.plot)):
        problem = writable_file(Path(value), flag) if value else None
        if problem:
            raise SystemExit(f"mme plan: {problem}")


def run(args: argparse.Namespace) -> int:
    _check_arguments(args)
    instances = _instances(args.instance_type or [], args.memory_budget)
    prices = _prices(args.price or [])
    counts = [int(c) for c in str(args.instances).split(",") if c.strip()]
    if not counts or min(counts) < 1:
        raise SystemExit("mme plan: --instances needs counts of 1 or more (1,2,4)")
    skipped: dict[str, str] = {}
    costs = measure(args.model_data, args.target_model, args.launcher, skipped)
    targets = list(costs)
    times: list[float] | None = None
    if args.trace:
        requests, times = trace_requests(args.trace, args.requests)
        unknown = sorted(set(requests) - set(costs))
        if unknown:
            raise SystemExit("mme plan: the trace names models not measured (not in the store, "
                             f"or one that did not load): {unknown[:5]}")
    else:
        kind, _, s = args.popularity.partition(":")
        if kind not in ("zipf", "uniform"):
            raise SystemExit("mme plan: --popularity is uniform or zipf[:S]")
        exponent = 0.0 if kind == "uniform" else float(s or 1.0)
        requests = zipf_requests(targets, exponent, args.requests, args.seed)
    rps = args.rps  # a timed trace's own rate, else --rps
    if times is not None and times[-1] > 0:
        rps = len(requests) / times[-1]
    rows = predict(requests, costs, instances, counts, rps, args.max_miss_ratio,
                   args.p99, prices, times)
    best = cheapest(rows, instances)
    print("measured (one load and unload each):")
    for cost in costs.values():
        print(f"  {cost.target}: memory {format_size(cost.memory_bytes)} (files "
              f"{format_size(cost.file_bytes)}), load {cost.load_s:.2f} s, unload "
              f"{cost.unload_s:.2f} s")
    for target, why in skipped.items():
        print(f"  {target}: skipped, it did not load ({why}); not in the plan")
    print(table(rows, best))
    if best is None and (args.max_miss_ratio is not None or args.p99 is not None):
        print("no configuration meets the target: try larger instance types or more instances")
    report = {"models": [asdict(c) for c in costs.values()],
              "skipped": [{"target": target, "reason": why} for target, why in skipped.items()],
              "traffic": {"requests": len(requests), "rps": round(rps, 3),
                          "popularity": None if args.trace else args.popularity,
                          "trace": args.trace, "seed": args.seed},
              "predictions": [asdict(r) for r in rows],
              "cheapest": asdict(best) if best else None}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.plot:
        plot(rows, Path(args.plot))
    return 0


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "plan", help="capacity planning: measure each model once, predict hit ratio, misses "
                     "and their latency per instance type and count (docs/memory.md)")
    p.add_argument("--model-data", required=True, help="the model store (a folder or s3://)")
    p.add_argument("--target-model", action="append",
                   help="a model to plan for (repeat; default: every .tar.gz in the folder)")
    p.add_argument("--instance-type", action="append", help="an ml.* type (repeat)")
    p.add_argument("--memory-budget", help="plan for an instance with this memory budget")
    p.add_argument("--instances", default="1", help="instance counts to try, e.g. 1,2,4")
    p.add_argument("--popularity", default="zipf:1.0",
                   help="uniform or zipf[:S] over the models in name order (zipf:1.0)")
    p.add_argument("--trace", help="the traffic: a recording of mme serve --record or SageMaker "
                                   "data-capture JSON Lines (a file, a folder or s3://; each "
                                   "call once, in order), or one TargetModel per line")
    p.add_argument("--rps", type=float, default=10.0, help="requests per second (10)")
    p.add_argument("--requests", type=int, default=20000, help="requests replayed (20000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the Zipf draw (0)")
    p.add_argument("--max-miss-ratio", type=float, help="target: misses per request at most")
    p.add_argument("--p99", type=float, help="target: latency added at p99 at most, in ms")
    p.add_argument("--price", action="append", help="TYPE=USD_PER_HOUR (repeat)")
    p.add_argument("--json", help="write the report as JSON here")
    p.add_argument("--plot", help="write a PNG plot here")
    p.add_argument("--launcher", default="embedded", choices=("embedded", "docker"),
                   help="how the measuring emulator runs Triton (embedded)")
    p.set_defaults(func=run)
