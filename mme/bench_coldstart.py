"""``mme bench coldstart``: the first invocation of a large model from a real HTTP S3 server.

A model with ``--size-mib`` of incompressible weights is packaged as a ``.tar.gz`` and put on
moto's S3 server (its own process). Measured in one run, on the same object:

- download alone: boto3's ``download_file`` to a file (what the emulator did before);
- extract alone: the emulator's extraction of that file;
- load alone: the model unloaded, then invoked again (its files are on disk: only the load);
- cold start now: a fresh emulator's first invocation (the download streamed into extraction);
- cold start before: a fresh emulator copying the archive to disk, then extracting it.

Prints the breakdown and cold start / (download + extract + load).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from emulator.processes import stop_process, stopped_on_failure, wait_until
from mme.bench_scale import BODY, Server, serve

TARGET = "big.tar.gz"
BUCKET = "mme-coldstart"
# The server as before: the archive is copied to disk, then extracted.
COPY_THEN_EXTRACT = {"MME_STREAM_DOWNLOADS": "false"}


def build_model(work: Path, size_mib: int) -> Path:
    from harness.testmodels import write_scale_model

    folder = write_scale_model(work / "repo", "big")
    with (folder / "1" / "weights.bin").open("wb") as out:
        for _ in range(size_mib):
            out.write(os.urandom(1024 * 1024))
    tarball = work / TARGET
    # Level 1: random weights do not compress; a higher level only makes the bench slower.
    with tarfile.open(tarball, "w:gz", compresslevel=1) as tar:
        tar.add(folder, arcname="big")
    shutil.rmtree(folder.parent)
    return tarball


class Moto:
    """moto's S3 server as its own process (a dev dependency: ``pip install 'moto[server]'``)."""

    def __init__(self, work: Path, command: str = "mme bench coldstart") -> None:
        from emulator.processes import free_port

        binary = Path(sys.executable).with_name("moto_server")
        if not binary.exists():
            raise SystemExit(f"{command} needs moto's S3 server: "
                             "pip install 'moto[server]' (make setup installs it)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with (work / "moto.log").open("wb") as out:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                [str(binary), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT)
        with stopped_on_failure(self.process, 30):  # also Ctrl-C or SIGTERM while it starts
            if not wait_until(self._answers, 60, still_starting=self._still_starting,
                              interval_s=0.2):
                raise RuntimeError("moto's S3 server did not answer within 60 s")

    def _answers(self) -> bool:
        try:
            self.client().list_buckets()
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def _still_starting(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"moto's S3 server exited with code {self.process.returncode} "
                               "while starting")

    def client(self) -> Any:  # a boto3 S3 client (boto3 ships no types)
        import boto3

        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def stop(self) -> None:
        stop_process(self.process, 30)


def invoke_seconds(server: Server) -> float:
    request = urllib.request.Request(
        f"{server.url}/endpoints/local/invocations", data=BODY, method="POST",
        headers={"X-Amzn-SageMaker-Target-Model": TARGET,
                 "Content-Type": "application/octet-stream"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as resp:
        answer = json.loads(resp.read())
    elapsed = time.perf_counter() - started
    if answer["outputs"][0]["data"] != [2, 4, 6, 8]:
        raise RuntimeError(f"wrong answer: {answer}")
    return elapsed


def own_figures(log: Path) -> dict[str, float]:
    """The seconds the emulator logged for ``step=download`` and ``step=load`` of TARGET."""
    figures: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = re.search(rf"model={re.escape(TARGET)} step=(download|load) seconds=([0-9.]+)",
                          line)
        if match:
            figures[match.group(1)] = float(match.group(2))
    return figures


def unload(server: Server) -> None:
    request = urllib.request.Request(
        f"{server.url}/_emulator/endpoints/local/models/{TARGET}/unload", method="POST")
    urllib.request.urlopen(request, timeout=120).read()


def run(args: argparse.Namespace) -> int:
    from emulator.manager.extract import extract_archive

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with tempfile.TemporaryDirectory(prefix="mme-bench-coldstart-") as tmp:
        work = Path(tmp)
        tarball = build_model(work, args.size_mib)
        size = tarball.stat().st_size
        moto = Moto(work)
        try:
            s3 = moto.client()
            s3.create_bucket(Bucket=BUCKET)
            s3.upload_file(str(tarball), BUCKET, f"mme/{TARGET}")
            tarball.unlink()
            flags = ["--s3-endpoint-url", moto.url]
            model_data = f"s3://{BUCKET}/mme/"
            rows: dict[str, float] = {}
            steps: dict[str, dict[str, float]] = {}
            for repeat in range(args.repeat):
                started = time.perf_counter()
                s3.download_file(BUCKET, f"mme/{TARGET}", str(work / "alone.tar.gz"))
                rows.setdefault("download alone", float("inf"))
                rows["download alone"] = min(rows["download alone"],
                                             time.perf_counter() - started)
                started = time.perf_counter()
                extract_archive(work / "alone.tar.gz", work / f"alone-{repeat}", None)
                rows["extract alone"] = min(rows.get("extract alone", float("inf")),
                                            time.perf_counter() - started)
                (work / "alone.tar.gz").unlink()
                shutil.rmtree(work / f"alone-{repeat}")
                for k, (name, settings) in enumerate((
                        ("cold start now (streamed)", None),
                        ("cold start before (copy, then extract)", COPY_THEN_EXTRACT))):
                    server = serve(work, f"{repeat}-{k}", ["--model-data", model_data, *flags,
                                                           "--log-level", "INFO"],
                                   settings=settings)
                    try:
                        cold = invoke_seconds(server)
                        if cold < rows.get(name, float("inf")):
                            rows[name] = cold
                            steps[name] = own_figures(work / f"serve-{repeat}-{k}.log")
                        if settings is None:
                            unload(server)
                            load = invoke_seconds(server)
                            rows["load alone"] = min(rows.get("load alone", float("inf")), load)
                    finally:
                        server.stop()
                        shutil.rmtree(work / f"cache-{repeat}-{k}", True)
        finally:
            moto.stop()
    parts = rows["download alone"] + rows["extract alone"] + rows["load alone"]
    print(f"cold start of a {size / 1024**2:.0f} MiB .tar.gz (incompressible weights) from moto's "
          f"S3 server; best of {args.repeat}")
    for name in ("download alone", "extract alone", "load alone"):
        print(f"  {name:<40}{rows[name]:>8.2f} s")
    print(f"  {'sum of the three':<40}{parts:>8.2f} s")
    for name in ("cold start before (copy, then extract)", "cold start now (streamed)"):
        own = steps.get(name, {})
        print(f"  {name:<40}{rows[name]:>8.2f} s   x{rows[name] / parts:.2f} of the sum; "
              f"the emulator's own log: download+extract {own.get('download', float('nan')):.2f}"
              f" s, load {own.get('load', float('nan')):.2f} s")
    now = rows["cold start now (streamed)"]
    print(f"  now / before: x{now / rows['cold start before (copy, then extract)']:.2f}")
    return 0 if now <= 1.1 * parts else 1


def add_bench_subcommands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``mme bench coldstart``."""
    p = commands.add_parser(
        "coldstart", help="first invocation of a large model from a real HTTP S3 server vs "
                          "download + extract + load measured alone")
    p.add_argument("--size-mib", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1, help="runs; the best of each is shown")
    p.set_defaults(func=run)
