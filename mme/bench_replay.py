"""``mme bench replay``: how close to its trace's offsets ``mme loadtest --trace`` sends.

A seeded Poisson trace (``--calls`` at ``--rate`` calls/s) is replayed by the replayer itself
(``harness.loadtest.replay``) against ``mme serve`` in its own process, on an endpoint that does
not exist: the emulator answers each call at once (a ValidationError), so what is measured is
the replayer's sending, not a model. The baseline, in the same run and process: the same
schedule walked by the event loop's timers alone, nothing sent; the machine's own timer lateness.
Both print how late each call left against its offset (p50 / p99 / max) and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

from emulator.cloudwatch.statistics import percentile

ENDPOINT = "bench-replay-no-such-endpoint"


def poisson_offsets(calls: int, rate: float, seed: int) -> list[float]:
    """``calls`` arrival offsets (s) of a Poisson process at ``rate``, the first at 0."""
    rng = random.Random(seed)
    offsets, now = [0.0], 0.0
    for _ in range(calls - 1):
        now += rng.expovariate(rate)
        offsets.append(now)
    return offsets


async def timers_alone(offsets: list[float], start_delay_s: float) -> list[float]:
    """Lateness (ms) of the event loop's timers walking ``offsets``, nothing sent."""
    loop = asyncio.get_running_loop()
    start = loop.time() + start_delay_s
    late: list[float] = []
    for offset in offsets:
        delay = start + offset - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        late.append((loop.time() - start - offset) * 1e3)
    return late


def _row(name: str, late_ms: list[float]) -> str:
    return (f"{name:<22}{percentile(late_ms, 50):>9.2f}{percentile(late_ms, 99):>9.2f}"
            f"{max(late_ms):>9.2f}")


def run(args: argparse.Namespace) -> int:
    from harness.loadtest.replay import START_DELAY_S, replay, summarize
    from harness.loadtest.trace import Trace, TraceCall
    from mme.bench_scale import serve

    if args.calls < 2 or not args.rate > 0:
        print("mme bench replay: --calls must be 2 or more and --rate above 0",
              file=sys.stderr)
        return 2
    offsets = poisson_offsets(args.calls, args.rate, args.seed)
    trace = Trace([TraceCall(offset, "model.tar.gz") for offset in offsets], "recording")
    body = (b'{"inputs":[{"name":"X","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}',
            "application/json")
    print(f"Poisson trace: {args.calls} calls at {args.rate:g} calls/s (seed {args.seed}), "
          f"{offsets[-1]:.1f} s; replayed against mme serve in its own process, endpoint "
          f"{ENDPOINT} (answered at once). Baseline: the same schedule on the event loop's "
          "timers alone, nothing sent, in the same run.")
    started_load = _load()
    baseline = asyncio.run(timers_alone(offsets, START_DELAY_S))
    with tempfile.TemporaryDirectory(prefix="mme-bench-replay-") as tmp:
        work = Path(tmp)
        (work / "store").mkdir()
        server = serve(work, "replay", [])
        try:
            sent = asyncio.run(replay(server.url, trace, [body] * len(trace.calls),
                                      endpoint=ENDPOINT))
        finally:
            server.stop()
    summary = summarize(trace, sent, 1.0)
    late = [(s.sent_s - s.scheduled_s) * 1e3 for s in sent]
    answered = sum(1 for s in sent if s.status)
    print(f"{'left late (ms)':<22}{'p50':>9}{'p99':>9}{'max':>9}")
    print(_row("timers alone", baseline))
    print(_row("replay", late))
    print(f"replay / timers alone: p50 x{percentile(late, 50) / percentile(baseline, 50):.2f}, "
          f"p99 x{percentile(late, 99) / percentile(baseline, 99):.2f}")
    print(f"sent {len(sent)} calls, {answered} answered, {summary['rate_per_s']} calls/s; "
          f"inter-arrival KS distance {summary['inter_arrival_ks']}; load average at the start "
          f"{started_load}, at the end {_load()}")
    return 0 if len(sent) == args.calls and answered == len(sent) else 1


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


_FLAGS: tuple[tuple[str, type, float, str], ...] = (
    ("--calls", int, 6000, "calls in the trace"),
    ("--rate", float, 200.0, "calls/s of the trace"),
    ("--seed", int, 1, "the trace's random seed"),
)


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "replay", help="how late mme loadtest --trace sends against its trace's offsets, "
                       "against the event loop's timers alone")
    for flag, kind, default, text in _FLAGS:
        parser.add_argument(flag, type=kind, default=kind(default), help=text)
    parser.set_defaults(func=run)
