"""``mme bench async``: an asynchronous request's own overhead against a synchronous call of
the same model in the same run, then a burst of queued requests drained with none lost.

One ``mme serve`` (its own process) with moto's S3 server (its own process) as the store of the
model, the inputs and the results; one Triton single model (a small Python model) behind two
endpoints of the same model: a real-time one and an asynchronous one
(``AsyncInferenceConfig``). Measured in one run:

- sequential calls, one at a time: InvokeEndpoint's latency (client), and for
  InvokeEndpointAsync the 202's latency (client) and the server's ``TotalProcessingTime``
  (received to result written in S3) against the synchronous call's ``ModelLatency`` +
  ``OverheadLatency``: the difference is what accepting, queueing and writing the result adds;
- a burst: ``--inline`` requests with the body inline and ``--s3-inputs`` with an
  ``InputLocation``, sent at once, then every result read back from S3 and checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from harness.live_endpoint import EmulatorProcess
from mme.bench_coldstart import Moto

BUCKET = "mme-bench-async"


def _body(i: int) -> bytes:
    return json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                   "data": [float(i), 1.0, 2.0, 3.0]}]}).encode()


def _expected(i: int) -> list[float]:
    return [2.0 * i, 2.0, 4.0, 6.0]


def _deploy(url: str, concurrency: int) -> None:
    import boto3

    sm = boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    sm.create_model(ModelName="scale", PrimaryContainer={
        "Image": "triton", "Mode": "SingleModel",
        "ModelDataUrl": f"s3://{BUCKET}/models/scale.tar.gz"})
    variants = [{"VariantName": "AllTraffic", "ModelName": "scale",
                 "InstanceType": "ml.m5.xlarge", "InitialInstanceCount": 1}]
    sm.create_endpoint_config(EndpointConfigName="sync", ProductionVariants=variants)
    sm.create_endpoint_config(EndpointConfigName="async", ProductionVariants=variants,
                              AsyncInferenceConfig={
                                  "ClientConfig": {
                                      "MaxConcurrentInvocationsPerInstance": concurrency},
                                  "OutputConfig": {"S3OutputPath": f"s3://{BUCKET}/out/"}})
    for name in ("sync", "async"):
        sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    for name in ("sync", "async"):
        sm.get_waiter("endpoint_in_service").wait(
            EndpointName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 300})


def _metric(url: str, endpoint: str, name: str, since: float) -> float:
    """The average of ``name`` (EndpointName, VariantName) since ``since``."""
    import boto3

    cw = boto3.client("cloudwatch", endpoint_url=url, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    points = cw.get_metric_statistics(
        Namespace="AWS/SageMaker", MetricName=name, Period=60,
        Dimensions=[{"Name": "EndpointName", "Value": endpoint},
                    {"Name": "VariantName", "Value": "AllTraffic"}],
        StartTime=since - 60, EndTime=time.time() + 60,
        Statistics=["Sum", "SampleCount"])["Datapoints"]
    count = sum(p["SampleCount"] for p in points)
    return sum(p["Sum"] for p in points) / count if count else float("nan")


async def _sequential(url: str, s3: Any, calls: int) -> tuple[list[float], list[float]]:
    """``calls`` synchronous calls, then ``calls`` asynchronous ones, each waited for (its
    result in S3) before the next; the client's latencies in ms (the sync calls', the 202's)."""
    sync_ms, accept_ms = [], []
    async with aiohttp.ClientSession() as session:
        for i in range(calls + 5):  # 5 to warm up
            started = time.perf_counter()
            async with session.post(f"{url}/endpoints/sync/invocations", data=_body(i),
                                    headers={"Content-Type": "application/json"}) as resp:
                answer = await resp.json(content_type=None)
            if json.loads(json.dumps(answer))["outputs"][0]["data"] != _expected(i):
                raise RuntimeError(f"wrong answer: {answer}")
            if i >= 5:
                sync_ms.append((time.perf_counter() - started) * 1e3)
        for i in range(calls):
            started = time.perf_counter()
            async with session.post(f"{url}/endpoints/async/async-invocations", data=_body(i),
                                    headers={"X-Amzn-SageMaker-Content-Type": "application/json",
                                             "X-Amzn-SageMaker-Inference-Id": f"seq-{i}"}) as r:
                if r.status != 202:
                    raise RuntimeError(f"InvokeEndpointAsync answered {r.status}: "
                                       f"{await r.text()}")
                await r.read()
            accept_ms.append((time.perf_counter() - started) * 1e3)
            while not await asyncio.to_thread(_exists, s3, f"out/seq-{i}.out"):
                await asyncio.sleep(0.002)
    return sync_ms, accept_ms


def _exists(s3: Any, key: str) -> bool:
    try:
        s3.head_object(Bucket=BUCKET, Key=key)
        return True
    except Exception:  # noqa: BLE001 - not there yet
        return False


async def _burst(url: str, inline: int, s3_inputs: int, clients: int) -> list[str]:
    """Every request sent, ``clients`` at a time; their InferenceIds."""
    ids: list[str] = []
    jobs = asyncio.Queue[int]()
    for i in range(inline + s3_inputs):
        jobs.put_nowait(i)

    async def client(session: aiohttp.ClientSession) -> None:
        while not jobs.empty():
            i = jobs.get_nowait()
            headers = {"X-Amzn-SageMaker-Content-Type": "application/json",
                       "X-Amzn-SageMaker-Inference-Id": f"burst-{i}"}
            body = _body(i)
            if i >= inline:
                headers["X-Amzn-SageMaker-InputLocation"] = f"s3://{BUCKET}/in/{i}.json"
                body = b""
            async with session.post(f"{url}/endpoints/async/async-invocations", data=body,
                                    headers=headers) as resp:
                if resp.status != 202:
                    raise RuntimeError(f"InvokeEndpointAsync answered {resp.status}: "
                                       f"{await resp.text()}")
                ids.append((await resp.json(content_type=None))["InferenceId"])

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return ids


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def run(args: argparse.Namespace) -> int:
    from ensembles.packaging import package
    from harness.testmodels import write_scale_model

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with tempfile.TemporaryDirectory(prefix="mme-bench-async-") as tmp:
        work = Path(tmp)
        moto = Moto(work, "mme bench async")
        server: EmulatorProcess | None = None
        try:
            s3 = moto.client()
            s3.create_bucket(Bucket=BUCKET)
            write_scale_model(work / "repo", "scale", scale=2.0)
            tarball = package(work / "repo", work / "scale.tar.gz")
            s3.upload_file(str(tarball), BUCKET, "models/scale.tar.gz")
            total = args.inline + args.s3_inputs
            for i in range(args.inline, total):
                s3.put_object(Bucket=BUCKET, Key=f"in/{i}.json", Body=_body(i))
            server = EmulatorProcess({
                "MME_S3_ENDPOINT_URL": moto.url, "MME_CACHE_DIR": str(work / "cache"),
                "MME_LOG_LEVEL": "WARNING", "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing"}, work / "serve.log").start()
            _deploy(server.url, args.concurrency)
            since = time.time()
            sync_ms, accept_ms = asyncio.run(_sequential(server.url, s3, args.calls))
            model_us = _metric(server.url, "sync", "ModelLatency", since)
            overhead_us = _metric(server.url, "sync", "OverheadLatency", since)
            total_ms = _metric(server.url, "async", "TotalProcessingTime", since)
            backlog_us = _metric(server.url, "async", "TimeInBacklog", since)
            upload_us = _metric(server.url, "async", "ResponseUploadLatency", since)
            sync_server_ms = (model_us + overhead_us) / 1e3
            print(f"One Triton single model (a Python model, x2) behind a real-time and an "
                  f"asynchronous endpoint; moto's S3 server; {args.calls} calls of each, one at "
                  "a time.")
            print(f"{'':<44}{'p50 ms':>9}{'mean ms':>9}")
            print(f"{'InvokeEndpoint, client':<44}{_percentile(sync_ms, 50):>9.2f}"
                  f"{statistics.mean(sync_ms):>9.2f}")
            print(f"{'InvokeEndpoint, server (model + overhead)':<44}{'':>9}"
                  f"{sync_server_ms:>9.2f}")
            print(f"{'InvokeEndpointAsync 202, client':<44}{_percentile(accept_ms, 50):>9.2f}"
                  f"{statistics.mean(accept_ms):>9.2f}")
            print(f"{'InvokeEndpointAsync received -> in S3, server':<44}{'':>9}"
                  f"{total_ms:>9.2f}")
            print(f"{'  of which: waiting in the queue':<44}{'':>9}{backlog_us / 1e3:>9.2f}")
            print(f"{'  of which: writing the result to S3':<44}{'':>9}{upload_us / 1e3:>9.2f}")
            print(f"async's own overhead (server): {total_ms - sync_server_ms:.2f} ms per "
                  f"request, x{total_ms / sync_server_ms:.2f} the synchronous call's time")

            started = time.perf_counter()
            ids = asyncio.run(_burst(server.url, args.inline, args.s3_inputs, args.clients))
            accepted_s = time.perf_counter() - started
            keys = {f"out/{i}.out" for i in ids}

            def listed() -> set[str]:
                found: set[str] = set()
                for page in s3.get_paginator("list_objects_v2").paginate(
                        Bucket=BUCKET, Prefix="out/burst-"):
                    found |= {o["Key"] for o in page.get("Contents", [])}
                return found

            deadline = time.monotonic() + args.timeout
            while not keys <= (done := listed()) and time.monotonic() < deadline:
                time.sleep(0.2)
            drained_s = time.perf_counter() - started
            wrong = 0
            for i in range(total):
                body = s3.get_object(Bucket=BUCKET, Key=f"out/burst-{i}.out")["Body"].read() \
                    if f"out/burst-{i}.out" in done else None
                if body is None or json.loads(body)["outputs"][0]["data"] != _expected(i):
                    wrong += 1
            lost = len(keys - done)
            print(f"burst: {len(ids)} requests ({args.inline} inline, {args.s3_inputs} from S3) "
                  f"accepted in {accepted_s:.2f} s ({len(ids) / accepted_s:.0f}/s, "
                  f"{args.clients} clients); all answered in S3 after {drained_s:.2f} s "
                  f"({len(ids) / drained_s:.0f}/s); lost {lost}, wrong {wrong - lost}")
            return 0 if lost == 0 and wrong == 0 and len(ids) == total else 1
        finally:
            if server is not None:
                server.stop()
            moto.stop()


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``mme bench async``."""
    p = commands.add_parser(
        "async", help="an asynchronous request's own overhead vs a synchronous call of the "
                      "same model, then a burst of queued requests drained with none lost")
    p.add_argument("--calls", type=int, default=50, help="sequential calls of each kind")
    p.add_argument("--inline", type=int, default=800, help="burst requests with inline bodies")
    p.add_argument("--s3-inputs", type=int, default=200,
                   help="burst requests with an InputLocation")
    p.add_argument("--clients", type=int, default=16, help="concurrent senders of the burst")
    p.add_argument("--concurrency", type=int, default=4,
                   help="MaxConcurrentInvocationsPerInstance")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the drain")
    p.set_defaults(func=run)
