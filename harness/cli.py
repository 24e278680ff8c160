"""``mme loadtest`` and ``mme sweep`` (added to the ``mme`` command by ``mme/cli.py``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.loadtest.config import LoadPlan
    from harness.payloads import Request

DEFAULT_PHASE = "1:0:60"


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_loadtest(subparsers)
    _add_sweep(subparsers)


def _add_plan_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("traffic (Inference Recommender's TrafficPattern/StoppingConditions)")
    g.add_argument(
        "--config",
        type=Path,
        help="JSON with TrafficPattern and StoppingConditions, as in "
        "CreateInferenceRecommendationsJob (InputConfig accepted)",
    )
    g.add_argument(
        "--phase",
        action="append",
        metavar="USERS:SPAWN_PER_MIN:SECONDS",
        help="a traffic phase: USERS from the start, SPAWN_PER_MIN more users each minute, for "
        f"SECONDS (USERS:SECONDS: no spawning); repeat for several (default {DEFAULT_PHASE})",
    )
    g.add_argument(
        "--max-invocations",
        type=int,
        help="stop once the endpoint serves this many invocations per minute",
    )
    g.add_argument(
        "--latency-threshold",
        action="append",
        metavar="PNN:MS",
        help="stop once this ModelLatency percentile exceeds MS, e.g. P95:100 (judged over "
        "the last 60 s once 5 s and 20 warm calls are in; a call that loaded its model is "
        "not counted)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed for model choice (0)")
    g = p.add_argument_group("payload")
    g.add_argument("--inputs", type=Path, help=".npz of input tensors (name -> array)")
    g.add_argument("--body", type=Path, help="a raw request body file (with --content-type)")
    g.add_argument("--content-type", help="Content-Type of --body")
    g.add_argument(
        "--json",
        dest="binary",
        action="store_false",
        help="send JSON tensors instead of binary+json",
    )
    g.add_argument("--batch-size", type=int, default=1, help="batch size of generated inputs (1)")
    g = p.add_argument_group("emulator started for the run (ignored with --url)")
    g.add_argument("--launcher", choices=["embedded", "docker", "external"])
    g.add_argument("--memory-budget", help="e.g. 2GiB")
    g.add_argument("--max-loaded-models", type=int)
    g.add_argument("--instances", type=int, help="instances (the budgets are per instance)")
    p.add_argument("--out", type=Path, help="report folder (default ./mme-<command>-<time>)")
    p.add_argument("--no-png", action="store_true", help="skip the PNG plot")


def _add_loadtest(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "loadtest",
        help="phased load against an endpoint, Inference Recommender style",
        description="Closed-loop load on Locust (boto3 InvokeEndpoint users, retries off) over "
        "one or many TargetModels, with a report: invocations/minute, ModelLatency and "
        "OverheadLatency percentiles, errors by code, cold starts, cache hit ratio and loaded "
        "models over time (JSON, Markdown, PNG). One process by default; --processes N for "
        "the cores of this machine; --master/--worker for many machines.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", help="an emulator already running at this URL")
    where.add_argument(
        "--model-data",
        nargs="+",
        type=Path,
        metavar="STORE",
        help="start an emulator for this store: a folder of .tar.gz, tarballs "
        "or model repositories",
    )
    where.add_argument(
        "--aws",
        action="store_true",
        help="a real endpoint via boto3 (credentials and region from the session)",
    )
    p.add_argument("--endpoint-name", help="endpoint name (local; with --trace: the trace's "
                                           "own endpoint for each call)")
    p.add_argument(
        "--target-model",
        action="append",
        help="TargetModel to invoke; repeat for several (default: every tarball in --model-data)",
    )
    p.add_argument(
        "--popularity",
        default="uniform",
        help="how requests spread over the TargetModels: uniform or zipf[:S] (uniform)",
    )
    _add_plan_arguments(p)
    g = p.add_argument_group("replay (docs/record-replay.md)")
    g.add_argument("--trace", nargs="+", metavar="FILE",
                   help="instead of phases: replay these calls at their own times: a recording "
                        "of mme serve --record, or SageMaker data-capture JSON Lines (files, "
                        "folders or s3://bucket/prefix); every line is checked before any call "
                        "is sent")
    g.add_argument("--speed", type=float, default=1.0,
                   help="with --trace: replay N times faster (10: a minute in 6 s; default 1)")
    p.add_argument("--report-format", choices=("mme", "aiperf"), default="mme",
                   help="aiperf: also write the report as aiperf's profile export "
                        "(profile_export_aiperf.json) so one dashboard reads both")
    g = p.add_argument_group("auto scaling (instance counts and scaling activities are plotted)")
    g.add_argument("--autoscale", metavar="MIN:MAX:TARGET[:IN_COOLDOWN:OUT_COOLDOWN]",
                   help="register the variant AllTraffic with Application Auto Scaling and a "
                        "target tracking policy on SageMakerVariantInvocationsPerInstance first")
    g.add_argument("--think-time", type=float, default=0.0,
                   help="seconds each user waits between requests (0): paced users keep a low "
                        "phase low, so the endpoint can scale in")
    g.add_argument("--clock-scale", type=float,
                   help="the started emulator's clock scale (60: a minute per second)")
    g = p.add_argument_group("asynchronous inference (an endpoint with AsyncInferenceConfig)")
    g.add_argument("--async", dest="async_mode", action="store_true",
                   help="call InvokeEndpointAsync (the payload inline, at most 128,000 bytes) "
                   "and measure the time to the result in S3 (HeadObject on OutputLocation "
                   "and FailureLocation); the users of --phase for its seconds, no Locust")
    g.add_argument("--s3-endpoint-url", metavar="URL",
                   help="the S3 server the endpoint writes its results to (--async; default: "
                   "AWS's, or AWS_ENDPOINT_URL_S3)")
    g.add_argument("--result-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="a result not in S3 this long after its call counts as unfinished "
                   "(--async; 300)")
    g = p.add_argument_group("Locust: the engine (one process by default)")
    g.add_argument("--processes", type=int, metavar="N",
                   help="N Locust worker processes on this machine under a local master "
                        "(-1: one per core)")
    g.add_argument("--master", action="store_true",
                   help="wait for --expect-workers workers (mme loadtest --worker on other "
                        "machines); they get the plan from here, this writes the report")
    g.add_argument("--expect-workers", type=int, default=1, metavar="N",
                   help="workers the master waits for before it starts (1)")
    g.add_argument("--master-bind-port", type=int, metavar="PORT",
                   help="the master's port (Locust's 5557)")
    g.add_argument("--worker", action="store_true",
                   help="be a worker of a master at --master-host: no plan or target here")
    g.add_argument("--master-host", metavar="HOST", help="the master a --worker connects to")
    g.add_argument("--master-port", type=int, metavar="PORT",
                   help="the master's port for --worker (Locust's 5557)")
    g.add_argument("--web", action="store_true",
                   help="Locust's web UI while it runs (started at once, closed at the end)")
    g.add_argument("--web-port", type=int, metavar="PORT", help="the web UI's port (8089)")
    g.add_argument("--write-spec", type=Path, metavar="FILE",
                   help="write the plan, target and payload for plain `locust -f "
                        "harness/locustfile.py --mme-plan FILE` and exit")
    p.set_defaults(func=run_loadtest)


def _add_sweep(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="the same load on variants of a model's config.pbtxt",
        description="Package each config.pbtxt variant as its own TargetModel, run the same load "
        "on each, and print a comparison table (configuration, invocations/minute, "
        "p50/p90/p99, ratio to the unmodified base).",
    )
    p.add_argument("repository", type=Path, help="a Triton model repository")
    p.add_argument(
        "--model", help="the model whose config varies (default: the only non-ensemble model)"
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="keys: dynamic_batching=on|off, preferred=4/8, delay_us=N, "
        "instances=N, max_batch_size=N. Repeat for several.",
    )
    p.add_argument("--variants", type=Path, help='JSON {"name": {"preferred": [4, 8], ...}}')
    _add_plan_arguments(p)
    p.set_defaults(func=run_sweep)


def _plan(args: argparse.Namespace, targets: list[str | None],
          popularity: str = "uniform") -> LoadPlan:
    from harness.loadtest import config as load_config
    from harness.loadtest.config import LoadPlan, PlanError, StoppingConditions

    pop = load_config.Popularity.parse(popularity)
    if args.config:
        try:
            plan = load_config.plan_from_api(
                json.loads(args.config.read_text()),
                target_models=targets,
                popularity=pop,
                seed=args.seed,
            )
        except PlanError as exc:
            raise PlanError(f"{args.config}: {exc}") from exc
        except (OSError, KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise PlanError(f"{args.config}: not a load plan ({what}); expected "
                            "TrafficPattern.Phases and StoppingConditions as in "
                            "CreateInferenceRecommendationsJob") from exc
    else:
        plan = LoadPlan(
            phases=tuple(load_config.parse_phase(s) for s in args.phase or [DEFAULT_PHASE]),
            target_models=tuple(targets),
            popularity=pop,
            seed=args.seed,
        )
    if args.max_invocations is not None or args.latency_threshold:
        plan = LoadPlan(
            phases=plan.phases,
            stopping=StoppingConditions(
                max_invocations=args.max_invocations
                if args.max_invocations is not None
                else plan.stopping.max_invocations,
                latency_thresholds=tuple(load_config.parse_threshold(t)
                                         for t in args.latency_threshold)
                if args.latency_threshold
                else plan.stopping.latency_thresholds,
            ),
            target_models=plan.target_models,
            popularity=plan.popularity,
            seed=plan.seed,
        )
    return plan


def _request(args: argparse.Namespace, tarball: Path | None) -> Request:
    from harness.loadtest.session import auto_request, npz_request
    from harness.payloads import Request

    if args.body:
        if not args.content_type:
            raise SystemExit("--body needs --content-type")
        return Request(args.body.read_bytes(), args.content_type)
    if args.inputs:
        return npz_request(args.inputs, binary=args.binary)
    if tarball is None:
        raise SystemExit("give the payload with --inputs FILE.npz or --body FILE --content-type")
    return auto_request(tarball, binary=args.binary, batch_size=args.batch_size)


def _out_dir(args: argparse.Namespace, command: str) -> Path:
    return args.out or Path(f"mme-{command}-{time.strftime('%Y%m%d-%H%M%S')}")


def run_loadtest(args: argparse.Namespace) -> int:
    """0 when the run ended as planned (phases or a stopping condition), 1 when it was aborted
    (every call failing, the endpoint gone), 130 when interrupted; the report is written in
    each case, with what was measured."""
    from harness.loadtest.config import PlanError
    from harness.loadtest.locust_run import EngineError, worker_main
    from harness.loadtest.report import summarize, to_markdown, write_report
    from harness.loadtest.runner import INTERRUPTED
    from harness.model_store import StoreError, prepare_store, store_digests

    if args.worker:  # everything else comes from the master
        if not args.master_host:
            print("mme loadtest: --worker needs --master-host HOST", file=sys.stderr)
            return 2
        return worker_main(args.master_host, args.master_port, args.processes)
    if args.trace:
        from harness.replay_cli import run_trace

        return run_trace(args)
    args.endpoint_name = args.endpoint_name or "local"
    problem = _engine_problem(args) or _async_problem(args)
    if problem:
        print(f"mme loadtest: {problem}", file=sys.stderr)
        return 2
    if args.async_mode:
        return _run_async(args)
    out = _out_dir(args, "loadtest")
    try:
        with tempfile.TemporaryDirectory(prefix="mme-loadtest-") as tmp:
            work = Path(tmp)
            store = prepare_store(args.model_data, work / "store") if args.model_data else None
            targets: list[str | None] = list(args.target_model or [])
            if not targets and store is not None:
                targets = list(store_digests(store))
            if not targets:
                targets = [None]  # a single-model endpoint
            first = store / targets[0] if store is not None and targets[0] else None
            request = _request(args, first)
            plan = _plan(args, targets, args.popularity)
            if args.write_spec:
                return _write_spec(args, plan, request)
            result = asyncio.run(_loadtest(args, plan, request, store, work))
    except (PlanError, StoreError, ValueError) as exc:
        print(f"mme loadtest: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the load started (while the emulator was starting)
        print("mme loadtest: interrupted before any traffic was sent; no report", file=sys.stderr)
        return 130
    except EngineError as exc:
        interrupted = str(exc).startswith("interrupted")
        print(f"mme loadtest: {exc}{'; no report' if interrupted else ''}", file=sys.stderr)
        return 130 if interrupted else 1
    paths = write_report(result, out, png=not args.no_png)
    summary = summarize(result)
    if args.report_format == "aiperf":
        from harness.loadtest.aiperf_export import from_loadtest, write_export

        paths["aiperf"] = write_export(from_loadtest(result, summary), out)
    print(to_markdown(summary))
    print("report: " + ", ".join(str(p) for p in paths.values()))
    if result.stop_reason.startswith(INTERRUPTED):
        return 130
    return 1 if result.stop_reason.startswith("aborted") else 0


def _engine_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the target and engine flags, before anything starts."""
    if not (args.url or args.model_data or args.aws):
        return "give the endpoint: --url URL, --model-data STORE or --aws (or --worker)"
    if args.aws and not args.write_spec:
        import boto3

        if boto3.session.Session().region_name is None:
            return ("--aws: no AWS region (set AWS_DEFAULT_REGION or the profile's region)")
    if args.master and args.processes:
        return "--master and --processes: a master's workers are other processes (--worker)"
    if args.master and args.expect_workers < 1:
        return "--expect-workers must be at least 1"
    if args.processes is not None and (args.processes == 0 or args.processes < -1):
        return "--processes N: N workers, or -1 for one per core"
    return None


def _async_problem(args: argparse.Namespace) -> str | None:
    """What ``--async`` cannot be combined with, before anything starts."""
    if not args.async_mode:
        return None
    if args.model_data:
        return ("--async needs --url or --aws: the endpoint --model-data starts is a multi-model "
                "endpoint, and those take no InvokeEndpointAsync; deploy one with "
                "AsyncInferenceConfig (docs/async-inference.md)")
    if args.target_model:
        return "--async and --target-model: an asynchronous endpoint serves one model"
    if args.processes or args.master or args.web or args.write_spec or args.autoscale:
        return "--async runs without Locust: no --processes, --master, --web, --write-spec " \
               "or --autoscale"
    if args.result_timeout <= 0:
        return "--result-timeout must be more than 0 seconds"
    if not (args.body or args.inputs):
        return "--async needs the payload: --body FILE --content-type TYPE, or --inputs FILE.npz"
    return None


def _run_async(args: argparse.Namespace) -> int:
    """``mme loadtest --async``: 0 when every accepted request was answered or failed in S3,
    1 when one was not by --result-timeout or none was accepted."""
    import boto3
    from botocore.config import Config

    from harness.loadtest import async_load
    from harness.loadtest.config import PlanError

    try:
        request = _request(args, None)
        plan = _plan(args, [None])
    except (PlanError, ValueError) as exc:
        print(f"mme loadtest: {exc}", file=sys.stderr)
        return 2
    extra: dict[str, Any] = {}
    if args.url:
        extra.update(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    runtime = boto3.client("sagemaker-runtime", endpoint_url=args.url,
                           config=Config(retries={"max_attempts": 1, "mode": "standard"},
                                         max_pool_connections=max(plan.peak_users, 10)),
                           **extra)
    s3 = boto3.client("s3", endpoint_url=args.s3_endpoint_url, **extra)
    try:
        run = async_load.run_async_load(
            runtime, s3, args.endpoint_name, request.body, request.content_type,
            plan.peak_users, plan.duration_s, think_time_s=args.think_time,
            result_timeout_s=args.result_timeout)
    except ValueError as exc:
        print(f"mme loadtest: {exc}", file=sys.stderr)
        return 2
    summary = {"endpoint_name": args.endpoint_name, "users": plan.peak_users,
               **run.summary()}
    path = async_load.write_report(summary, _out_dir(args, "loadtest"))
    print(async_load.to_markdown(summary, args.endpoint_name))
    print(f"report: {path}")
    return 0 if run.accepted and not run.unfinished else 1


def _engine(args: argparse.Namespace) -> Any:
    from harness.loadtest.locust_run import Engine

    return Engine(processes=args.processes, master=args.master,
                  expect_workers=args.expect_workers if args.master else 0,
                  master_bind_port=args.master_bind_port, web=args.web, web_port=args.web_port)


def _write_spec(args: argparse.Namespace, plan: Any, request: Any) -> int:
    from harness.loadtest.locust_run import Target, spec_json

    url = None if args.aws else (args.url.rstrip("/") if args.url else None)
    if url is None and not args.aws:
        print("mme loadtest: --write-spec needs --url or --aws (a started emulator ends with "
              "this command)", file=sys.stderr)
        return 2
    args.write_spec.write_text(spec_json(plan, Target(args.endpoint_name, url), request,
                                         think_s=args.think_time, label=args.endpoint_name))
    print(f"wrote {args.write_spec}: locust -f {Path(__file__).parent / 'locustfile.py'} "
          f"--mme-plan {args.write_spec} --mme-report REPORT_DIR")
    return 0


def _interruptible() -> asyncio.Event:
    """An event Ctrl-C (SIGINT) or SIGTERM sets, instead of raising in the middle of the run;
    a second one stops at once, as Python would."""
    import signal

    loop = asyncio.get_running_loop()
    interrupt = asyncio.Event()

    def stop() -> None:
        interrupt.set()
        print("\nmme loadtest: stopping (again to quit at once); the report follows",
              file=sys.stderr)
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop)
    return interrupt


async def _loadtest(
    args: argparse.Namespace, plan: Any, request: Any, store: Path | None, work: Path
) -> Any:
    from harness.loadtest.locust_run import Target, run_load
    from harness.loadtest.scaling import ScalingWatch, autoscale
    from harness.loadtest.session import emulator, emulator_settings, run_http

    def scaling(url: str | None) -> ScalingWatch:
        if args.autoscale:
            autoscale(args.endpoint_name, args.autoscale, url)
        return ScalingWatch(args.endpoint_name, url)

    extra: dict[str, Any] = {"think_s": args.think_time, "engine": _engine(args)}
    if args.web:
        print(f"mme loadtest: Locust's web UI at http://localhost:{args.web_port or 8089}",
              file=sys.stderr)
    if args.aws:
        extra["interrupt"] = _interruptible()
        return await run_load(plan, Target(args.endpoint_name), request,
                              label=args.endpoint_name, scaling=scaling(None), **extra)
    if args.url:
        url = args.url.rstrip("/")
        extra["interrupt"] = _interruptible()
        return await run_http(url, args.endpoint_name, plan, request, label=args.endpoint_name,
                              scaling=scaling(url), **extra)
    assert store is not None
    with emulator(store, work, emulator_settings(args), args.endpoint_name) as url:
        # Once the emulator serves: while it starts, Ctrl-C stops the start at once.
        extra["interrupt"] = _interruptible()
        return await run_http(url, args.endpoint_name, plan, request, label=args.endpoint_name,
                              scaling=scaling(url), **extra)


def run_sweep(args: argparse.Namespace) -> int:
    from harness.loadtest.config import PlanError
    from harness.loadtest.report import write_report
    from harness.loadtest.session import auto_request, emulator, emulator_settings, npz_request
    from harness.model_config import ModelRepositoryError
    from harness.sweep import (
        BASE,
        build_variant_store,
        comparison_table,
        load_variants_file,
        parse_variant,
        run_variants,
    )

    out = _out_dir(args, "sweep")
    try:
        variants = [BASE, *(parse_variant(v) for v in args.variant)]
        if args.variants:
            variants += load_variants_file(args.variants)
        if len(variants) == 1:
            print(
                "mme sweep: no --variant given; measuring the base configuration only",
                file=sys.stderr,
            )
        work = out / "work"
        tarballs = build_variant_store(args.repository, variants, work, args.model)
        if args.inputs:
            request = npz_request(args.inputs, binary=args.binary)
        else:
            request = auto_request(
                tarballs[BASE.name], binary=args.binary, batch_size=args.batch_size
            )

        def plan_for(target: str) -> Any:
            return _plan(args, [target])

        plan_for(f"{BASE.name}.tar.gz")  # validate the plan before starting anything

        def progress(row: Any, result: Any) -> None:
            write_report(result, out / row.variant.name, png=not args.no_png)
            print(f"{row.variant.name}: {row.throughput:.0f} invocations/min", file=sys.stderr)

        async def go(url: str) -> Any:
            return await run_variants(url, "local", variants, plan_for, request, on_result=progress)

        with emulator(work / "store", work, emulator_settings(args)) as url:
            rows = asyncio.run(go(url))
    except (PlanError, ModelRepositoryError) as exc:
        print(f"mme sweep: {exc}", file=sys.stderr)
        return 2
    table = comparison_table(rows)
    (out / "sweep.md").write_text(table)
    (out / "sweep.json").write_text(
        json.dumps(
            [
                {
                    "configuration": r.variant.name,
                    "settings": r.variant.describe(),
                    "summary": {k: v for k, v in r.summary.items() if k != "timeline"},
                }
                for r in rows
            ],
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(table)
    print(f"reports: {out}")
    return 0
