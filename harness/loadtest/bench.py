"""How many calls per second each load engine reaches against a target that is never the
bottleneck: ``mme bench loadgen`` (or ``python -m harness.loadtest.bench``).

The target is a null HTTP server (a child process answering every InvokeEndpoint at once); the
same phase of users is run, in one run, by:
1. the asyncio + aiohttp loop ``mme loadtest`` used before Locust, kept for this
   benchmark only in ``harness/loadtest/legacy_asyncio.py``;
2. Locust with one process (``mme loadtest``'s default): boto3 users, SigV4-signed, retries off;
3. Locust with ``--processes 2`` (two workers under a local master).
Calls per second is what each reached; CPU ms per call is the generator's own CPU time (this
process for the asyncio loop, the Locust processes for Locust), the cost a load test takes from
the endpoint when both share a machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from emulator.processes import free_port, wait_until
from harness.live_endpoint import ping
from harness.loadtest.config import LoadPlan, Phase
from harness.payloads import Request

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


@dataclass(frozen=True)
class Measured:
    engine: str
    calls_per_s: float
    cpu_ms_per_call: float
    errors: int


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_asyncio(url: str, users: int, seconds: float, request: Request) -> Measured:
    from harness.loadtest.invokers import HttpInvoker
    from harness.loadtest.legacy_asyncio import run_asyncio_load

    async def go() -> Any:
        invoker = HttpInvoker(url, "local", request.body, request.content_type)
        try:
            return await run_asyncio_load(LoadPlan(phases=(Phase(users, 0, seconds),)), invoker)
        finally:
            await invoker.close()

    cpu0 = time.process_time()
    result = asyncio.run(go())
    cpu = time.process_time() - cpu0
    ok = sum(1 for s in result.samples if s.ok)
    return Measured("asyncio + aiohttp (before Locust)", ok / result.duration_s,
                    1000 * cpu / max(ok, 1), len(result.samples) - ok)


def measure_locust(url: str, users: int, seconds: float, request: Request,
                   processes: int | None) -> Measured:
    from harness.loadtest.locust_run import Engine, Target, run_load

    plan = LoadPlan(phases=(Phase(users, 0, seconds),))
    cpu0 = _children_cpu()
    result = asyncio.run(run_load(plan, Target("local", url), request,
                                  engine=Engine(processes=processes)))
    cpu = _children_cpu() - cpu0  # the Locust processes (waited for), startup included
    ok = sum(1 for s in result.samples if s.ok)
    name = f"Locust + boto3, {processes or 1} process{'es' if processes else ''}"
    return Measured(name, ok / result.duration_s, 1000 * cpu / max(ok, 1),
                    len(result.samples) - ok)


def run_bench(users: int, seconds: float) -> list[Measured]:
    request = Request(b'{"inputs": []}', "application/json")
    with null_server() as url:
        return [measure_asyncio(url, users, seconds, request),
                measure_locust(url, users, seconds, request, None),
                measure_locust(url, users, seconds, request, 2)]


def table(rows: list[Measured], users: int, seconds: float) -> str:
    lines = [f"{users} users for {seconds:g} s against a null server (never the bottleneck):", "",
             "| engine | calls/s | generator CPU ms per call | errors |", "|---|---|---|---|"]
    lines += [f"| {r.engine} | {r.calls_per_s:.0f} | {r.cpu_ms_per_call:.3f} | {r.errors} |"
              for r in rows]
    return "\n".join(lines) + "\n"


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``mme bench loadgen``."""
    p = commands.add_parser("loadgen", help="calls/s of the load engines (the asyncio loop before "
                                            "Locust, Locust with 1 and 2 processes), same run")
    p.add_argument("--users", type=int, default=16)
    p.add_argument("--seconds", type=float, default=8.0)
    p.set_defaults(func=lambda args: _print_bench(args.users, args.seconds))


def _print_bench(users: int, seconds: float) -> int:
    print(table(run_bench(users, seconds), users, seconds))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    return _print_bench(args.users, args.seconds)


if __name__ == "__main__":
    sys.exit(main())
