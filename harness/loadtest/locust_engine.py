"""The load test inside Locust: a plan as a ``LoadTestShape`` and a boto3 ``User``.

Imported only in Locust's processes (``harness/locustfile.py``): Locust monkey-patches the
interpreter with gevent on import. Every process (the local runner, the master, each worker) has
one ``LoadProcess``: the plan, a boto3 ``sagemaker-runtime`` client (SigV4, retries off, as a client
would call: every throttle and error counted, none hidden) and the calls it made. Workers send
their calls to the master with Locust's stats reports (``report_to_master``, every second) and a
last batch when the master drains them; the master feeds each call to the ``Controller`` (phases,
stopping conditions, aborts) that ``PlanShape.tick`` asks, and writes the one result.

Starting a run: the master sends every worker the plan and waits until each has built its engine
(its boto3 client) before the phase clock starts. Workers connect before they are ready to call,
and on a busy machine a worker takes seconds to get there: a clock started when they connected
would spend the plan's first phases (a short plan: all of it) on workers that cannot call yet.

Ending a run: the master tells every worker to drain (no new calls; the ones in flight finish and
are sent), waits for their last batches, writes the result, then lets Locust quit. So every call
a worker made is counted once, and none is cut short. A worker that stops reporting during the
phases (Locust marks it missing after ~10 s without heartbeat) ends the run: its calls since its
last report are lost, the report says which worker and when, and holds what the others measured.

Missing is not dead: a worker starved of CPU (a loaded machine) sends no heartbeat either, and
comes back, as does a master too starved to read the heartbeats waiting for it. Hence ~10 s
rather than Locust's default ~3 s; and while the master waits for a worker's answer (its engine
before the phases, its last calls after them), a worker marked missing is waited for
``MISSING_GRACE_S`` more. One that does not answer is named in the stop reason (``aborted: ...``):
a report never lacks calls without saying so.

Waits go through ``emulator.processes.wait_until``: its ``time.sleep`` is gevent's here (patched),
so a wait lets the other greenlets run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import gevent
import locust.runners
from locust import LoadTestShape, User, __version__, events, task
from locust.argument_parser import LocustArgumentParser
from locust.env import Environment
from locust.event import EventHook
from locust.rpc import Message
from locust.runners import STATE_MISSING, MasterRunner, Runner, WorkerNode, WorkerRunner

from emulator.processes import wait_until
from harness.loadtest.config import CALL_TIMEOUT_S, PlanError, user_stop_timeout
from harness.loadtest.invokers import Outcome, call_boto3
from harness.loadtest.locust_run import (
    END_SIGNAL,
    PARENT_ENV,
    Spec,
    result_from_json,
    sample_row,
)
from harness.loadtest.popularity import Chooser
from harness.loadtest.runner import INTERRUPTED, Controller, finish_events

log = logging.getLogger("mme.loadtest")

# Calls reach the master's stopping conditions within a second (Locust's default is 3 s).
locust.runners.WORKER_REPORT_INTERVAL = 1.0
# Heartbeats (one a second) the master misses before it marks a worker missing, which ends the run
# (Locust's default is 3): a worker, or the master, without CPU for a few seconds is not dead.
locust.runners.HEARTBEAT_LIVENESS = 10
PREPARE, READY = "mme_prepare", "mme_ready"
DRAIN, DRAINED = "mme_drain", "mme_drained"
PROGRESS_EVERY_S = 2.0
# How long the master waits on a worker that Locust marks missing while it awaits that worker's
# answer, before it takes the worker as gone: a starved worker comes back (its answer, then its
# heartbeat), a dead one stays missing.
MISSING_GRACE_S = 10.0
# How long workers may take to build their engines (a boto3 client each) before the run is given
# up: a worker that answers heartbeats but never the plan (another version of this engine).
READY_TIMEOUT_S = 120.0


_SESSION: Any = None


def _session() -> Any:
    """One boto3 session per process: its loader keeps the service model once read."""
    global _SESSION
    if _SESSION is None:
        import boto3

        _SESSION = boto3.session.Session()
    return _SESSION


def _warm_up_boto3() -> None:
    """Import boto3 and read botocore's sagemaker-runtime model (about half a second of one core,
    in which no greenlet runs) when Locust imports the locustfile: before it forks its
    ``--processes`` workers, which inherit both, and before a worker connects to its master, which
    would otherwise see it send no heartbeat for seconds on a busy machine."""
    _session().client("sagemaker-runtime", region_name="us-east-1", aws_access_key_id="x",
                      aws_secret_access_key="x")


def _client(spec: Spec, pool: int) -> Any:
    from botocore.config import Config

    session = _session()
    extra: dict[str, Any] = {}
    if spec.target.url is not None:  # the emulator: any credentials sign (unless it checks)
        extra = {"endpoint_url": spec.target.url,
                 "region_name": spec.target.region or session.region_name or "us-east-1"}
        if session.get_credentials() is None:
            extra.update(aws_access_key_id="x", aws_secret_access_key="x")
    elif spec.target.region:
        extra["region_name"] = spec.target.region
    return session.client("sagemaker-runtime", config=Config(
        max_pool_connections=pool, read_timeout=CALL_TIMEOUT_S, connect_timeout=10,
        retries={"total_max_attempts": 1, "mode": "standard"}), **extra)


class LoadProcess:
    """One Locust process's share of the run: its calls, not yet sent to the master."""

    def __init__(self, spec: Spec, seed_offset: int = 0) -> None:
        self.spec = spec
        self.client = _client(spec, pool=max(spec.plan.peak_users, 10))
        self.chooser = Chooser(spec.plan.target_models, spec.plan.popularity,
                               spec.plan.seed + seed_offset)
        self.pending: list[list[Any]] = []
        self.messages: dict[str, str] = {}
        self.in_flight = 0
        self.draining = False
        self.listener: Run | None = None  # the master's Run, in a local (one process) run

    def call(self, environment: Environment) -> None:
        target = self.chooser()
        self.in_flight += 1
        try:
            t0 = time.time()
            # boto3 blocks; gevent's patched sockets make it cooperative
            outcome = call_boto3(self.client, self.spec.target.endpoint,
                                 self.spec.request.body, self.spec.request.content_type, target)
            t1 = time.time()
        finally:
            self.in_flight -= 1
        row = sample_row(t0, t1, target, outcome)
        if not outcome.ok and outcome.error_message:
            self.messages[outcome.error_code or str(outcome.status)] = outcome.error_message
        environment.events.request.fire(
            request_type="InvokeEndpoint", name=target or "(endpoint)",
            response_time=(t1 - t0) * 1000.0, response_length=0, context={},
            exception=None if outcome.ok else _Failure(outcome))
        if self.listener is not None:
            self.listener.add([row], self.messages)
        else:
            self.pending.append(row)

    def take(self) -> dict[str, Any]:
        rows, self.pending = self.pending, []
        return {"samples": rows, "messages": dict(self.messages)}

    def drain(self) -> int:
        """No new calls; returns once the calls in flight have finished (or the timeout), with
        the number still in flight (their calls end after the result is written)."""
        self.draining = True
        wait_until(lambda: not self.in_flight, self.spec.drain_timeout_s, interval_s=0.02)
        return self.in_flight


class _Failure(Exception):
    def __init__(self, outcome: Outcome) -> None:
        code = outcome.error_code or str(outcome.status)
        super().__init__(f"{code}: {outcome.error_message}" if outcome.error_message else code)


ENGINE: LoadProcess | None = None
RUN: Run | None = None
# This worker was told to drain: an engine it builds afterwards never calls (Locust spawns users
# on a worker that connects, or comes back from missing, whenever it does; the master may have
# written the result by the time such calls reach it).
DRAINING = False


class Run:
    """The master's (or the local runner's) view: every call, the controller, the result."""

    def __init__(self, environment: Environment, spec: Spec, result_path: Path | None,
                 report_dir: Path | None, spec_text: str = "") -> None:
        self.environment = environment
        self.spec = spec
        self.spec_text = spec_text  # what the master sends its workers
        self.result_path = result_path
        self.report_dir = report_dir
        self.start: float | None = None
        self.controller: Controller | None = None
        self.samples: list[list[Any]] = []
        self.messages: dict[str, str] = {}
        self.users: list[list[float]] = []
        self.events: list[list[Any]] = []
        self.interrupted = False
        self.draining = False
        self.finished = False
        self.ready: dict[str, str | None] = {}  # worker: None, or why it cannot call
        self.drained: set[str] = set()
        self.lost: set[str] = set()
        self._progress_at = 0.0
        self._progress_count = 0
        self._progress_errors = 0

    # -- calls arriving (local: at once; master: with each worker report) --
    def add(self, rows: list[list[Any]], messages: dict[str, str]) -> None:
        self.messages.update(messages)
        controller = self.controller
        for row in rows:
            self.samples.append(row)
            if controller is None:
                continue
            t0, t1, _, status, code, mlat, cache = row[:7]
            ok = 200 <= status < 300
            latency = mlat / 1000.0 if mlat is not None else (t1 - t0) * 1000.0
            controller.record(t1, ok, latency, code, answered=status != 0,
                              error_message=self.messages.get(code or str(status)),
                              cold=cache is False)

    def prepare(self) -> str | None:
        """Distributed: every worker builds its engine from the plan; returns once each has (and
        is not marked missing, which would abort the first step), or why the run cannot start.

        The phase clock starts after this: a worker connects to the master before it has built
        its boto3 client, which on a busy machine takes seconds, so a clock started when the
        workers connected spent the first phases (a short plan: all of them) with no worker able
        to call. Locust's own ``spawning_complete`` waits likewise for the workers' users, but
        gives up after a second."""
        runner = self._runner()
        if not isinstance(runner, MasterRunner):
            return None
        if not runner.clients:
            return "aborted: no worker is connected to the master"
        unanswered = self._ask_workers(
            runner, PREPARE, self.spec_text,
            lambda c: c.id in self.ready and (c.state != STATE_MISSING or bool(self.ready[c.id])),
            READY_TIMEOUT_S, give_up=lambda: any(self.ready.values()))
        failed = [(worker, error) for worker, error in self.ready.items() if error]
        if failed:
            return f"aborted: worker {failed[0][0]} cannot call the endpoint: {failed[0][1]}"
        if unanswered:
            worker, gone = next(iter(unanswered.items()))
            if gone:
                return f"aborted: worker {worker} stopped reporting before the run began"
            return (f"aborted: worker {worker} did not get ready to call within "
                    f"{READY_TIMEOUT_S:g} s")
        return None

    def _ask_workers(self, runner: MasterRunner, message: str, data: Any,
                     answered: Callable[[WorkerNode], bool], timeout_s: float,
                     give_up: Callable[[], bool] = lambda: False) -> dict[str, bool]:
        """Send ``message`` to every worker (one that connects meanwhile too; not to those the run
        already gave up on) and wait until ``answered`` holds for each (or ``give_up``, or the run
        is finished). Returns those that did not answer: True for gone (missing for
        ``MISSING_GRACE_S``, or disconnected), False for those still silent at ``timeout_s``."""
        asked: set[str] = set()
        done: set[str] = set()
        gone: set[str] = set()
        missing_since: dict[str, float] = {}

        def settled() -> bool:
            now = time.monotonic()
            clients = {c.id: c for c in runner.clients.all}
            for worker in clients.keys() - asked - self.lost:
                asked.add(worker)
                runner.send_message(message, data, worker)
            waiting = False
            for worker in asked - done - gone:
                client = clients.get(worker)
                if client is None:  # it quit, or Locust dropped it
                    gone.add(worker)
                elif answered(client):
                    done.add(worker)
                elif client.state != STATE_MISSING:
                    missing_since.pop(worker, None)
                    waiting = True
                elif now - missing_since.setdefault(worker, now) >= MISSING_GRACE_S:
                    gone.add(worker)
                else:  # missing for now: a starved worker comes back
                    waiting = True
            return not waiting or self.finished or give_up()

        wait_until(settled, timeout_s)
        silent = asked - done - gone
        return {**{worker: True for worker in gone}, **{worker: False for worker in silent}}

    def begin(self) -> None:
        self.start = time.time()
        self.controller = Controller(self.spec.plan, self.start)
        self._progress_at = self.start

    def _runner(self) -> Runner:
        return _runner_of(self.environment)

    def step(self) -> tuple[int, str | None]:
        """Users wanted now, and the reason to stop (None: go on)."""
        assert self.controller is not None and self.start is not None
        now = time.time()
        runner = self._runner()
        if isinstance(runner, MasterRunner):
            for client in runner.clients.all:
                if client.state == STATE_MISSING and client.id not in self.lost:
                    self.lost.add(client.id)
                    self.events.append([now, "worker", f"worker {client.id} stopped reporting"])
                    return 0, (f"aborted: worker {client.id} stopped reporting "
                               f"{now - self.start:.1f} s into the run (its calls since its last "
                               "report are lost; the report holds what the workers sent)")
        if self.interrupted:
            return 0, (f"{INTERRUPTED} after {now - self.start:.1f} s (Ctrl-C or SIGTERM): the "
                       "report holds what was measured until then")
        step = self.controller.step(now)
        if step.new_phase:
            phase = self.spec.plan.phases[step.phase]
            self.events.append([now, "phase",
                                f"phase {step.phase + 1}: {phase.initial_users} users "
                                f"+{phase.spawn_rate}/min for {phase.duration_s:g}s"])
        self._progress(now)
        return step.users, (str(step.stop) if step.stop is not None else None)

    def set_users(self, users: int) -> None:
        if not self.users or self.users[-1][1] != users:
            self.users.append([time.time(), users])

    def _progress(self, now: float) -> None:
        """The live line: users, calls per second and errors since the last line."""
        if now - self._progress_at < PROGRESS_EVERY_S or self.start is None:
            return
        rows = self.samples[self._progress_count:]
        errors = sum(1 for r in rows if not 200 <= r[3] < 300)
        self._progress_errors += errors
        users = self.users[-1][1] if self.users else 0
        print(f"mme loadtest: {now - self.start:6.1f} s  users {users:4d}  "
              f"{len(rows) / (now - self._progress_at):8.1f} calls/s  errors {errors} "
              f"({self._progress_errors} in all)", file=sys.stderr, flush=True)
        self._progress_at, self._progress_count = now, len(self.samples)

    # -- the end --
    def drain(self) -> str | None:
        """Every worker stops calling and sends its last calls; the master waits for them (a
        worker marked missing too: see ``_ask_workers``). Returns the abort reason when a worker
        never sent them, so the report does not lack calls without saying so."""
        self.draining = True
        runner = self._runner()
        if not isinstance(runner, MasterRunner):
            if ENGINE is not None:
                self.left_in_flight("this process", ENGINE.drain())
            return None
        unanswered = self._ask_workers(runner, DRAIN, None, lambda c: c.id in self.drained,
                                       self.spec.drain_timeout_s + 10)
        reason = None
        for worker in unanswered:
            now = time.time()
            self.events.append([now, "worker", f"worker {worker} stopped reporting before it "
                                               "sent its last calls"])
            reason = reason or (
                f"aborted: worker {worker} stopped reporting {now - (self.start or now):.1f} s "
                "into the run, as it drained (its calls since its last report are lost; the "
                "report holds what the workers sent)")
        return reason

    def left_in_flight(self, who: str, calls: int) -> None:
        """Calls still in flight when the drain timeout passed end after the result is written."""
        if calls:
            self.events.append([time.time(), "worker",
                                f"{who}: {calls} call(s) still in flight after the "
                                f"{self.spec.drain_timeout_s:g} s drain timeout, not counted"])

    def finish(self, reason: str) -> None:
        if self.finished:
            return
        self.finished = True
        end = time.time()
        self.users.append([end, 0])
        runner = self._runner()
        mode = (f"{len(runner.clients)} worker(s)" if isinstance(runner, MasterRunner)
                else "1 process")
        data = {
            "started": self.start is not None, "start_epoch": self.start or end,
            "end_epoch": end, "stop_reason": reason, "samples": self.samples,
            "users": self.users, "events": self.events, "error_messages": self.messages,
            "generator": f"locust {__version__} + boto3 ({mode})",
        }
        if self.result_path is not None:
            tmp = self.result_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            tmp.replace(self.result_path)
        if self.report_dir is not None and self.start is not None:
            from harness.loadtest.report import write_report

            result = result_from_json(data, self.spec.plan, self.spec.label)
            finish_events(result)
            paths = write_report(result, self.report_dir)
            print("mme loadtest report: " + ", ".join(str(p) for p in paths.values()),
                  file=sys.stderr)


class PlanShape(LoadTestShape):
    """The plan's phases, as Inference Recommender runs them.

    Locust asks ``tick`` about once a second; a phase that adds a user every half second, or a
    run that must abort after its first 50 failures, needs finer steps, so the tick watches the
    plan for ~1 s in 50 ms steps, applies each change to the runner itself (the first too), and
    returns the count it ended on (Locust then finds nothing to change). On a master, the first
    tick waits for the workers' engines (``Run.prepare``) before the phase clock starts.
    """

    def tick(self) -> tuple[int, float] | None:
        run = RUN
        if run is None or run.finished:
            return None
        if run.start is None:
            problem = run.prepare()
            if run.finished:  # interrupted while the workers got ready
                return None
            if problem is not None:
                run.finish(problem)
                return None
            run.begin()
        deadline = time.monotonic() + 0.95
        runner = _runner_of(run.environment)
        while True:
            users, stop = run.step()
            if stop is not None:
                lost = run.drain()
                if lost is not None and not stop.startswith(("aborted", INTERRUPTED)):
                    stop = lost  # an abort or interrupt keeps its reason (the loss is an event)
                run.finish(stop)
                return None
            rate = _spawn_rate(runner, users)
            if not run.users or run.users[-1][1] != users:
                run.set_users(users)
                runner.start(user_count=users, spawn_rate=rate)
            if time.monotonic() >= deadline:
                return users, rate
            gevent.sleep(0.05)


def _spawn_rate(runner: Runner, users: int) -> float:
    """New users all at once (within ~50 ms), under Locust's 100 per worker per second."""
    workers = len(runner.clients) if isinstance(runner, MasterRunner) else 1
    return float(min(max(users, 1) * 20, 100 * max(workers, 1)))


class SageMakerUser(User):
    """One simulated client: ``InvokeEndpoint`` on a TargetModel drawn from the popularity."""

    def wait_time(self) -> float:
        return ENGINE.spec.think_s if ENGINE is not None else 0.0

    @task
    def invoke(self) -> None:
        engine = ENGINE
        if engine is None or engine.draining:
            gevent.sleep(0.05)
            return
        engine.call(self.environment)


# --- wiring into Locust's events -------------------------------------------------------------

_Listener = TypeVar("_Listener", bound=Callable[..., None])


def _on(hook: EventHook) -> Callable[[_Listener], _Listener]:
    """``@hook.add_listener`` with the listener's type kept (Locust's EventHook is unannotated)."""
    def register(listener: _Listener) -> _Listener:
        hook.add_listener(listener)
        return listener
    return register


def _runner_of(environment: Environment) -> Runner:
    runner = environment.runner
    assert runner is not None, "Locust makes its runner before it fires any event"
    return runner


@_on(events.init_command_line_parser)
def _arguments(parser: LocustArgumentParser) -> None:
    group = parser.add_argument_group("mme load test")
    group.add_argument("--mme-plan", default="", help="the load-test spec (JSON) to run")
    group.add_argument("--mme-result", default="", help="where to write what was measured")
    group.add_argument("--mme-report", default="",
                       help="write report.json/.md/.png into this folder when the run ends")


def _refuse(message: str) -> NoReturn:
    print(f"mme loadtest: {message}", file=sys.stderr)
    sys.exit(2)


@_on(events.init)
def _init(environment: Environment, **_: Any) -> None:
    global ENGINE, RUN
    options = environment.parsed_options
    runner = environment.runner
    if isinstance(runner, WorkerRunner):  # the plan comes from the master, and the stop timeout
        runner.register_message(PREPARE, _on_prepare)
        runner.register_message(DRAIN, _on_drain)
        return
    if options is None or not options.mme_plan:
        _refuse("give the load-test spec with --mme-plan FILE (mme loadtest writes one)")
    try:
        text = Path(options.mme_plan).read_text()
        spec = Spec.parse(text)
    except (OSError, PlanError) as exc:  # refused before any load is sent
        _refuse(f"{options.mme_plan}: {exc}")
    options.mme_spec = text  # Locust sends custom options to each worker with every spawn
    # A user that a phase's ramp-down stops finishes the call it has in flight, and the call is
    # counted; Locust's default kills it mid-call: the endpoint served it, the report would not
    # know. Locust's spawner waits for it, so the next user-count change can come up to that
    # call's length late.
    environment.stop_timeout = user_stop_timeout(environment.stop_timeout)
    RUN = Run(environment, spec, Path(options.mme_result) if options.mme_result else None,
              Path(options.mme_report) if options.mme_report else None, spec_text=text)
    if isinstance(runner, MasterRunner):
        runner.register_message(READY, _on_ready)
        runner.register_message(DRAINED, _on_drained)
    else:
        from botocore.exceptions import BotoCoreError

        try:
            ENGINE = LoadProcess(spec)
        except BotoCoreError as exc:  # no region, a bad endpoint URL: before any load
            _refuse(f"cannot call the endpoint: {exc}")
        ENGINE.listener = RUN
    gevent.signal_handler(END_SIGNAL, _interrupt)
    parent = os.environ.get(PARENT_ENV)
    if parent:
        gevent.spawn(_watch_parent, int(parent))


def _interrupt() -> None:
    run = RUN
    if run is None:
        return
    if run.start is None:  # not started (waiting for workers): nothing to keep
        run.finish(f"{INTERRUPTED} before any traffic was sent")
        _runner_of(run.environment).quit()
        return
    run.interrupted = True


def _watch_parent(pid: int) -> None:
    """Launched by ``mme loadtest``: end the run if it is gone (killed), not load on forever."""
    wait_until(lambda: os.getppid() != pid, math.inf, interval_s=1.0)
    _interrupt()


def _engine(environment: Environment, text: str) -> LoadProcess:
    """This worker's engine, built once, from the plan the master sent."""
    global ENGINE
    if ENGINE is None:
        runner = _runner_of(environment)
        ENGINE = LoadProcess(Spec.parse(text), seed_offset=int(getattr(runner, "worker_index", 0)))
        ENGINE.draining = DRAINING
    return ENGINE


def _on_prepare(environment: Environment, msg: Message, **_: Any) -> None:
    """The plan, before the phases: build the engine, then tell the master (or why not)."""
    from botocore.exceptions import BotoCoreError

    error = None
    try:
        _engine(environment, msg.data)
    except (BotoCoreError, PlanError, ValueError) as exc:  # no region, a bad URL: the master
        error = str(exc) or type(exc).__name__  # ends the run before any load
    _runner_of(environment).send_message(READY, {"error": error})


def _on_ready(environment: Environment, msg: Message, **_: Any) -> None:
    if RUN is not None:
        RUN.ready[msg.node_id] = (msg.data or {}).get("error")


@_on(events.test_start)
def _test_start(environment: Environment, **_: Any) -> None:
    """A worker that joins once the run has begun gets the plan with Locust's spawn message."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner) and ENGINE is None:
        options = environment.parsed_options
        text = getattr(options, "mme_spec", "")
        if not text:
            log.error("the master sent no load-test spec: is it `mme loadtest --master`?")
            return
        _engine(environment, text)


@_on(events.report_to_master)
def _report(client_id: str, data: dict[str, Any], **_: Any) -> None:
    if ENGINE is not None:
        data["mme"] = ENGINE.take()


@_on(events.worker_report)
def _worker_report(client_id: str, data: dict[str, Any], **_: Any) -> None:
    batch = data.get("mme")
    if RUN is not None and batch:
        RUN.add(batch["samples"], batch["messages"])


def _on_drain(environment: Environment, msg: Message, **_: Any) -> None:
    global DRAINING
    DRAINING = True

    def drain() -> None:
        if ENGINE is not None:
            in_flight = ENGINE.drain()
            batch = {**ENGINE.take(), "in_flight": in_flight}
        else:
            batch = {"samples": [], "messages": {}, "in_flight": 0}
        _runner_of(environment).send_message(DRAINED, batch)

    gevent.spawn(drain)


def _on_drained(environment: Environment, msg: Message, **_: Any) -> None:
    if RUN is not None:
        RUN.add(msg.data["samples"], msg.data["messages"])
        RUN.left_in_flight(f"worker {msg.node_id}", int(msg.data.get("in_flight") or 0))
        RUN.drained.add(msg.node_id)


@_on(events.test_stopping)
def _test_stopping(environment: Environment, **_: Any) -> None:
    """Locust stops the test itself when it marks every worker missing, and tells the workers to
    stop, which ends their calls in flight uncounted. While the run drains, a missing worker is
    more likely a starved one about to send its last calls: the drain (in the shape's greenlet)
    finishes first, and writes the result."""
    run = RUN
    if run is not None and run.draining and not run.finished:
        wait_until(lambda: run.finished, run.spec.drain_timeout_s + 10 + MISSING_GRACE_S)


@_on(events.test_stop)
def _test_stop(environment: Environment, **_: Any) -> None:
    """Locust stopped the test itself (its web UI's Stop, its SIGTERM, the last worker gone):
    write what was measured."""
    run = RUN
    if run is None or run.finished or isinstance(environment.runner, WorkerRunner):
        return
    runner = environment.runner
    if isinstance(runner, MasterRunner) and runner.clients and all(
            c.state == STATE_MISSING for c in runner.clients.all):
        reason = "aborted: every worker stopped reporting (the report holds what they sent)"
        gevent.spawn_later(0.1, runner.quit)  # headless Locust would otherwise wait on
    else:
        elapsed = time.time() - run.start if run.start else 0.0
        reason = (f"{INTERRUPTED} after {elapsed:.1f} s (stopped in Locust): the report "
                  "holds what was measured until then")
    run.finish(reason)


@_on(events.quitting)
def _quitting(environment: Environment, **_: Any) -> None:
    _test_stop(environment)


_warm_up_boto3()
