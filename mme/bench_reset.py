"""``mme bench reset``: how long a reset and a restore take on a fleet.

A server (``mme serve`` in its own process) with ``--endpoints`` endpoints of models created
through the control plane, ``--models-per-endpoint`` TargetModels loaded on each and
``--alarms`` CloudWatch alarms; its snapshot is taken ``--with-models``. Then, each timed:

- ``POST /_emulator/reset``: every endpoint stopped (every Triton gone), everything removed;
- ``POST /_emulator/snapshot`` of that snapshot into the empty server: every endpoint started
  and every model loaded again (a warm fleet);
- ``mme serve --restore DIR`` of the same snapshot saved as a folder: from the command to the
  first ``/ping`` answered, which comes once the fleet is warm.

The figures are printed, never asserted: they depend on the machine (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

ROLE = "arn:aws:iam::123456789012:role/bench"


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "reset", help="a reset, a restore and a restart from a snapshot of a fleet, timed")
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--models-per-endpoint", type=int, default=2)
    parser.add_argument("--alarms", type=int, default=50)
    parser.set_defaults(func=run)


def _clients(url: str) -> tuple[Any, Any, Any]:
    import boto3
    from botocore.config import Config

    kwargs: dict[str, Any] = {"endpoint_url": url, "region_name": "us-east-1",
                              "aws_access_key_id": "bench", "aws_secret_access_key": "bench",
                              "config": Config(retries={"max_attempts": 1})}
    return (boto3.client("sagemaker", **kwargs), boto3.client("sagemaker-runtime", **kwargs),
            boto3.client("cloudwatch", **kwargs))


def _fleet(url: str, store: Path, endpoints: int, targets: list[str], alarms: int) -> None:
    """The endpoints (created at once, then awaited), each model loaded by a call, the alarms."""
    import json

    sm, runtime, cloudwatch = _clients(url)
    names = [f"ep-{k}" for k in range(endpoints)]
    for name in names:
        sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer={
            "Image": "triton", "Mode": "MultiModel", "ModelDataUrl": store.as_uri() + "/"})
        sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.m5.xlarge",
            "InitialInstanceCount": 1}])
        sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    body = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                   "data": [1, 2, 3, 4]}]})
    for name in names:
        sm.get_waiter("endpoint_in_service").wait(
            EndpointName=name, WaiterConfig={"Delay": 0.25, "MaxAttempts": 2400})
        for target in targets:
            runtime.invoke_endpoint(EndpointName=name, TargetModel=target,
                                    ContentType="application/json", Body=body)
    for k in range(alarms):
        cloudwatch.put_metric_alarm(
            AlarmName=f"alarm-{k}", Namespace="AWS/SageMaker", MetricName="Invocations",
            Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=1000,
            ComparisonOperator="GreaterThanThreshold",
            Dimensions=[{"Name": "EndpointName", "Value": names[k % len(names)]},
                        {"Name": "VariantName", "Value": "AllTraffic"}])


def run(args: argparse.Namespace) -> int:
    from ensembles.packaging import package
    from harness.live_endpoint import EmulatorProcess
    from harness.server_state import ServerState
    from harness.testmodels import write_scale_model

    targets = [f"m{k}.tar.gz" for k in range(args.models_per_endpoint)]
    loaded = args.endpoints * len(targets)
    print(f"{args.endpoints} endpoints (one instance, one Triton each), {loaded} loaded models "
          f"(small Python models, {len(targets)} per endpoint), {args.alarms} alarms; "
          "`mme serve` in its own process")
    with tempfile.TemporaryDirectory(prefix="mme-bench-reset-") as tmp:
        work = Path(tmp)
        for k, target in enumerate(targets):
            package(write_scale_model(work / "repos" / f"m{k}", f"model{k}", scale=k + 1),
                    work / "store" / target, "folder")
        flags = ["--log-level", "WARNING"]
        server = EmulatorProcess({}, work / "serve.log",
                                 flags=[*flags, "--cache-dir", str(work / "cache")]).start()
        try:
            _fleet(server.url, work / "store", args.endpoints, targets, args.alarms)
            state = ServerState(server.url)
            snapshot = state.snapshot(with_models=True)
            state.save(work / "snapshot", with_models=True)
            started = time.perf_counter()
            removed = state.reset()
            reset_s = time.perf_counter() - started
            started = time.perf_counter()
            restored = state.restore(snapshot)
            restore_s = time.perf_counter() - started
            state.reset()
        finally:
            server.stop()
        started = time.perf_counter()
        again = EmulatorProcess({}, work / "restart.log", flags=[
            *flags, "--cache-dir", str(work / "cache-2"), "--restore", str(work / "snapshot")])
        again.start()
        try:
            restart_s = time.perf_counter() - started
            warm = sum(1 for e in ServerState(again.url).snapshot(True)["loaded_models"] or [])
        finally:
            again.stop()
    print(f"{'step':<52}{'seconds':>9}")
    print(f"{'reset (' + str(removed['stopped_endpoints']) + ' endpoints stopped)':<52}"
          f"{reset_s:>9.2f}")
    print(f"{'restore, warm (' + str(restored['loaded_models']) + ' model loads)':<52}"
          f"{restore_s:>9.2f}")
    print(f"{'mme serve --restore to its first answer (' + str(warm) + ' loaded)':<52}"
          f"{restart_s:>9.2f}")
    failed = restored["failed_models"]
    for failure in failed:
        print(f"not loaded: {failure}")
    return 0 if not failed and restored["loaded_models"] == loaded == warm else 1
