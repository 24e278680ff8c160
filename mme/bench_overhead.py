"""``mme bench overhead``: what the emulator adds on top of Triton, measured in one run.

One ``mme serve`` process hosts the model; the same warm Triton model is then called directly on
Triton's KServe endpoint (the baseline), through a bare TCP relay to that endpoint
(``mme/relay.py``: what one more process on the path costs before a proxy does anything, the
floor under any proxy's figures), through the emulator's HTTP server and Triton client with none
of its SageMaker behaviour (``mme/server_floor.py``: the floor under the emulator's figures) and
through ``POST /endpoints/local/invocations`` (the emulator), alternating between the paths at
each concurrency so that whatever else runs on the machine weighs on all alike. The driver is
``wrk`` (a C load generator: the client must not be the bottleneck it is measuring) when it is
installed, else a Python aiohttp client in this process (which then competes with the servers
for the CPU and hides part of the gap).

Workloads (``--workload``):
  trivial   the trivial Python model, a 1x4 FP32 JSON body (the emulator's overhead alone)
  binary    5 MiB of FP32 (--binary-size) in a binary+json body to a model that sums it (the cost
            of the bytes; the emulator passes them to Triton through shared memory, the other
            paths cannot)
  text      the bundled text ensemble, 2 sentences in, 2x384 FP32 out as JSON (built first)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from emulator.processes import stop_process, stopped_on_failure
from emulator.settings import parse_size

ENDPOINT = "local"
BINARY_JSON = "application/vnd.sagemaker-triton.binary+json"

# wrk runs this script: the body and headers come from files named by environment variables, and
# the result is one machine-readable line (latencies in microseconds).
WRK_SCRIPT = r"""
local f = assert(io.open(os.getenv("MME_WRK_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
for line in io.lines(os.getenv("MME_WRK_HEADERS")) do
  local name, value = line:match("^([^:]+): (.*)$")
  if name then wrk.headers[name] = value end
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("MME-WRK %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""

# A Python model that takes any number of FP32 and answers their sum: the request's bytes cross
# both paths, the answer is a few bytes.
SUM_MODEL_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = np.array([x.sum()], dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses
'''
SUM_MODEL_CONFIG = '''name: "sum"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


@dataclass(frozen=True)
class Workload:
    """One model and one request, as each path spells it."""

    name: str
    description: str
    target: str
    body: bytes
    emulator_headers: dict[str, str]
    direct_headers: dict[str, str]


@dataclass(frozen=True)
class Measure:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    # CPU seconds the process in front of Triton (mme serve, or a floor) and Triton used
    # during the run (Linux /proc), or None: per call, these stay meaningful when other work
    # slows the machine down.
    proxy_cpu_s: float | None = None
    triton_cpu_s: float | None = None

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def _trivial(store: Path) -> Workload:
    from ensembles.packaging import package
    from harness.testmodels import write_scale_model

    package(write_scale_model(store.parent / "repo", "bench"), store / "bench.tar.gz", "folder")
    body = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                   "data": [1, 2, 3, 4]}]}).encode()
    return Workload("trivial", "trivial Python model, 1x4 FP32 JSON body", "bench.tar.gz", body,
                    {"Content-Type": "application/octet-stream"},
                    {"Content-Type": "application/json"})


BINARY_BYTES = 5 * 2**20


def _binary(store: Path, size: int = BINARY_BYTES) -> Workload:
    from ensembles.packaging import package

    folder = store.parent / "repo" / "sum"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(SUM_MODEL_PY)
    (folder / "config.pbtxt").write_text(SUM_MODEL_CONFIG)
    package(folder, store / "sum.tar.gz", "folder")
    count = size // 4
    header = json.dumps({
        "inputs": [{"name": "X", "shape": [count], "datatype": "FP32",
                    "parameters": {"binary_data_size": count * 4}}],
        "outputs": [{"name": "Y", "parameters": {"binary_data": False}}],
    }).encode()
    body = header + bytes(count * 4)
    shown = f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size / 2**10:g} KiB"
    return Workload("binary", f"{shown} FP32 binary+json body, summed by a Python model",
                    "sum.tar.gz", body,
                    {"Content-Type": f"{BINARY_JSON};json-header-size={len(header)}"},
                    {"Content-Type": "application/octet-stream",
                     "Inference-Header-Content-Length": str(len(header))})


def _text(store: Path) -> Workload:
    from ensembles import catalogue
    from ensembles.packaging import package
    from ensembles.quiet import exporter_output_hidden

    print("building the text ensemble (onnx)...", flush=True)
    with exporter_output_hidden():  # the exporters' hundred-odd lines; shown on failure
        built = catalogue.build("text_embedding", store.parent / "text")
    package(built.repository, store / "text.tar.gz")
    body = json.dumps({"inputs": [{
        "name": "INPUT0", "shape": [2, 1], "datatype": "BYTES",
        "data": ["The quick brown fox jumps over the lazy dog.",
                 "A local SageMaker multi-model endpoint in front of a real Triton."]}]}).encode()
    return Workload("text", "text ensemble, 2 sentences in, 2x384 FP32 out as JSON",
                    "text.tar.gz", body, {"Content-Type": "application/json"},
                    {"Content-Type": "application/json"})


WORKLOADS: dict[str, Callable[[Path], Workload]] = {
    "trivial": _trivial, "binary": _binary, "text": _text}


# --- drivers ------------------------------------------------------------------------------------

def run_wrk(url: str, body: bytes, headers: dict[str, str], concurrency: int, seconds: float,
            work: Path) -> Measure:
    script, body_file, header_file = work / "wrk.lua", work / "wrk.body", work / "wrk.headers"
    if not script.exists():
        script.write_text(WRK_SCRIPT)
    body_file.write_bytes(body)
    header_file.write_text("".join(f"{k}: {v}\n" for k, v in headers.items()))
    # One wrk thread: it keeps up with these servers, and a second one would take a core from them.
    done = subprocess.run(
        ["wrk", "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "--timeout", "30s",
         "-s", str(script), url],
        env={**os.environ, "MME_WRK_BODY": str(body_file), "MME_WRK_HEADERS": str(header_file)},
        capture_output=True, text=True, check=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("MME-WRK ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result: {done.stdout}{done.stderr}")
    requests, micros, p50, p99, errors = (int(x) for x in line.split()[1:])
    return Measure(requests, micros / 1e6, p50 / 1e3, p99 / 1e3, errors)


def run_python(url: str, body: bytes, headers: dict[str, str], concurrency: int,
               seconds: float, work: Path) -> Measure:
    """The fallback driver: keep-alive aiohttp workers for ``seconds``."""
    async def drive() -> Measure:
        latencies: list[float] = []
        errors = 0
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            stop = time.perf_counter() + seconds

            async def worker() -> None:
                nonlocal errors
                while time.perf_counter() < stop:
                    started = time.perf_counter()
                    async with session.post(url, data=body, headers=headers) as resp:
                        await resp.read()
                        errors += resp.status != 200
                    latencies.append((time.perf_counter() - started) * 1e3)

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - started
        ordered = sorted(latencies) or [0.0]
        return Measure(len(latencies), elapsed, ordered[len(ordered) // 2],
                       ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], errors)

    return asyncio.run(drive())


# --- CPU accounting -----------------------------------------------------------------------------

def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU of a process so far (Linux), None where /proc cannot tell."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _triton_pid(server_pid: int) -> int | None:
    """The embedded launcher's tritonserver, a child of ``mme serve`` (None for docker)."""
    try:
        children = Path(f"/proc/{server_pid}/task/{server_pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if "tritonserver" in Path(f"/proc/{child}/cmdline").read_text():
                return int(child)
        except OSError:
            continue
    return None


def _accounted(run: Callable[..., Measure], pids: tuple[int | None, int | None],
               *args: object) -> Measure:
    before = [_cpu_seconds(pid) for pid in pids]
    measured = run(*args)
    after = [_cpu_seconds(pid) for pid in pids]
    used = [b - a if a is not None and b is not None else None
            for a, b in zip(before, after, strict=True)]
    return Measure(measured.requests, measured.seconds, measured.p50_ms, measured.p99_ms,
                   measured.errors, used[0], used[1])


# --- the benchmark ------------------------------------------------------------------------------

def start_serve(args: list[str], timeout_s: float = 180, *, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """``mme serve ARGS`` in its own process on a free port (client and server must not share a
    GIL); returns once it answers /ping. ``cwd`` and ``env`` choose the code it runs
    (``--baseline``: another revision's checkout)."""
    from emulator.processes import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "mme", "serve", "--port", str(port),
                               "--log-level", "WARNING", *args], cwd=cwd, env=env)

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/ping", timeout=1):
                return True
        except OSError:
            return False

    with stopped_on_failure(server):  # also Ctrl-C or SIGTERM while it starts
        _wait_started(server, "mme serve", answers, timeout_s, interval_s=0.1)
    return server, url


def _wait_started(process: subprocess.Popen[bytes], name: str, ready: Callable[[], bool],
                  timeout_s: float, interval_s: float) -> None:
    """Until ``ready()``; RuntimeError if ``process`` exits first or the time runs out."""
    from emulator.processes import wait_until

    def still_starting() -> None:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode} while starting")

    if not wait_until(ready, timeout_s, still_starting=still_starting, interval_s=interval_s):
        raise RuntimeError(f"{name} did not answer within {timeout_s:.0f}s")


def _serve(work: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    return start_serve(["--model-data", str(work / "store"), "--cache-dir", str(work / "cache"),
                        *extra])


def _invoke_once(url: str, workload: Workload) -> None:
    request = urllib.request.Request(
        f"{url}/endpoints/{ENDPOINT}/invocations", data=workload.body, method="POST",
        headers={**workload.emulator_headers, "X-Amzn-SageMaker-Target-Model": workload.target})
    try:
        with urllib.request.urlopen(request, timeout=300) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"the first call to {workload.target} failed ({exc.code}): "
                           f"{exc.read().decode(errors='replace')}") from None


def _direct_url(url: str, target: str) -> str:
    with urllib.request.urlopen(f"{url}/_emulator/models") as resp:
        local = json.loads(resp.read())["Endpoints"][ENDPOINT]
    entry = next(m["TritonModel"] for m in local["Models"] if m["TargetModel"] == target)
    return f"{local['TritonUrl']}/v2/models/{entry}/infer"  # one instance: the top-level Triton


@contextlib.contextmanager
def _floor_to(module: str, direct_url: str, upstream: str) -> Iterator[tuple[str, int]]:
    """``direct_url`` through ``python -m MODULE --fd FD --to UPSTREAM`` in its own process,
    and its pid."""
    from emulator.processes import bound_socket

    with bound_socket() as listening:
        floor = subprocess.Popen(
            [sys.executable, "-m", module, "--fd", str(listening.fileno()), "--to", upstream],
            pass_fds=(listening.fileno(),))
        port = listening.getsockname()[1]
    url = urllib.parse.urlsplit(direct_url)._replace(netloc=f"127.0.0.1:{port}").geturl()
    try:
        def answers() -> bool:
            # Any HTTP answer (Triton's 400 for an empty body) means the floor relays. A connection
            # alone proves nothing: the socket listened before the floor's process started.
            try:
                with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"),
                                            timeout=5):
                    return True
            except urllib.error.HTTPError:
                return True
            except OSError:
                return False

        _wait_started(floor, module, answers, 60, interval_s=0.05)
        yield url, floor.pid
    finally:
        stop_process(floor, 30)


def relay_to(direct_url: str) -> contextlib.AbstractContextManager[tuple[str, int]]:
    """``direct_url`` through a bare relay (``mme/relay.py``) in its own process, and its pid."""
    upstream = urllib.parse.urlsplit(direct_url)
    return _floor_to("mme.relay", direct_url, f"{upstream.hostname}:{upstream.port}")


def server_floor_to(direct_url: str) -> contextlib.AbstractContextManager[tuple[str, int]]:
    """``direct_url`` through the emulator's server and client alone (``mme/server_floor.py``)."""
    return _floor_to("mme.server_floor", direct_url, direct_url)


# The paths after direct, in the table's order, and what each is.
PATHS = {
    "relay": "Triton through a bare byte relay in its own process, the floor under any proxy",
    "server": "through the emulator's HTTP server and Triton client alone, relaying each call "
              "as it is (mme/server_floor.py), the floor under the emulator",
    "emulator": "POST /endpoints/local/invocations on mme serve",
}


@dataclass(frozen=True)
class PathRow:
    name: str
    measure: Measure
    # Lowest and highest throughput ratio to direct over the rounds: how far one round can
    # stray on this machine (the relay's spread is the noise under any comparison).
    spread: tuple[float, float]


@dataclass(frozen=True)
class Row:
    concurrency: int
    direct: Measure
    paths: tuple[PathRow, ...]  # PATHS' order

    def path(self, name: str) -> Measure:
        return next(p.measure for p in self.paths if p.name == name)


def _sum(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _median(runs: list[Measure]) -> Measure:
    """Per-field medians of the rounds (a busy moment in one round does not decide the table)."""
    return Measure(
        requests=sum(r.requests for r in runs), seconds=sum(r.seconds for r in runs),
        p50_ms=statistics.median(r.p50_ms for r in runs),
        p99_ms=statistics.median(r.p99_ms for r in runs),
        errors=sum(r.errors for r in runs),
        proxy_cpu_s=_sum([r.proxy_cpu_s for r in runs]),
        triton_cpu_s=_sum([r.triton_cpu_s for r in runs]))


def _spread(direct: list[Measure], path: list[Measure]) -> tuple[float, float]:
    """The lowest and highest of the rounds' throughput ratios (path / direct, same round)."""
    ratios = [p.per_second / max(d.per_second, 1e-9) for d, p in zip(direct, path, strict=True)]
    return min(ratios), max(ratios)


def measure(workload: Workload, url: str, driver: str, concurrencies: list[int],
            seconds: float, rounds: int, work: Path, server_pid: int | None = None) -> list[Row]:
    driven = run_wrk if driver == "wrk" else run_python
    triton_pid = _triton_pid(server_pid) if server_pid else None
    emulator_url = f"{url}/endpoints/{ENDPOINT}/invocations"
    emulator_headers = {**workload.emulator_headers,
                        "X-Amzn-SageMaker-Target-Model": workload.target}
    direct_url = _direct_url(url, workload.target)
    rows = []
    with relay_to(direct_url) as relay, server_floor_to(direct_url) as floor:
        # Each path's URL and headers, and the process between the client and Triton whose CPU
        # is counted (on the direct path: mme serve, which then only reads Triton's log).
        paths = ((direct_url, workload.direct_headers, server_pid),
                 (relay[0], workload.direct_headers, relay[1]),
                 (floor[0], workload.direct_headers, floor[1]),
                 (emulator_url, emulator_headers, server_pid))
        for concurrency in concurrencies:
            for path_url, headers, _pid in paths:  # warm-up
                driven(path_url, workload.body, headers, concurrency, 1, work)
            measured: list[list[Measure]] = [[] for _ in paths]
            for _ in range(rounds):  # interleaved: every path sees the same machine
                for runs, (path_url, headers, pid) in zip(measured, paths, strict=True):
                    runs.append(_accounted(driven, (pid, triton_pid), path_url, workload.body,
                                           headers, concurrency, seconds, work))
            rows.append(Row(concurrency, _median(measured[0]), tuple(
                PathRow(name, _median(runs), _spread(measured[0], runs))
                for name, runs in zip(PATHS, measured[1:], strict=True))))
    return rows


def table(workload: Workload, driver: str, rows: list[Row], seconds: float,
          rounds: int) -> str:
    lines = [f"{workload.description}; driver {driver}, {rounds} interleaved rounds of "
             f"{seconds:g} s per path (medians of the rounds' p50/p99; throughput over all "
             "rounds, with the lowest and highest round). "
             + "; ".join(f"{name}: {what}" for name, what in PATHS.items())
             + ". CPU ms per call: the process in front of Triton (mme serve, which on the "
             "direct path only reads Triton's log) and Triton's.",
             f"{'conc':>4} {'path':<9}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>10}{'errors':>8}"
             f"{'own CPU':>9}{'Triton CPU':>11}   vs direct"]
    for row in rows:
        d = row.direct
        lines.append(f"{row.concurrency:>4} {'direct':<9}{d.p50_ms:>9.2f}{d.p99_ms:>9.2f}"
                     f"{d.per_second:>10.0f}{d.errors:>8}{_per_call(d)}")
        for path in row.paths:
            m, (low, high) = path.measure, path.spread
            spread = f" (rounds x{low:.2f} to x{high:.2f})" if rounds > 1 else ""
            lines.append(
                f"{'':>4} {path.name:<9}{m.p50_ms:>9.2f}{m.p99_ms:>9.2f}{m.per_second:>10.0f}"
                f"{m.errors:>8}{_per_call(m)}   p50 {m.p50_ms - d.p50_ms:+.2f} ms "
                f"(x{m.p50_ms / d.p50_ms:.2f}), "
                f"throughput x{m.per_second / max(d.per_second, 1e-9):.2f}{spread}")
    return "\n".join(lines)


def _shared_memory_bodies(url: str) -> int:
    """How many calls' bodies went to Triton through shared memory (``mme serve``'s count)."""
    with urllib.request.urlopen(f"{url}/_emulator/models", timeout=30) as resp:
        endpoint = json.loads(resp.read())["Endpoints"][ENDPOINT]
    return sum(int(instance.get("SharedMemoryBodies", 0))
               for variant in endpoint["Variants"].values() for instance in variant["Instances"])


def _per_call(m: Measure) -> str:
    def ms(cpu: float | None) -> str:
        return "-" if cpu is None or not m.requests else f"{cpu / m.requests * 1e3:.3f}"
    return f"{ms(m.proxy_cpu_s):>9}{ms(m.triton_cpu_s):>11}"


# ``--baseline``: the whole run against another revision (``mme.bench_baseline.compare_with``),
# and ``--record``: this tree with and without ``--record FILE``
# (``mme.bench_baseline.compare_record``); both handed in by ``mme/bench.py``: that module builds
# on this one.
CompareWith = Callable[[str, Callable[[Path], Workload], str, list[int], float, int,
                        list[dict[str, Any]]], int]
CompareRecord = Callable[[Callable[[Path], Workload], str, list[int], float, int, bool], int]


def run_overhead(args: argparse.Namespace, compare_with: CompareWith | None = None,
                 compare_record: CompareRecord | None = None) -> int:
    driver = args.driver
    if driver != "python" and not float(args.seconds).is_integer() and (
            driver == "wrk" or shutil.which("wrk")):
        print(f"mme bench overhead: --seconds {args.seconds:g}: wrk runs for whole seconds "
              "only; give a whole number, or --driver python", file=sys.stderr)
        return 2
    if driver == "auto":
        driver = "wrk" if shutil.which("wrk") else "python"
        if driver == "python":
            print("wrk is not installed (apt-get install -y wrk, or `make wrk`): falling back to "
                  "the Python driver, which shares the CPU with both servers and understates "
                  "the gap", file=sys.stderr)
    elif driver == "wrk" and not shutil.which("wrk"):
        print("mme bench overhead: --driver wrk but wrk is not installed "
              "(apt-get install -y wrk)", file=sys.stderr)
        return 2
    if getattr(args, "record", False):
        if compare_record is None:
            print("mme bench overhead: --record is not available here", file=sys.stderr)
            return 2
        if args.baseline is not None:
            print("mme bench overhead: --record compares this tree with itself; leave "
                  "--baseline out", file=sys.stderr)
            return 2
        return compare_record(_workload_of(args), driver,
                              [int(c) for c in (args.concurrency or "1,8").split(",")],
                              args.seconds, args.rounds, args.record_bodies)
    if args.baseline is not None:
        if compare_with is None:
            print("mme bench overhead: --baseline is not available here", file=sys.stderr)
            return 2
        return compare_with(args.baseline, _workload_of(args), driver,
                            [int(c) for c in (args.concurrency or "1,8").split(",")],
                            args.seconds, args.rounds, args.fault_rule or [])
    concurrencies = [int(c) for c in (args.concurrency or "1,8,32").split(",")]
    with tempfile.TemporaryDirectory(prefix="mme-bench-overhead-") as tmp:
        work = Path(tmp)
        (work / "store").mkdir()
        workload = _workload_of(args)(work / "store")
        server, url = _serve(work, args.serve_flag or [])
        try:
            put_fault_rules(url, args.fault_rule or [])
            _invoke_once(url, workload)  # load the model: cold start is not what is measured
            rows = measure(workload, url, driver, concurrencies, args.seconds, args.rounds, work,
                           server.pid)
            shared = _shared_memory_bodies(url)
        finally:
            stop_process(server)
    print(table(workload, driver, rows, args.seconds, args.rounds))
    print(f"emulator calls whose tensors reached Triton through shared memory: {shared}"
          + ("" if shared else " (all over HTTP)"))
    errors = sum(m.errors for r in rows for m in (r.direct, *(p.measure for p in r.paths)))
    return 0 if errors == 0 else 1


def put_fault_rules(url: str, rules: list[dict[str, Any]]) -> None:
    """``--fault-rule``: each rule in force on the server measured (``/_emulator/faults``)."""
    from harness.faults import FaultRules

    faults = FaultRules(url)
    for rule in rules:
        faults.add(rule["fault"], match=rule.get("match"))


def _fault_rule(text: str) -> dict[str, Any]:
    try:
        rule = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--fault-rule is a JSON rule: {exc}") from None
    if not isinstance(rule, dict) or "fault" not in rule:
        raise argparse.ArgumentTypeError('--fault-rule is a rule with a "fault" (docs/faults.md),'
                                         ' e.g. \'{"match": {"target_model": "none"}, "fault": '
                                         '{"error": "ThrottlingException"}}\'')
    return rule


def _workload_of(args: argparse.Namespace) -> Callable[[Path], Workload]:
    """What builds the chosen workload's model into a store folder."""
    if args.workload == "binary":
        size: int = args.binary_size
        return lambda store: _binary(store, size)
    return WORKLOADS[args.workload]


def _size(text: str) -> int:
    size = parse_size(text)
    if size is None or size < 4:
        raise argparse.ArgumentTypeError(f"not a body size: {text!r} (e.g. 256KiB, 5MiB)")
    return size


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser],
               compare_with: CompareWith | None = None,
               compare_record: CompareRecord | None = None) -> None:
    p = commands.add_parser("overhead", help="emulator vs direct Triton on one warm model, "
                                             "driven by wrk")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="trivial")
    p.add_argument("--concurrency", default=None,
                   help="comma-separated concurrencies (default 1,8,32; with --baseline 1,8)")
    p.add_argument("--binary-size", type=_size, default=BINARY_BYTES, metavar="SIZE",
                   help="the binary workload's tensor bytes (default 5MiB; e.g. 256KiB)")
    p.add_argument("--seconds", type=float, default=3.0,
                   help="per path and round (whole seconds with wrk)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per concurrency")
    p.add_argument("--driver", choices=("auto", "wrk", "python"), default="auto",
                   help="auto: wrk when installed, else the Python client")
    p.add_argument("--baseline", metavar="REV",
                   help="instead of the paths table: InvokeEndpoint on mme serve from this tree "
                        "against mme serve from REV (a commit, checked out into a temporary git "
                        "worktree), alternating rounds (mme/bench_baseline.py)")
    p.add_argument("--record", action="store_true",
                   help="instead of the paths table: mme serve from this tree with --record "
                        "FILE against the same without it and a control without it, "
                        "alternating rounds (what recording every call costs, beside the "
                        "noise of two identical servers)")
    p.add_argument("--record-bodies", action="store_true",
                   help="with --record: the recording server also writes every body")
    p.add_argument("--serve-flag", action="append", metavar="FLAG",
                   help="passed on to mme serve (repeat; e.g. --serve-flag=--workers=2)")
    p.add_argument("--fault-rule", action="append", type=_fault_rule, metavar="JSON",
                   help="a fault rule (docs/faults.md) put in force on this tree's server before "
                        "it is measured (repeat); with --baseline on this tree's side only, so "
                        "a rule that matches nothing measures what a rule in force costs")
    p.set_defaults(func=functools.partial(run_overhead, compare_with=compare_with,
                                          compare_record=compare_record))
