"""What alarms cost at scale, measured against a real server (``mme serve`` in a child process,
its own cache folder, boto3 clients):

    python -m emulator.cloudwatch.benchmark [--alarms 10000] [--clients 4]

Prints: the time to create ``--alarms`` alarms with ``--clients`` clients in parallel; one
PutMetricAlarm with them all stored (median and slowest of 50); the server's RSS; a restart on
the same cache folder (the time until DescribeAlarms answers, beside an empty folder's, and the
count it lists); the RSS after the restart. Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STARTUP_LIMIT_S = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _client(url: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("cloudwatch", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="bench", aws_secret_access_key="bench",
                        config=Config(retries={"max_attempts": 1}, max_pool_connections=4))


@contextmanager
def _server(cache: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, float]]:
    """A server on ``cache``; (process, url, seconds until DescribeAlarms answered)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "mme", "serve", "--port", str(port), "--cache-dir", str(cache),
         "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        client = _client(url)
        deadline = started + STARTUP_LIMIT_S
        while True:
            if process.poll() is not None:
                error = process.stderr.read().decode() if process.stderr else ""
                raise SystemExit(f"the server stopped while starting: {error.strip()}")
            try:
                urllib.request.urlopen(f"{url}/ping", timeout=1).close()
                client.describe_alarms(MaxRecords=1)
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.perf_counter() > deadline:
                    raise SystemExit(f"the server did not answer in {STARTUP_LIMIT_S} s") from None
                time.sleep(0.02)
        yield process, url, time.perf_counter() - started
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _alarm(name: str) -> dict[str, Any]:
    return {"AlarmName": name, "Namespace": "Bench", "MetricName": "m",
            "Dimensions": [{"Name": "Alarm", "Value": name}], "Statistic": "Maximum",
            "Period": 60, "EvaluationPeriods": 3, "DatapointsToAlarm": 2, "Threshold": 1.0,
            "ComparisonOperator": "GreaterThanThreshold",
            "AlarmActions": ["arn:aws:sns:us-east-1:123456789012:bench"]}


def _create(url: str, count: int, clients: int) -> float:
    errors: list[BaseException] = []

    def work(first: int) -> None:
        client = _client(url)
        try:
            for index in range(first, count, clients):
                client.put_metric_alarm(**_alarm(f"bench-{index:05d}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit(f"creating the alarms failed: {errors[0]}")
    return time.perf_counter() - started


def _count(url: str) -> int:
    client = _client(url)
    total, token = 0, None
    while True:
        page = client.describe_alarms(MaxRecords=100, **({"NextToken": token} if token else {}))
        total += len(page["MetricAlarms"])
        token = page.get("NextToken")
        if not token:
            return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulator.cloudwatch.benchmark",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--alarms", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--puts", type=int, default=50, help="single puts timed at the end")
    args = parser.parse_args(argv)
    if args.alarms < 1 or args.clients < 1 or args.puts < 1:
        parser.error("--alarms, --clients and --puts must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="mme-alarm-bench-"))
    try:
        with _server(work / "empty") as (_process, _url, empty_start):
            pass
        cache = work / "cache"
        with _server(cache) as (process, url, _first):
            created = _create(url, args.alarms, args.clients)
            client = _client(url)
            single = []
            for index in range(args.puts):
                started = time.perf_counter()
                client.put_metric_alarm(**_alarm(f"bench-extra-{index:03d}"))
                single.append(time.perf_counter() - started)
            stored = args.alarms + args.puts
            rss = _rss_mib(process.pid)
        db = cache / "alarms.db"
        size = db.stat().st_size / 1024 / 1024 if db.exists() else float("nan")
        with _server(cache) as (process, url, restart):
            listed = _count(url)
            rss_after = _rss_mib(process.pid)
        print(f"alarms created by {args.clients} clients: {args.alarms} in {created:.1f} s "
              f"({args.alarms / created:.0f}/s)")
        print(f"one PutMetricAlarm with {args.alarms}+ stored: median "
              f"{statistics.median(single) * 1000:.1f} ms, slowest "
              f"{max(single) * 1000:.1f} ms (of {args.puts})")
        print(f"server RSS with {stored} alarms: {rss:.0f} MiB; alarms.db {size:.1f} MiB")
        print(f"restart with {stored} alarms: DescribeAlarms answered {restart:.2f} s after the "
              f"start ({empty_start:.2f} s on an empty cache folder: "
              f"{restart - empty_start:+.2f} s for the alarms); {listed} listed")
        print(f"server RSS after the restart: {rss_after:.0f} MiB")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    sys.exit(main())
