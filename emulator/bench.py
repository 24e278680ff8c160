"""``mme bench overhead``: what the emulator adds on top of Triton, measured in one run.

The same trivial Python model is called directly on Triton's KServe endpoint (the baseline) and
through ``POST /endpoints/local/invocations`` (the emulator), with the same keep-alive aiohttp
client at the same concurrency. Prints p50/p90/p99, calls per second, and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

TARGET = "bench.tar.gz"


@dataclass
class Run:
    name: str
    latencies_ms: list[float]
    seconds: float
    errors: int

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]

    @property
    def per_second(self) -> float:
        return len(self.latencies_ms) / self.seconds


async def _drive(name: str, url: str, body: bytes, headers: dict[str, str], concurrency: int,
                 requests: int) -> Run:
    latencies: list[float] = []
    errors = 0
    per_worker = max(1, requests // concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def worker(count: int) -> None:
            nonlocal errors
            for _ in range(count):
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
                latencies.append((time.perf_counter() - started) * 1e3)

        await asyncio.gather(*(worker(5) for _ in range(concurrency)))  # warm-up
        latencies.clear()
        started = time.perf_counter()
        await asyncio.gather(*(worker(per_worker) for _ in range(concurrency)))
        return Run(name, latencies, time.perf_counter() - started, errors)


def run(concurrency: int = 8, requests: int = 2000) -> tuple[Run, Run]:
    """Serve with ``mme serve`` in its own process, so client and server don't share a GIL."""
    import os
    import subprocess
    import sys
    import urllib.request

    from emulator.probe_model import package, write_scale_model
    from emulator.triton.launcher import free_port

    with tempfile.TemporaryDirectory(prefix="mme-bench-") as tmp:
        work = Path(tmp)
        package(write_scale_model(work / "repo", "bench"), work / "store" / TARGET, "folder")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [sys.executable, "-m", "emulator", "serve", "--model-data", str(work / "store"),
             "--cache-dir", str(work / "cache"), "--port", str(port), "--log-level", "WARNING"],
            env={**os.environ})
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    urllib.request.urlopen(f"{url}/ping", timeout=1)
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("mme serve did not start") from None
                    time.sleep(0.1)
            body = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                           "data": [1, 2, 3, 4]}]}).encode()
            sm_headers = {"X-Amzn-SageMaker-Target-Model": TARGET,
                          "Content-Type": "application/octet-stream"}

            async def both() -> tuple[Run, Run]:
                # The emulator's warm-up loads the model; then both paths hit the same instance.
                emulated = await _drive("emulator", f"{url}/endpoints/local/invocations", body,
                                        sm_headers, concurrency, requests)
                with urllib.request.urlopen(f"{url}/_emulator/models") as resp:
                    local = json.loads(resp.read())["Endpoints"]["local"]
                entry = local["Models"][0]["TritonModel"]
                direct = await _drive("direct Triton",
                                      f"{local['TritonUrl']}/v2/models/{entry}/infer", body,
                                      {"Content-Type": "application/json"}, concurrency, requests)
                return direct, emulated

            return asyncio.run(both())
        finally:
            server.terminate()
            server.wait(60)


def table(direct: Run, emulated: Run, concurrency: int) -> str:
    lines = [f"Trivial Python model, JSON body, concurrency {concurrency}, "
             f"{len(direct.latencies_ms)} calls per path",
             f"{'path':<16}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'calls/s':>10}{'errors':>8}"]
    for r in (direct, emulated):
        lines.append(f"{r.name:<16}{r.percentile(50):>9.2f}{r.percentile(90):>9.2f}"
                     f"{r.percentile(99):>9.2f}{r.per_second:>10.0f}{r.errors:>8}")
    added = statistics.median(emulated.latencies_ms) - statistics.median(direct.latencies_ms)
    lines.append(f"emulator / direct: p50 x{emulated.percentile(50) / direct.percentile(50):.2f} "
                 f"(+{added:.2f} ms), throughput x{emulated.per_second / direct.per_second:.2f}")
    return "\n".join(lines)


def run_overhead(args: argparse.Namespace) -> int:
    direct, emulated = run(args.concurrency, args.requests)
    print(table(direct, emulated, args.concurrency))
    return 0 if direct.errors == emulated.errors == 0 else 1


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = subparsers.add_parser("bench", help="benchmarks that print a table and a ratio")
    commands = bench.add_subparsers(dest="bench_command", required=True)
    p = commands.add_parser("overhead", help="emulator vs direct Triton on a trivial model")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=2000, help="measured calls per path")
    p.set_defaults(func=run_overhead)
