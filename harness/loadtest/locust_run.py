"""``mme loadtest``'s side of a Locust run: the plan handed over, Locust started, the result read.

Locust is the load engine (``harness/loadtest/locust_engine.py``, inside the Locust processes). It
runs as a child process (``python -m locust -f harness/locustfile.py``), never imported here:
importing Locust monkey-patches the whole interpreter with gevent (sockets, threads,
``time.sleep``), which must not reach the emulator, pytest or asyncio code that calls ``run_load``.
So this side stays plain asyncio: it starts Locust, polls the endpoint's counters, instance counts
and loaded models while Locust loads it, and joins both into one ``LoadResult`` once Locust has
written what it measured (``--mme-result``, JSON with epoch times).

The same child serves the three ways to run: one process (Locust's LocalRunner), ``--processes
N`` (Locust forks N workers under a master), and ``--master --expect-workers N`` with workers on
other machines (``mme loadtest --worker --master-host HOST``); workers get the plan from the
master (a message before the phases start; Locust's spawn message for a worker that joins
later), so nothing is copied by hand.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.processes import dies_with_parent, free_port
from harness.loadtest.config import (
    IN_FLIGHT_WAIT_S,
    LoadPlan,
    PlanError,
    StoppingConditions,
    plan_from_api,
)
from harness.loadtest.invokers import FleetSource, MetricsSource
from harness.loadtest.runner import (
    INTERRUPTED,
    Event,
    FleetPoll,
    LoadResult,
    MetricsPoll,
    Sample,
    finish_events,
)
from harness.loadtest.scaling import ScalingWatch
from harness.loadtest.schedule import position
from harness.payloads import Request

LOCUSTFILE = Path(__file__).resolve().parents[1] / "locustfile.py"
# Set in the Locust child: it ends the run (as Ctrl-C would) when this process is gone.
PARENT_ENV = "MME_LOCUST_PARENT"
# The signal that asks the Locust master to end the run now and write what it measured
# (it runs in its own session, so a terminal's Ctrl-C reaches only this process).
END_SIGNAL = signal.SIGUSR1


class EngineError(RuntimeError):
    """Locust did not start or exited without writing its result."""


@dataclass(frozen=True)
class Target:
    endpoint: str
    url: str | None = None  # None: the real SageMaker endpoint (boto3's region and credentials)
    region: str | None = None


@dataclass(frozen=True)
class Engine:
    """How Locust runs: one process (default), ``processes`` workers under a local master
    (-1: one per core), or a ``master`` waiting for ``expect_workers`` from other machines."""

    processes: int | None = None
    master: bool = False
    expect_workers: int = 0
    master_bind_port: int | None = None
    web: bool = False
    web_port: int | None = None

    def describe(self) -> str:
        if self.master:
            return f"master of {self.expect_workers} worker(s)"
        if self.processes:
            return f"{os.cpu_count() if self.processes == -1 else self.processes} processes"
        return "1 process"


# --- the plan as it travels to Locust (and from the master to its workers) -----------------


def plan_to_dict(plan: LoadPlan) -> dict[str, Any]:
    stopping = plan.stopping
    return {**plan.as_dict(), "StoppingWindow": {
        "window_s": stopping.window_s, "min_window_s": stopping.min_window_s,
        "min_samples": stopping.min_samples}}


def plan_from_dict(data: dict[str, Any]) -> LoadPlan:
    plan = plan_from_api(data)
    window = data.get("StoppingWindow") or {}
    if window:
        plan = LoadPlan(
            phases=plan.phases,
            stopping=StoppingConditions(
                max_invocations=plan.stopping.max_invocations,
                latency_thresholds=plan.stopping.latency_thresholds,
                window_s=float(window["window_s"]), min_window_s=float(window["min_window_s"]),
                min_samples=int(window["min_samples"])),
            target_models=plan.target_models, popularity=plan.popularity, seed=plan.seed)
    return plan


def spec_json(plan: LoadPlan, target: Target, request: Request, *, think_s: float = 0.0,
              label: str = "", drain_timeout_s: float = IN_FLIGHT_WAIT_S) -> str:
    return json.dumps({
        "plan": plan_to_dict(plan),
        "endpoint": target.endpoint, "url": target.url, "region": target.region,
        "body": base64.b64encode(request.body).decode(), "content_type": request.content_type,
        "think_s": think_s, "label": label, "drain_timeout_s": drain_timeout_s,
    })


@dataclass(frozen=True)
class Spec:
    plan: LoadPlan
    target: Target
    request: Request
    think_s: float
    label: str
    drain_timeout_s: float

    @classmethod
    def parse(cls, text: str) -> Spec:
        """Raises ``PlanError`` naming what is wrong (before any load is sent)."""
        try:
            data = json.loads(text)
            return cls(
                plan=plan_from_dict(data["plan"]),
                target=Target(data["endpoint"], data.get("url"), data.get("region")),
                request=Request(base64.b64decode(data["body"]), data["content_type"]),
                think_s=float(data.get("think_s") or 0.0), label=str(data.get("label") or ""),
                drain_timeout_s=float(data.get("drain_timeout_s") or IN_FLIGHT_WAIT_S))
        except PlanError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise PlanError(f"not a load-test spec: {exc!r}") from exc


# --- what Locust measured, back into a LoadResult ------------------------------------------


def sample_row(t0: float, t1: float, target: str | None, outcome: Any) -> list[Any]:
    """One call as it travels from a worker to the master (epoch times)."""
    return [round(t0, 6), round(t1, 6), target, outcome.status, outcome.error_code,
            outcome.model_latency_us, outcome.cache_hit, outcome.variant, outcome.instance]


def phase_at(plan: LoadPlan, t: float) -> int:
    pos = position(plan.phases, t)
    return pos.phase if pos is not None else len(plan.phases) - 1


def result_from_json(data: dict[str, Any], plan: LoadPlan, label: str = "") -> LoadResult:
    start = float(data["start_epoch"])
    samples = [
        Sample(t0 - start, t1 - start, target, int(status), code, mlat, cache,
               phase_at(plan, t0 - start), variant, instance)
        for t0, t1, target, status, code, mlat, cache, variant, instance in data["samples"]]
    samples.sort(key=lambda s: s.end)
    result = LoadResult(
        plan=plan, started_at=start, duration_s=float(data["end_epoch"]) - start,
        stop_reason=str(data["stop_reason"]), samples=samples,
        events=[Event(t - start, kind, detail) for t, kind, detail in data["events"]],
        users=[(t - start, int(n)) for t, n in data["users"]],
        generator=str(data.get("generator") or "locust"), label=label,
        error_messages=dict(data.get("error_messages") or {}))
    return result


# --- running Locust as a child --------------------------------------------------------------


def locust_command(spec_path: Path, result_path: Path, engine: Engine) -> list[str]:
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--mme-plan", str(spec_path),
           "--mme-result", str(result_path), "--loglevel", "WARNING", "--only-summary",
           "--exit-code-on-error", "0"]
    if engine.web:  # the web UI, started at once and closed when the plan is over
        cmd += ["--autostart", "--autoquit", "0"]
        if engine.web_port:
            cmd += ["--web-port", str(engine.web_port)]
    else:
        cmd += ["--headless"]
    if engine.master:
        cmd += ["--master", "--expect-workers", str(engine.expect_workers)]
        if engine.master_bind_port:
            cmd += ["--master-bind-port", str(engine.master_bind_port)]
    elif engine.processes:
        # Its own port: Locust's default 5557 would collide with another run on this machine.
        port = engine.master_bind_port or free_port()
        cmd += ["--processes", str(engine.processes), "--master-bind-port", str(port),
                "--master-port", str(port)]
    return cmd


def worker_command(master_host: str, master_port: int | None = None,
                   processes: int | None = None) -> list[str]:
    """A worker for ``mme loadtest --master`` elsewhere: no plan, it comes from the master."""
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker",
           "--master-host", master_host, "--loglevel", "WARNING"]
    if master_port:
        cmd += ["--master-port", str(master_port)]
    if processes:
        cmd += ["--processes", str(processes)]
    return cmd


async def run_load(
    plan: LoadPlan,
    target: Target,
    request: Request,
    *,
    metrics: MetricsSource | None = None,
    fleet: FleetSource | None = None,
    scaling: ScalingWatch | None = None,
    poll_s: float = 0.5,
    think_s: float = 0.0,
    label: str = "",
    engine: Engine = Engine(),
    interrupt: asyncio.Event | None = None,
    drain_timeout_s: float = IN_FLIGHT_WAIT_S,
    locust_log: Path | None = None,
) -> LoadResult:
    """Run ``plan`` on Locust against ``target``; ``interrupt`` set (Ctrl-C) asks Locust to end
    the run and keep what it measured. Raises ``EngineError`` if Locust wrote no result.
    ``metrics`` and ``fleet`` are closed at the end."""
    try:
        return await _run_load(plan, target, request, metrics, fleet, scaling, poll_s, think_s,
                               label, engine, interrupt, drain_timeout_s, locust_log)
    finally:
        for source in (metrics, fleet):
            if source is not None:
                await source.close()


async def _run_load(
    plan: LoadPlan, target: Target, request: Request, metrics: MetricsSource | None,
    fleet: FleetSource | None, scaling: ScalingWatch | None, poll_s: float, think_s: float,
    label: str, engine: Engine, interrupt: asyncio.Event | None, drain_timeout_s: float,
    locust_log: Path | None,
) -> LoadResult:
    import time

    polls: list[tuple[float, dict[str, Any]]] = []
    fleet_polls: list[tuple[float, dict[str, dict[str, Any]]]] = []
    instances: list[tuple[float, dict[str, tuple[int, int]]]] = []
    scaling_events: list[tuple[float, str]] = []
    baseline = await metrics.poll() if metrics is not None else None

    async def poller() -> None:
        assert metrics is not None
        while True:
            await asyncio.sleep(poll_s)
            snapshot = await metrics.poll()
            if snapshot is not None:
                polls.append((time.time(), snapshot))

    async def fleet_poller() -> None:
        assert fleet is not None
        while True:
            snapshot = await fleet.poll()
            if snapshot is not None:
                fleet_polls.append((time.time(), snapshot))
            await asyncio.sleep(poll_s)

    async def scaling_poller() -> None:
        """Instance counts, and each scaling activity when it first appears."""
        assert scaling is not None
        seen: set[str] = set()
        while True:
            polled = await scaling.poll()
            if polled is not None:
                now = time.time()
                instances.append((now, polled.instances))
                for activity in reversed(polled.activities):
                    if activity["ActivityId"] not in seen:
                        seen.add(activity["ActivityId"])
                        if len(instances) > 1:  # those before the run are not events
                            scaling_events.append((now, activity["Description"]))
            await asyncio.sleep(poll_s)

    with tempfile.TemporaryDirectory(prefix="mme-locust-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(spec_json(plan, target, request, think_s=think_s, label=label,
                                       drain_timeout_s=drain_timeout_s))
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        process = await asyncio.create_subprocess_exec(
            *locust_command(spec_path, result_path, engine), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
        assert process.stdout is not None
        tasks = [asyncio.create_task(job()) for job, source in
                 ((poller, metrics), (fleet_poller, fleet), (scaling_poller, scaling))
                 if source is not None]
        # Locust's own lines (the progress line, its summary) go to stderr: stdout is the report.
        relay = asyncio.create_task(_relay(process.stdout, locust_log))
        try:
            await _wait(process, interrupt)
            await relay
        finally:
            if process.returncode is None:  # this side was cancelled or failed: no orphan
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            for task in [*tasks, relay]:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not result_path.exists():
            raise EngineError(f"Locust exited with code {process.returncode} without a result "
                              "(its messages are above)")
        data = json.loads(result_path.read_text())
    if not data.get("started"):
        raise EngineError("interrupted before any traffic was sent"
                          if data.get("stop_reason", "").startswith(INTERRUPTED)
                          else str(data.get("stop_reason") or "Locust did not start the run"))
    result = result_from_json(data, plan, label)
    start, end = result.started_at, result.started_at + result.duration_s
    if metrics is not None:
        if baseline is not None:
            result.polls.append(MetricsPoll(0.0, baseline))
        result.polls += [MetricsPoll(t - start, m) for t, m in polls if start < t <= end]
        final = await metrics.poll()
        if final is not None:
            result.polls.append(MetricsPoll(result.duration_s, final))
    if fleet is not None:
        result.fleet = [FleetPoll(max(t - start, 0.0), f) for t, f in fleet_polls if t <= end]
        last = await fleet.poll()
        if last is not None:
            result.fleet.append(FleetPoll(result.duration_s, last))
    result.instances = [(max(t - start, 0.0), counts) for t, counts in instances]
    result.events += [Event(max(t - start, 0.0), "scaling", d) for t, d in scaling_events]
    finish_events(result)
    return result


async def _relay(stream: asyncio.StreamReader, log_path: Path | None) -> None:
    """Locust's output, line by line, to this process's stderr (or to ``log_path``)."""
    log_file = open(log_path, "ab") if log_path else None  # noqa: SIM115 - closed below
    try:
        while line := await stream.readline():
            if log_file is not None:
                log_file.write(line)
            else:
                sys.stderr.write(line.decode(errors="replace"))
                sys.stderr.flush()
    finally:
        if log_file is not None:
            log_file.close()


async def _wait(process: asyncio.subprocess.Process, interrupt: asyncio.Event | None) -> None:
    """Until Locust exits; an interrupt is passed on once (Locust then drains and writes)."""
    if interrupt is None:
        await process.wait()
        return
    waiting = asyncio.create_task(process.wait())
    asked = asyncio.create_task(interrupt.wait())
    done, _ = await asyncio.wait({waiting, asked}, return_when=asyncio.FIRST_COMPLETED)
    if asked in done and waiting not in done:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(END_SIGNAL)
    else:
        asked.cancel()
    await waiting


LOCUST_MASTER_PORT = 5557


def worker_main(master_host: str, master_port: int | None, processes: int | None) -> int:
    """``mme loadtest --worker``: Locust's worker in the foreground, its exit code returned.
    It says where it connects first, and whether a master answers there yet: Locust's worker
    itself prints nothing until the master sends it a plan."""
    import socket
    import subprocess

    port = master_port or LOCUST_MASTER_PORT
    where = f"{master_host}:{port}"
    print(f"mme loadtest --worker: a Locust worker for the master at {where}; it runs the "
          "master's plan and reports to it (this terminal stays quiet while it does). Ctrl-C "
          "stops it.", file=sys.stderr, flush=True)
    try:
        with socket.create_connection((master_host, port), timeout=2):
            pass
        print(f"mme loadtest --worker: the master at {where} answers; waiting for its plan",
              file=sys.stderr, flush=True)
    except OSError as exc:
        print(f"mme loadtest --worker: no master answers at {where} yet ({exc}); the worker "
              "waits for one: start `mme loadtest --master ...` there, or check --master-host "
              "and --master-port", file=sys.stderr, flush=True)
    # Locust runs in a session of its own: a Ctrl-C (or a SIGTERM) reaches this process alone,
    # which ends Locust with SIGTERM, its graceful stop; sent to Locust too, a Ctrl-C printed a
    # traceback when it came while Locust was still importing. Killed, this process takes
    # Locust with it at once, as a worker machine that dies would (the master sees it stop).
    command, preexec = dies_with_parent(worker_command(master_host, master_port, processes),
                                        signal.SIGKILL)
    worker = subprocess.Popen(command, preexec_fn=preexec, start_new_session=True)
    try:
        return worker.wait()
    except (KeyboardInterrupt, SystemExit) as stop:
        worker.terminate()
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        if isinstance(stop, SystemExit):
            raise
        print("mme loadtest --worker: interrupted; the worker stopped", file=sys.stderr)
        return 130

