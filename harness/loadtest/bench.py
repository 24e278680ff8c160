"""Is the load generator the bottleneck? ``python -m harness.loadtest.bench`` prints the figure.

Two runs of the same generator with the same users and payload:
1. against the emulator (embedded Triton, a trivial Python model): the endpoint's throughput,
   and the generator's own CPU time per request (``time.process_time`` of this process);
2. against a null HTTP server (a child process that answers 200 at once): the generator's
   ceiling on this machine.
The ratio ceiling / emulator throughput is the headroom: above ~2, the generator is not what
limits a load test of the emulator.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from emulator.processes import free_port, wait_until
from harness.live_endpoint import ping
from harness.loadtest.config import LoadPlan, Phase
from harness.loadtest.session import auto_request, emulator, invoke_once, run_http

NULL_SERVER = """
import sys
from aiohttp import web

async def ping(request):
    return web.Response()

async def invoke(request):
    await request.read()
    return web.Response(body=b'{"outputs":[]}', content_type="application/json")

app = web.Application()
app.router.add_get("/ping", ping)
app.router.add_post("/endpoints/{name}/invocations", invoke)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


@contextlib.contextmanager
def null_server() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", NULL_SERVER, str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        def still_starting() -> None:
            if process.poll() is not None:
                raise RuntimeError(f"the null server exited with code {process.returncode}")

        if not wait_until(lambda: ping(url, 0.5), 30, still_starting=still_starting):
            raise RuntimeError("the null server did not answer /ping within 30s")
        yield url
    finally:
        process.terminate()
        process.wait(10)


def measure(url: str, users: int, seconds: float, request: object, target: str | None) -> dict:
    plan = LoadPlan(phases=(Phase(users, 0, seconds),), target_models=(target,))
    cpu0, wall0 = time.process_time(), time.monotonic()
    result = asyncio.run(run_http(url, "local", plan, request, metrics=False))  # type: ignore[arg-type]
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    ok = sum(1 for s in result.samples if s.ok)
    return {
        "requests_per_s": ok / result.duration_s,
        "generator_cpu_ms_per_request": 1000 * cpu / max(ok, 1),
        "generator_cpu_share": cpu / wall,
        "errors": len(result.samples) - ok,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    from harness.examples.add_model import write_add_repository
    from harness.model_store import package_repository

    with tempfile.TemporaryDirectory(prefix="mme-genbench-") as tmp:
        work = Path(tmp)
        tarball = package_repository(
            write_add_repository(work / "add"), work / "store" / "add.tar.gz"
        )
        request = auto_request(tarball)
        rows = []
        with emulator(work / "store", work) as url:
            warm = asyncio.run(invoke_once(url, "local", "add.tar.gz", request))
            assert warm.ok, warm
            for users in args.users:
                rows.append(
                    ("emulator", users, measure(url, users, args.seconds, request, "add.tar.gz"))
                )
        with null_server() as url:
            for users in args.users:
                rows.append(
                    ("null server", users, measure(url, users, args.seconds, request, "add.tar.gz"))
                )
    print("| target | users | requests/s | generator CPU ms/request | generator CPU share |")
    print("|---|---|---|---|---|")
    for target, users, r in rows:
        print(
            f"| {target} | {users} | {r['requests_per_s']:.0f} | "
            f"{r['generator_cpu_ms_per_request']:.3f} | {r['generator_cpu_share']:.0%} |"
        )
    best_emulator = max(r["requests_per_s"] for t, _, r in rows if t == "emulator")
    ceiling = max(r["requests_per_s"] for t, _, r in rows if t == "null server")
    print(
        f"\ngenerator ceiling {ceiling:.0f} req/s vs emulator {best_emulator:.0f} req/s: "
        f"headroom {ceiling / best_emulator:.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
