"""``mme bench scale``: a thousand TargetModels, and the cost of a miss under a full budget.

Part 1, scale: ``--models`` small Python models (identical sizes) behind ``--max-loaded-models``
and a disk budget for ``--disk-models`` of them. Every model is invoked once in a shuffled order
(the emulator then has met them all, and the disk and memory budgets have cycled them), then
``--requests`` calls follow Zipf(``--zipf``) popularity. The hit ratio of that Zipf phase (the
emulator's ``X-Mme-Model-Cache-Hit`` header) is compared with an LRU simulation of the same
request sequence, run here. The emulator's resident memory and the time of
``GET /_emulator/models`` are printed at 100, 500, ... models met, and at the end.

The comparison, made fair: the header is SageMaker's ``ModelCacheHit``, 1 only if the model was
loaded when the request arrived. With several clients, a request may arrive while the load that
an earlier request for the same model started is still under way: a miss for SageMaker, but a
hit in the sequential replay, where the earlier request has brought the model in already. Those
"misses that joined a load under way" (the client sent the request while one for the same model
was unanswered) are added to the measured hits before the comparison, so both sides count one
miss per load. An error counts as a miss (the benchmark wants none). What remains is the
clients' own reordering (eight requests in flight do not reach the LRU in sequence order) and
the models an eviction must spare (serving, or waited for): noise of about a point either way.

Part 2, the cost of a miss: ``--miss-models`` models, room for ``--miss-room``, ``--miss-clients``
clients calling random models for ``--miss-seconds``: once with the load waiting for the victim's
unload to complete (the emulator's behaviour before), once with the load starting as soon as
Triton has accepted the unload (now, under a count budget). Same run, same machine.

Driven by an aiohttp client in this process and the server (``mme serve``) in its own: the
figures of interest are the cache's behaviour and loads of a second or more, which need the
per-request hit header and an exact request sequence (wrk's strengths, raw request rate and
microsecond latencies, are ``mme bench overhead``'s business).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import random
import statistics
import tempfile
import time
import urllib.request
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from harness.live_endpoint import EmulatorProcess

BODY = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                               "data": [1, 2, 3, 4]}]}).encode()
# The server process, with the load waiting for every unload to complete (the old sequencing).
# The server as before: the load waits for the victim's unload to complete.
SEQUENTIAL_EVICTIONS = {"MME_OVERLAP_COUNT_EVICTIONS": "false"}


def target_name(k: int) -> str:
    return f"m{k:04d}.tar.gz"


def scale_of(k: int) -> float:
    # Fixed width ("1000.0" ... "1999.0"): every model has the same size on disk.
    return 1000.0 + k % 1000


def lru_hits(sequence: Iterable[str], capacity: int) -> list[bool]:
    """Hit (True) or miss for each request of ``sequence`` under a plain LRU of ``capacity``."""
    cache: OrderedDict[str, None] = OrderedDict()
    hits = []
    for target in sequence:
        hit = target in cache
        hits.append(hit)
        if hit:
            cache.move_to_end(target)
        else:
            cache[target] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def zipf_sequence(models: int, requests: int, s: float, rng: random.Random) -> list[str]:
    """``requests`` targets, the k-th most popular drawn with weight 1/k^s (ranks shuffled)."""
    ranked = [target_name(k) for k in range(models)]
    rng.shuffle(ranked)
    weights = [1 / (k + 1) ** s for k in range(models)]
    return rng.choices(ranked, weights=weights, k=requests)


def build_store(store: Path, work: Path, models: int) -> int:
    """``models`` tarballs in ``store``; returns the extracted size of one."""
    from emulator.manager.extract import tree_size
    from ensembles.packaging import package
    from harness.testmodels import write_scale_model

    size = 0
    for k in range(models):
        folder = write_scale_model(work / "repos", f"model{k:04d}", scale=scale_of(k))
        package(folder, store / target_name(k), "folder")
        size = max(size, tree_size(folder))
    return size


@dataclass
class Server:
    process: EmulatorProcess

    @property
    def url(self) -> str:
        return self.process.url

    def stop(self) -> None:
        self.process.stop()

    def rss_mib(self) -> float | None:
        """The emulator process's resident memory (Linux /proc; None elsewhere)."""
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def models_call_ms(self, repeat: int = 5) -> tuple[float, int]:
        """Median time of ``GET /_emulator/models`` and the number of models it lists."""
        times, listed = [], 0
        for _ in range(repeat):
            started = time.perf_counter()
            with urllib.request.urlopen(f"{self.url}/_emulator/models", timeout=30) as resp:
                payload = json.loads(resp.read())
            times.append((time.perf_counter() - started) * 1e3)
            listed = sum(len(i.get("Models", ())) for i in _instances(payload))
        return statistics.median(times), listed


def _instances(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Every instance-level block of ``/_emulator/models`` (the layout nests by variant)."""
    found: list[dict[str, Any]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "Models" in node and isinstance(node["Models"], list):
                found.append(node)
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(payload)
    return found


def serve(work: Path, name: str, flags: Sequence[str],
          settings: Mapping[str, str] | None = None) -> Server:
    """``mme serve`` in its own process on ``work/store``; ``flags`` may override any flag,
    ``settings`` (``MME_*`` variables) set those that have none.

    Raises ``EmulatorStartError`` (with its log's tail) if it does not start.
    """
    log = work / f"serve-{name}.log"
    # The folders as flags: a test finds the benchmark's work folder in the command line.
    return Server(EmulatorProcess(
        dict(settings or {}), log,
        flags=["--model-data", str(work / "store"), "--cache-dir", str(work / f"cache-{name}"),
               "--log-level", "WARNING", *flags]).start())


@dataclass
class Outcome:
    target: str
    ok: bool
    hit: bool
    ms: float
    detail: str = ""
    # Sent while an earlier request for the same model was still waiting: a miss that joined a
    # load under way (a sequential LRU replay counts it as a hit; SageMaker's ModelCacheHit not).
    joined: bool = False


@dataclass
class Driver:
    url: str
    concurrency: int
    outcomes: list[Outcome] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)

    async def _call(self, session: aiohttp.ClientSession, target: str) -> Outcome:
        joined = self.in_flight[target] > 0
        self.in_flight[target] += 1
        try:
            outcome = await self._send(session, target)
        finally:
            self.in_flight[target] -= 1
        outcome.joined = joined and not outcome.hit
        return outcome

    async def _send(self, session: aiohttp.ClientSession, target: str) -> Outcome:
        headers = {"X-Amzn-SageMaker-Target-Model": target,
                   "Content-Type": "application/octet-stream"}
        started = time.perf_counter()
        try:
            async with session.post(f"{self.url}/endpoints/local/invocations", data=BODY,
                                    headers=headers) as resp:
                body = await resp.read()
                ms = (time.perf_counter() - started) * 1e3
                hit = resp.headers.get("X-Mme-Model-Cache-Hit") == "1"
                if resp.status != 200:
                    return Outcome(target, False, hit, ms, f"{resp.status} {body[:200]!r}")
                data = json.loads(body)["outputs"][0]["data"]
                k = int(target[1:5])
                ok = data == [scale_of(k) * x for x in (1, 2, 3, 4)]
                return Outcome(target, ok, hit, ms, "" if ok else f"wrong answer {data}")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return Outcome(target, False, False, (time.perf_counter() - started) * 1e3, repr(exc))

    async def run(self, sequence: Sequence[str],
                  checkpoints: Mapping[int, Callable[[], None]] | None = None,
                  until: float | None = None, rng: random.Random | None = None) -> float:
        """Send ``sequence`` in order (or random picks from it until ``until``); seconds taken.

        ``checkpoints`` maps an index of ``sequence`` to a callback run (in a thread) once every
        request before it has been answered.
        """
        checkpoints = dict(checkpoints or {})
        state = {"next": 0, "done": 0}  # the next request to send; requests answered
        gate = asyncio.Condition()
        started = time.perf_counter()
        timeout = aiohttp.ClientTimeout(total=600)
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            async def worker() -> None:
                while True:
                    if until is not None:
                        if time.perf_counter() >= until:
                            return
                        assert rng is not None
                        target = rng.choice(sequence)
                    else:
                        async with gate:
                            # Requests past a checkpoint wait until it has been taken.
                            await gate.wait_for(lambda: not any(
                                i <= state["next"] for i in checkpoints))
                            if state["next"] >= len(sequence):
                                return
                            target = sequence[state["next"]]
                            state["next"] += 1
                    self.outcomes.append(await self._call(session, target))
                    async with gate:
                        state["done"] += 1
                        gate.notify_all()

            def answered(count: int) -> Callable[[], bool]:
                return lambda: state["done"] >= count

            async def checkpointer() -> None:
                while checkpoints:
                    index = min(checkpoints)
                    async with gate:
                        await gate.wait_for(answered(index))
                    await asyncio.to_thread(checkpoints[index])
                    del checkpoints[index]
                    async with gate:
                        gate.notify_all()

            await asyncio.gather(checkpointer(),
                                 *(worker() for _ in range(self.concurrency)))
        return time.perf_counter() - started


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def run_scale(args: argparse.Namespace, work: Path) -> bool:
    rng = random.Random(args.seed)
    size = build_store(work / "store", work / "models", args.models)
    discovery = [target_name(k) for k in range(args.models)]
    rng.shuffle(discovery)
    zipf = zipf_sequence(args.models, args.requests, args.zipf, rng)
    simulated = lru_hits(discovery + zipf, args.max_loaded_models)[len(discovery):]
    disk_budget = size * args.disk_models
    print(f"scale: {args.models} models ({size} bytes each), --max-loaded-models "
          f"{args.max_loaded_models}, --disk-budget {disk_budget} (room for {args.disk_models}); "
          f"each model once, then {args.requests} Zipf({args.zipf}) calls, concurrency "
          f"{args.concurrency}, seed {args.seed}", flush=True)
    # INFO: the model manager's one line per step, read back below for the races it met.
    server = serve(work, "scale", ["--max-loaded-models", str(args.max_loaded_models),
                                   "--disk-budget", str(disk_budget), "--log-level", "INFO"])
    rows: list[tuple[str, float | None, float, int]] = []

    def sample(label: str) -> None:
        ms, listed = server.models_call_ms()
        rows.append((label, server.rss_mib(), ms, listed))
        rss = rows[-1][1]
        print(f"  {label:<34} emulator RSS {rss if rss is None else f'{rss:.0f} MiB':>9}  "
              f"GET /_emulator/models {ms:6.1f} ms ({listed} listed)", flush=True)

    try:
        sample("started, 0 models met")
        marks = [m for m in (100, 500, 1000) if m < args.models] + [args.models]
        checkpoints = {m: functools.partial(sample, f"{m} models met") for m in marks}
        driver = Driver(server.url, args.concurrency)
        seconds = asyncio.run(driver.run(discovery, checkpoints))
        met = len(driver.outcomes)
        print(f"  every model once: {met} calls in {seconds:.1f}s", flush=True)
        halfway = {len(zipf) // 2: functools.partial(sample, f"Zipf phase, {len(zipf) // 2} calls")}
        seconds = asyncio.run(driver.run(zipf, halfway))
        sample(f"Zipf phase done, {len(zipf)} calls")
    finally:
        server.stop()
    measured = driver.outcomes[met:]
    errors = [o for o in driver.outcomes if not o.ok]
    hit_ratio = sum(o.hit for o in measured) / max(len(measured), 1)
    joined = sum(o.joined for o in measured) / max(len(measured), 1)
    sim_ratio = sum(simulated) / max(len(simulated), 1)
    rss = [r[1] for r in rows[1:] if r[1] is not None]
    print(f"  Zipf phase: {len(measured)} calls in {seconds:.1f}s "
          f"({len(measured) / seconds:.1f}/s), hit p50 "
          f"{_pct([o.ms for o in measured if o.hit], 50):.1f} ms, miss p50 "
          f"{_pct([o.ms for o in measured if not o.hit], 50):.0f} ms")
    print(f"  hit ratio: measured {hit_ratio:.3f} (+ {joined:.3f} of misses that joined a "
          f"load under way = {hit_ratio + joined:.3f}), LRU simulation {sim_ratio:.3f}, "
          f"difference {100 * (hit_ratio + joined - sim_ratio):+.1f} points; errors "
          f"{len(errors)}")
    log = (work / "serve-scale.log").read_text(errors="replace")
    print(f"  Triton's lookup race met {log.count('step=infer outcome=resent')} times (each "
          f"inference sent again); unload waits asked again after an index failure: "
          f"{log.count('step=unload outcome=wait-again')}")
    if rss:
        print(f"  emulator RSS from {args.models if args.models < 100 else 100} models met to "
              f"the end: {min(rss):.0f}-{max(rss):.0f} MiB (x{max(rss) / min(rss):.2f})")
    for o in errors[:5]:
        print(f"  error: {o.target}: {o.detail}")
    return not errors and abs(hit_ratio + joined - sim_ratio) <= 0.02


@dataclass
class MissRun:
    name: str
    outcomes: list[Outcome]
    seconds: float


def run_miss_cost(args: argparse.Namespace, work: Path) -> bool:
    build_store(work / "store", work / "models", args.miss_models)
    targets = [target_name(k) for k in range(args.miss_models)]
    print(f"miss cost: {args.miss_models} models, --max-loaded-models {args.miss_room}, "
          f"{args.miss_clients} clients calling random models for {args.miss_seconds:g}s each "
          "way", flush=True)
    runs = []
    for name, sequential in (("load after unload (before)", True),
                             ("load once unload accepted", False)):
        server = serve(work, "miss-" + ("seq" if sequential else "overlap"),
                       ["--max-loaded-models", str(args.miss_room)],
                       settings=SEQUENTIAL_EVICTIONS if sequential else None)
        try:
            driver = Driver(server.url, args.miss_clients)
            until = time.perf_counter() + args.miss_seconds
            seconds = asyncio.run(driver.run(targets, until=until,
                                             rng=random.Random(args.seed)))
        finally:
            server.stop()
        runs.append(MissRun(name, driver.outcomes, seconds))
    print(f"  {'sequencing':<28}{'calls/s':>9}{'misses':>8}{'miss p50 ms':>13}"
          f"{'miss p99 ms':>13}{'hit p50 ms':>12}{'errors':>8}")
    for r in runs:
        misses = [o.ms for o in r.outcomes if o.ok and not o.hit]
        hits = [o.ms for o in r.outcomes if o.ok and o.hit]
        errors = sum(not o.ok for o in r.outcomes)
        print(f"  {r.name:<28}{len(r.outcomes) / r.seconds:>9.1f}{len(misses):>8}"
              f"{_pct(misses, 50):>13.0f}{_pct(misses, 99):>13.0f}{_pct(hits, 50):>12.1f}"
              f"{errors:>8}")
    before, after = runs
    rate = [len(r.outcomes) / r.seconds for r in runs]
    miss50 = [_pct([o.ms for o in r.outcomes if o.ok and not o.hit], 50) for r in runs]
    print(f"  now / before: throughput x{rate[1] / rate[0]:.2f}, miss p50 "
          f"x{miss50[1] / miss50[0]:.2f}")
    return all(o.ok for r in runs for o in r.outcomes)


def run(args: argparse.Namespace) -> int:
    ok = True
    with contextlib.ExitStack() as stack:
        if args.work_dir is not None:
            work = args.work_dir
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="mme-bench-scale-")))
        if not args.skip_scale:
            ok &= run_scale(args, work / "scale")
        if not args.skip_miss_cost:
            ok &= run_miss_cost(args, work / "miss")
    return 0 if ok else 1


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``mme bench scale``."""
    p = commands.add_parser(
        "scale", help="a thousand models under Zipf popularity (hit ratio vs an LRU "
                      "simulation, memory, introspection time) and the cost of a miss under a "
                      "full budget, before and now")
    p.add_argument("--models", type=int, default=1000)
    p.add_argument("--max-loaded-models", type=int, default=50)
    p.add_argument("--disk-models", type=int, default=200,
                   help="the disk budget holds this many models")
    p.add_argument("--requests", type=int, default=3000, help="Zipf-phase calls")
    p.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent s")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--miss-models", type=int, default=20)
    p.add_argument("--miss-room", type=int, default=5)
    p.add_argument("--miss-clients", type=int, default=64)
    p.add_argument("--miss-seconds", type=float, default=30.0)
    p.add_argument("--skip-scale", action="store_true", help="only the miss-cost part")
    p.add_argument("--skip-miss-cost", action="store_true", help="only the scale part")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="keep the store, caches and server logs (serve-*.log) in this folder "
                        "(default: a temporary folder, removed at the end)")
    p.set_defaults(func=lambda args: run(args))
