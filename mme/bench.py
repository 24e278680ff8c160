"""``mme bench overhead`` (in ``mme.bench_overhead``): the emulator vs direct Triton, by wrk.
``mme bench fleet``: one Zipf workload on a 3-instance endpoint vs a 1-instance endpoint with
the same total memory (hit ratio, loads, p50/p99), measured in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from emulator.cloudwatch.statistics import percentile
from mme import bench_baseline, bench_overhead
from mme.bench_scale import serve


@dataclass
class FleetRun:
    name: str
    latencies_ms: list[float]
    hits: int
    errors: int
    seconds: float
    per_instance: dict[str, int]

    def percentile(self, q: float) -> float:
        return percentile(self.latencies_ms, q)


async def _drive_sequence(name: str, url: str, sequence: list[str], concurrency: int) -> FleetRun:
    """Send ``sequence`` in order from ``concurrency`` workers; read the cache-hit header."""
    body = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                   "data": [1, 2, 3, 4]}]}).encode()
    latencies: list[float] = []
    hits = errors = 0
    per_instance: dict[str, int] = {}
    queue = iter(sequence)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async def worker() -> None:
            nonlocal hits, errors
            for target in queue:
                started = time.perf_counter()
                headers = {"X-Amzn-SageMaker-Target-Model": target,
                           "Content-Type": "application/octet-stream"}
                async with session.post(f"{url}/endpoints/local/invocations", data=body,
                                        headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
                        continue
                    hits += resp.headers.get("X-Mme-Model-Cache-Hit") == "1"
                    instance = resp.headers.get("X-Mme-Instance", "?")
                    per_instance[instance] = per_instance.get(instance, 0) + 1
                latencies.append((time.perf_counter() - started) * 1e3)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return FleetRun(name, latencies, hits, errors, time.perf_counter() - started, per_instance)


def run_fleet(args: argparse.Namespace) -> int:
    import random

    from ensembles.packaging import package
    from harness.testmodels import write_scale_model

    rng = random.Random(args.seed)
    targets = [f"m{k}.tar.gz" for k in range(args.models)]
    zipf = [1 / (k + 1) ** args.zipf for k in range(args.models)]
    sequence = rng.choices(targets, weights=zipf, k=args.requests)
    total_slots = args.instances * args.slots
    configs = [
        (f"{args.instances} instances x {args.slots} models", args.instances, args.slots),
        (f"1 instance x {total_slots} models", 1, total_slots),
    ]
    print(f"Zipf({args.zipf}) over {args.models} small Python models, {args.requests} requests, "
          f"concurrency {args.concurrency}, seed {args.seed}; same total memory "
          f"({total_slots} loaded models) in both. Driven by a Python client in its own process "
          "(the figure of interest is the cache behaviour; model loads dominate latency).")
    runs = []
    with tempfile.TemporaryDirectory(prefix="mme-bench-fleet-") as tmp:
        work = Path(tmp)
        for k, target in enumerate(targets):
            package(write_scale_model(work / "repos" / f"m{k}", f"model{k}", scale=k + 1),
                    work / "store" / target, "folder")
        for name, instances, slots in configs:
            server = serve(work, str(instances), ["--instances", str(instances),
                                                  "--max-loaded-models", str(slots)])
            try:
                runs.append(asyncio.run(_drive_sequence(name, server.url, sequence,
                                                        args.concurrency)))
            finally:
                server.stop()
    print(f"{'endpoint':<28}{'hit ratio':>10}{'loads':>7}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'calls/s':>9}{'errors':>8}")
    for r in runs:
        served = len(r.latencies_ms)
        print(f"{r.name:<28}{r.hits / max(served, 1):>10.3f}{served - r.hits:>7}"
              f"{r.percentile(50):>9.2f}{r.percentile(99):>9.2f}{served / r.seconds:>9.1f}"
              f"{r.errors:>8}")
    fleet, single = runs
    rate = [len(r.latencies_ms) / r.seconds for r in runs]
    print(f"fleet / single: hit ratio x{(fleet.hits or 1) / (single.hits or 1):.2f}, "
          f"p50 x{fleet.percentile(50) / single.percentile(50):.2f}, "
          f"p99 x{fleet.percentile(99) / single.percentile(99):.2f}, "
          f"throughput x{rate[0] / rate[1]:.2f}")
    print("requests per instance (fleet): " + ", ".join(
        f"{k}={v}" for k, v in sorted(fleet.per_instance.items())))
    return 0 if all(r.errors == 0 for r in runs) else 1


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``mme bench overhead`` and ``mme bench fleet``."""
    bench_overhead.add_parser(commands, compare_with=bench_baseline.compare_with,
                              compare_record=bench_baseline.compare_record)
    f = commands.add_parser("fleet", help="a 3-instance endpoint vs 1 instance with the same "
                                          "total memory, on one Zipf workload")
    f.add_argument("--instances", type=int, default=3)
    f.add_argument("--slots", type=int, default=2, help="loaded models per instance (fleet)")
    f.add_argument("--models", type=int, default=12)
    f.add_argument("--requests", type=int, default=300)
    f.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent s")
    f.add_argument("--concurrency", type=int, default=4)
    f.add_argument("--seed", type=int, default=1)
    f.set_defaults(func=run_fleet)
