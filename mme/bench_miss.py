"""``mme bench miss``: what a miss under a full memory budget costs, now against before, one run.

A miss under a full byte budget (``--memory-budget``) unloads the least recently used model and
loads the one asked for. Triton's Python backend spends about a second in each: its unload
sleeps a second before it tells the model's stub to finalize, and its load starts a stub only
to auto-complete the configuration, then sleeps a second before it ends that one too
(docs/memory.md, "Where a miss goes"). Before, the load waited for the victim's unload to
complete; now it starts once Triton has accepted the unload, and Triton's teardown of the victim
goes on beside it (``MME_OVERLAP_BYTE_EVICTIONS``).

Two ``mme serve`` run side by side on the same store, one as before (that switch off: the
baseline) and one as now; rounds alternate between them (ABBA, so a drift of this shared machine
weighs on both), each round a series of misses from one client:

1. the trivial Python model (``Y = X * scale``): two of them, a budget with room for one
   (``--memory-budget``; by default sized from what they measure alone on this machine), called
   in turn, so every call is a miss that evicts;
2. an ensemble of two trivial Python steps: two such ensembles, room for one, in turn. Its miss
   is set against the sum of its steps' loads: twice the load of the trivial model (each step is
   that model), as the same server logged it in part 1. Both sides wait for an evicted
   ensemble's steps to be gone (the release before waited for the ensemble alone, which Triton
   reports gone at once: its ensemble misses looked cheaper than they were).

Each miss's client time is measured here; the emulator's own ``step=load`` and ``step=unload``
seconds are read from its log. The machine's load average is printed: on a shared machine the
figures move with it, the ratio (same run, alternating) much less.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from mme.bench_scale import Server, serve

# The server as before: the load waits for the victim's unload to complete.
SEQUENTIAL_EVICTIONS = {"MME_OVERLAP_BYTE_EVICTIONS": "false"}
SIDES = ("before", "now")
LOG_STEP = re.compile(r"model=(?P<model>\S+) step=(?P<step>load|unload) seconds=(?P<s>[0-9.]+)")


def _body(input_name: str) -> bytes:
    return json.dumps({"inputs": [{"name": input_name, "shape": [1, 4], "datatype": "FP32",
                                   "data": [1, 2, 3, 4]}]}).encode()


def build_store(store: Path, work: Path) -> dict[str, tuple[str, float]]:
    """Two trivial models and two ensembles; returns target -> (input name, expected factor)."""
    from ensembles.packaging import package
    from harness.testmodels import write_scale_model, write_two_step_ensemble

    expected: dict[str, tuple[str, float]] = {}
    for k in range(2):
        scale = 2.0 + k
        folder = write_scale_model(work / "single", f"model{k}", scale=scale)
        package(folder, store / f"m{k}.tar.gz", "folder")
        expected[f"m{k}.tar.gz"] = ("X", scale)
        repo = work / f"ensemble{k}"
        write_scale_model(repo, "preprocess", 2.0 + k)
        write_scale_model(repo, "postprocess", 10.0)
        write_two_step_ensemble(repo / "ensemble")
        package(repo, store / f"e{k}.tar.gz", "flat")
        expected[f"e{k}.tar.gz"] = ("INPUT", (2.0 + k) * 10.0)
    return expected


@dataclass
class Side:
    """One way (before, now) of one part: its misses as the client saw them, and its log."""

    name: str
    misses_ms: list[float] = field(default_factory=list)
    loads_s: list[float] = field(default_factory=list)  # the emulator's step=load seconds
    unloads_s: list[float] = field(default_factory=list)
    hits: int = 0  # calls that found the model loaded (the budget held both): not misses
    errors: list[str] = field(default_factory=list)

    def read_log(self, log: Path, skip: int) -> None:
        """The emulator's load and unload seconds, but for the first ``skip`` loads (the
        warm-up's) and the unloads they caused."""
        loads = unloads = 0
        for line in log.read_text(errors="replace").splitlines():
            match = LOG_STEP.search(line)
            if match is None:
                continue
            if match["step"] == "load":
                loads += 1
                if loads > skip:
                    self.loads_s.append(float(match["s"]))
            else:
                unloads += 1
                if unloads > skip - 1:  # the warm-up's first load evicted nothing
                    self.unloads_s.append(float(match["s"]))


async def _misses(side: Side, url: str, targets: Sequence[str], calls: int,
                  expected: dict[str, tuple[str, float]]) -> None:
    """``calls`` calls from one client, in turn over ``targets`` (each evicts the other)."""
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for i in range(calls):
            target = targets[i % len(targets)]
            input_name, factor = expected[target]
            headers = {"X-Amzn-SageMaker-Target-Model": target,
                       "Content-Type": "application/octet-stream"}
            started = time.perf_counter()
            async with session.post(f"{url}/endpoints/local/invocations",
                                    data=_body(input_name), headers=headers) as resp:
                body = await resp.read()
                ms = (time.perf_counter() - started) * 1e3
                if resp.status != 200:
                    side.errors.append(f"{target}: {resp.status} {body[:200]!r}")
                    continue
                data = json.loads(body)["outputs"][0]["data"]
                if data != [factor * x for x in (1, 2, 3, 4)]:
                    side.errors.append(f"{target}: wrong answer {data}")
                    continue
                if resp.headers.get("X-Mme-Model-Cache-Hit") == "1":
                    side.hits += 1
                else:
                    side.misses_ms.append(ms)


def _p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))] if values else float("nan")


def _load_average() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def _room_for_one(work: Path, part: str, targets: Sequence[str],
                  expected: dict[str, tuple[str, float]]) -> str:
    """A memory budget with room for one of ``targets``, not two, from what they measure.

    A model's measured memory moves with what else runs (shared pages, docs/memory.md): 20 MB
    for the trivial model beside others, 26-30 MB alone, so no fixed budget is right on every
    machine. Each is loaded alone (one at a time, each unloaded before the next loads: the
    baseline's sequencing) and measured; the budget is 1.6 times the largest.
    """
    server = serve(work, f"{part}-calibrate", ["--max-loaded-models", "1"],
                   settings=SEQUENTIAL_EVICTIONS)
    try:
        asyncio.run(_misses(Side("calibrate"), server.url, [*targets, targets[0]],
                            len(targets) + 1, expected))
        with urllib.request.urlopen(f"{server.url}/_emulator/models", timeout=30) as resp:
            rows = json.loads(resp.read())["Endpoints"]["local"]["Models"]
    finally:
        server.stop()
    measured = [row["MeasuredBytes"] for row in rows if row.get("MeasuredBytes")]
    if len(measured) < len(targets):
        raise RuntimeError(f"the {part} models could not be measured: {rows}")
    return str(int(1.6 * max(measured)))


def _part(work: Path, part: str, targets: Sequence[str], budget: str | None,
          expected: dict[str, tuple[str, float]], args: argparse.Namespace) -> dict[str, Side]:
    """One part: a server per side on the same store, ``args.rounds`` rounds alternating."""
    if budget is None:
        budget = _room_for_one(work, part, targets, expected)
    print(f"  {part}: --memory-budget {budget}", flush=True)
    sides = {name: Side(name) for name in SIDES}
    with contextlib.ExitStack() as stack:
        servers: dict[str, Server] = {}
        for name in SIDES:
            servers[name] = serve(work, f"{part}-{name}",
                                  ["--memory-budget", budget, "--log-level", "INFO"],
                                  settings=SEQUENTIAL_EVICTIONS if name == "before" else None)
            stack.callback(servers[name].stop)
        # Each model's first load is not a miss under a full budget: it is counted as its
        # files until it has loaded and measured, so it fits beside the other and evicts it
        # only after it has loaded. Once each is measured, every call evicts the other first.
        for name in SIDES:
            asyncio.run(_misses(Side(name), servers[name].url, targets, 2 * len(targets),
                                expected))
        for r in range(args.rounds):
            for name in SIDES if r % 2 == 0 else SIDES[::-1]:  # ABBA
                asyncio.run(_misses(sides[name], servers[name].url, targets, args.calls,
                                    expected))
            print(f"  {part}: round {r + 1}/{args.rounds} (load average {_load_average()})",
                  flush=True)
    for name, side in sides.items():  # the servers have stopped: their logs are complete
        side.read_log(work / f"serve-{part}-{name}.log", skip=2 * len(targets))
    return sides


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        if args.work_dir is not None:
            work = args.work_dir
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mme-bench-miss-")))
        expected = build_store(work / "store", work / "models")
        print(f"mme bench miss: {args.rounds} rounds alternating before/now (ABBA), "
              f"{args.calls} misses per round; load average {_load_average()} on "
              f"{os.cpu_count()} CPUs", flush=True)
        single = _part(work, "single", ("m0.tar.gz", "m1.tar.gz"), args.memory_budget,
                       expected, args)
        ensemble = _part(work, "ensemble", ("e0.tar.gz", "e1.tar.gz"),
                         args.ensemble_memory_budget, expected, args)
        return _report(single, ensemble, args)


def _report(single: dict[str, Side], ensemble: dict[str, Side], args: argparse.Namespace) -> int:
    print("trivial Python model, a memory budget with room for one:")
    print(f"  {'':<8}{'misses':>7}{'miss p50 s':>12}{'miss p90 s':>12}{'load p50 s':>12}"
          f"{'unload p50 s':>14}")
    for side in single.values():
        print(f"  {side.name:<8}{len(side.misses_ms):>7}{_p50(side.misses_ms) / 1e3:>12.3f}"
              f"{_p90(side.misses_ms) / 1e3:>12.3f}{_p50(side.loads_s):>12.3f}"
              f"{_p50(side.unloads_s):>14.3f}")
    print("two-step ensemble, a memory budget with room for one; a step's load is the trivial "
          "model's load above:")
    print(f"  {'':<8}{'misses':>7}{'miss p50 s':>12}{'miss p90 s':>12}{'load p50 s':>12}"
          f"{'sum of steps loads s':>22}")
    for name, side in ensemble.items():
        steps = 2 * _p50(single[name].loads_s)
        print(f"  {side.name:<8}{len(side.misses_ms):>7}{_p50(side.misses_ms) / 1e3:>12.3f}"
              f"{_p90(side.misses_ms) / 1e3:>12.3f}{_p50(side.loads_s):>12.3f}{steps:>22.3f}")
    ratio = _p50(single["now"].misses_ms) / _p50(single["before"].misses_ms)
    ens_ratio = _p50(ensemble["now"].misses_ms) / _p50(ensemble["before"].misses_ms)
    print(f"now / before: miss p50 x{ratio:.2f}, ensemble miss p50 x{ens_ratio:.2f}")
    miss_s = _p50(single["now"].misses_ms) / 1e3
    ens_s = _p50(ensemble["now"].misses_ms) / 1e3
    steps_s = 2 * _p50(single["now"].loads_s)
    print(f"goal: miss p50 {miss_s:.3f} s <= {args.goal_s:g} s: "
          f"{'met' if miss_s <= args.goal_s else 'MISSED'}; ensemble miss p50 {ens_s:.3f} s "
          f"<= sum of its steps' loads {steps_s:.3f} s: {'met' if ens_s <= steps_s else 'MISSED'}")
    failed = False
    for part, sides in (("single", single), ("ensemble", ensemble)):
        for side in sides.values():
            if side.hits:
                print(f"{part} {side.name}: {side.hits} call(s) found the model loaded (not "
                      "misses: the budget held both; give a smaller budget)")
            for error in side.errors[:5]:
                print(f"{part} {side.name}: error: {error}")
            failed |= bool(side.errors)
    return 1 if failed else 0


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``mme bench miss``."""
    p = commands.add_parser(
        "miss", help="the cost of a miss under a full memory budget (trivial Python model, "
                     "ensemble), now against before, alternating in one run")
    p.add_argument("--rounds", type=int, default=4, help="rounds per side and part (ABBA)")
    p.add_argument("--calls", type=int, default=6, help="misses per round")
    p.add_argument("--memory-budget", default=None,
                   help="room for one trivial Python model, not two (default: 1.6 times what "
                        "it measures alone here)")
    p.add_argument("--ensemble-memory-budget", default=None,
                   help="room for one two-step ensemble, not two (default: as above)")
    p.add_argument("--goal-s", type=float, default=1.5, help="the miss p50 goal, seconds")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="keep the store, caches and server logs (serve-*.log) in this folder")
    p.set_defaults(func=run)
