"""``mme bench trace``: a mixed load recorded, replayed and planned, in one run.

The store: ``--models`` small Python models that each hold ``--ballast-mib`` MiB once loaded,
under ``--memory-budget`` (by default room for all but one, so the cache turns over). The steps:

1. ``mme serve --record`` with the store, and ``mme loadtest`` against it: ``--users`` Locust
   users, Zipf(``--zipf``) popularity, ``--think-time`` between calls, for ``--seconds``. The
   server then stops, so its recording is whole.
2. ``mme loadtest --trace`` replays the recording ``--replays`` times, each against a fresh
   ``mme serve`` with the same flags (empty caches, as the recording's server began).
3. ``mme plan --trace`` simulates the same file (each model's memory and load time measured once).

It prints, beside the recording's: each replay's calls per model (which must match exactly), the
Kolmogorov-Smirnov distance of its inter-arrival times, how late it sent (p50/p99), latencies and
cache hit ratio; the plan's hit ratio and its distance in points from each replay's. Exit 1 when a
replay's counts do not match the recording's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ENDPOINT_FLAGS = ("--log-level", "WARNING")
BODY = b'{"inputs":[{"name":"X","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'


def _mme(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """One ``mme`` command in its own process; ``RuntimeError`` with its output's tail if it
    fails."""
    done = subprocess.run([sys.executable, "-m", "mme", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"mme {args[0]} exited {done.returncode}:\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    return done


def build_store(store: Path, work: Path, models: int, ballast_mib: int) -> list[str]:
    """``models`` tarballs that each hold ``ballast_mib`` MiB once loaded; their names."""
    from ensembles.packaging import package
    from harness.testmodels import write_scale_model

    names = []
    for k in range(models):
        folder = write_scale_model(work / "repos", f"m{k}", scale=k + 1,
                                   ballast_mib=str(ballast_mib))
        names.append(f"m{k}.tar.gz")
        package(folder, store / names[-1], "folder")
    return names


def plan_points(plan_hits: float, replay_hits: Sequence[float | None]) -> list[float | None]:
    """The plan's distance from each replay's hit ratio, in points (percent of calls)."""
    return [None if hits is None else round(abs(plan_hits - hits) * 100, 1)
            for hits in replay_hits]


def _cell(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def table(recording: dict[str, Any], replays: list[dict[str, Any]], plan_hits: float) -> str:
    """The run as a Markdown table: the recording, each replay, the plan."""
    heads = ["recording", *(f"replay {i + 1}" for i in range(len(replays))), "mme plan --trace"]
    rows = [
        ["calls", recording["calls"], *(r["calls"] for r in replays), recording["calls"]],
        ["calls per model", " / ".join(str(v["recorded"]) for v in replays[0]["per_model"].values())
         if replays else "-",
         *("the same, exactly" if r["counts_match"] else "DIFFERENT" for r in replays), ""],
        ["inter-arrival KS distance", "", *(_cell(r["inter_arrival_ks"]) for r in replays), ""],
        ["left late p50 / p99 (ms)", "",
         *(f"{_cell(r['offset_error_ms']['p50'], 2)} / {_cell(r['offset_error_ms']['p99'], 2)}"
           for r in replays), ""],
        ["latency p50 / p99 (ms)",
         f"{_cell(recording['latency_ms']['p50'], 1)} / {_cell(recording['latency_ms']['p99'], 1)}",
         *(f"{_cell(r['latency_ms']['replayed']['p50'], 1)} / "
           f"{_cell(r['latency_ms']['replayed']['p99'], 1)}" for r in replays), ""],
        ["cache hit ratio", _cell(recording["cache_hit_ratio"]),
         *(_cell(r["cache_hit_ratio"]["replayed"]) for r in replays), _cell(plan_hits)],
    ]
    lines = ["| | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _recording_summary(path: Path) -> dict[str, Any]:
    from emulator.cloudwatch.statistics import percentile

    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    latencies = [x["latency_ms"] for x in lines]
    hits = [x["cache_hit"] for x in lines if x["cache_hit"] is not None]
    return {"calls": len(lines),
            "latency_ms": {"p50": percentile(latencies, 50) if latencies else None,
                           "p99": percentile(latencies, 99) if latencies else None},
            "cache_hit_ratio": sum(hits) / len(hits) if hits else None}


def run(args: argparse.Namespace) -> int:
    from mme.bench_scale import serve

    if args.models < 2 or args.users < 1 or args.replays < 1 or not args.seconds > 0:
        print("mme bench trace: --models must be 2 or more, --users and --replays 1 or more, "
              "--seconds above 0", file=sys.stderr)
        return 2
    # A loaded model holds its ballast and about 20 MiB more (its stub): room for all but one,
    # with two thirds of a model to spare (453 MiB for six of 60 MiB).
    budget = args.memory_budget or f"{round((args.models - 1 / 3) * (args.ballast_mib + 20))}MiB"
    serve_flags = ["--memory-budget", budget, *ENDPOINT_FLAGS]
    print(f"{args.models} Python models holding {args.ballast_mib} MiB each under "
          f"--memory-budget {budget}; mme loadtest: {args.users} users, Zipf({args.zipf:g}), "
          f"think time {args.think_time:g} s, {args.seconds:g} s, recorded by mme serve "
          f"--record; replayed {args.replays} time(s) by mme loadtest --trace, each against a "
          "fresh mme serve with the same flags; mme plan --trace on the same file.", flush=True)
    with tempfile.TemporaryDirectory(prefix="mme-bench-trace-") as tmp:
        work = Path(tmp)
        names = build_store(work / "store", work, args.models, args.ballast_mib)
        targets = [flag for name in names for flag in ("--target-model", name)]
        body = work / "body.json"
        body.write_bytes(BODY)
        payload = ["--body", str(body), "--content-type", "application/json"]
        recording = work / "recording.jsonl"
        server = serve(work, "record", [*serve_flags, "--record", str(recording)])
        try:
            print(f"recording: {args.seconds:g} s of load ...", flush=True)
            _mme("loadtest", "--url", server.url, *targets, "--popularity", f"zipf:{args.zipf}",
                 "--seed", str(args.seed), "--phase", f"{args.users}:0:{args.seconds:g}",
                 "--think-time", str(args.think_time), *payload, "--out", str(work / "load"),
                 "--no-png",
                 timeout=args.seconds + 600)
        finally:
            server.stop()  # the recording's last lines are written as it stops
        replays = []
        for i in range(args.replays):
            print(f"replay {i + 1} of {args.replays} ...", flush=True)
            server = serve(work, f"replay{i}", serve_flags)
            try:
                _mme("loadtest", "--trace", str(recording), "--url", server.url, *payload,
                     "--out", str(work / f"replay{i}"), timeout=args.seconds + 600)
            finally:
                server.stop()
            replays.append(json.loads((work / f"replay{i}" / "replay.json").read_text()))
        print("mme plan --trace ...", flush=True)
        _mme("plan", "--model-data", str(work / "store"), "--memory-budget", budget,
             "--trace", str(recording), "--json", str(work / "plan.json"), timeout=600)
        (prediction,) = json.loads((work / "plan.json").read_text())["predictions"]
        recorded = _recording_summary(recording)
    plan_hits = float(prediction["hit_ratio"])
    print(table(recorded, replays, plan_hits))
    points = plan_points(plan_hits, [r["cache_hit_ratio"]["replayed"] for r in replays])
    print("plan against each replay's hit ratio: " + ", ".join(
        f"{_cell(p, 1)} points" for p in points) + f"; against the recording's: "
          f"{_cell(plan_points(plan_hits, [recorded['cache_hit_ratio']])[0], 1)} points")
    print(f"load average at the end {_load()}")
    return 0 if all(r["counts_match"] for r in replays) else 1


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "trace", help="a mixed load recorded by mme serve --record, replayed by mme loadtest "
                      "--trace and planned by mme plan --trace: hit ratios side by side")
    parser.add_argument("--models", type=int, default=6, help="models in the store (6)")
    parser.add_argument("--ballast-mib", type=int, default=60,
                        help="MiB each model holds once loaded (60)")
    parser.add_argument("--memory-budget", default=None,
                        help="the endpoint's budget (default: room for all models but one)")
    parser.add_argument("--users", type=int, default=8, help="Locust users (8)")
    parser.add_argument("--zipf", type=float, default=2.5, help="Zipf exponent s (2.5)")
    parser.add_argument("--think-time", type=float, default=0.03,
                        help="seconds each user waits between calls (0.03)")
    parser.add_argument("--seconds", type=float, default=120.0, help="load duration (120)")
    parser.add_argument("--replays", type=int, default=2, help="replays of the recording (2)")
    parser.add_argument("--seed", type=int, default=0, help="the load's model choice seed (0)")
    parser.set_defaults(func=run)
