"""``mme bench ensemble``: the text ensemble through the emulator in the seeds' configurations.

Each configuration is the same repository with a different scheduling block on its step models
(``dynamic_batching {}`` or not, ``instance_group count`` 1 or 2), packaged as its own
TargetModel behind one endpoint. Every configuration is measured in the same run at the same
fixed concurrency with boto3 clients, and reported against the first (base) one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.cloudwatch.statistics import percentile
from ensembles import catalogue
from ensembles.packaging import package, scheduling_block
from ensembles.quiet import exporter_output_hidden


@dataclass(frozen=True)
class BenchConfig:
    label: str
    dynamic_batching: bool
    instance_count: int

    @property
    def slug(self) -> str:
        return f"text-db{int(self.dynamic_batching)}-i{self.instance_count}"


SEED_CONFIGS = (
    BenchConfig("no dynamic batching, 1 instance (base)", False, 1),
    BenchConfig("dynamic_batching {}, 1 instance", True, 1),
    BenchConfig("no dynamic batching, 2 instances", False, 2),
    BenchConfig("dynamic_batching {}, 2 instances", True, 2),
)


@dataclass
class BenchResult:
    config: BenchConfig
    calls: int
    errors: int
    seconds: float
    latencies_ms: list[float]

    @property
    def per_minute(self) -> float:
        return self.calls / self.seconds * 60 if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        return percentile(self.latencies_ms, q)


def derive(base: Path, target: Path, config: BenchConfig) -> Path:
    """Copy ``base`` with every step model's scheduling replaced (the ensemble has none)."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(base, target)
    for config_file in target.glob("*/config.pbtxt"):
        text = config_file.read_text()
        if 'platform: "ensemble"' in text:
            continue
        kind = re.search(r"kind: (KIND_\w+)", text)
        text = re.sub(r"instance_group \[[^\]]*\]\n", "", text)
        text = text.replace("dynamic_batching { }\n", "")
        text += scheduling_block(config.dynamic_batching, config.instance_count,
                                 kind.group(1) if kind else "KIND_CPU")
        config_file.write_text(text)
    return target


def _json_body(sentence: str) -> bytes:
    return json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "BYTES",
                                   "data": [sentence]}]}).encode()


def measure(client: Any, endpoint: str, target: str, body: bytes, concurrency: int,
            requests: int) -> tuple[list[float], int, float]:
    """``client``: a boto3 sagemaker-runtime client (boto3 ships no types)."""
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()

    def worker(count: int) -> None:
        nonlocal errors
        for _ in range(count):
            started = time.perf_counter()
            try:
                response = client.invoke_endpoint(
                    EndpointName=endpoint, TargetModel=target, Body=body,
                    ContentType="application/json")
                response["Body"].read()
                ok = True
            except Exception:  # noqa: BLE001 - counted, reported
                ok = False
            elapsed = (time.perf_counter() - started) * 1000
            with lock:
                if ok:
                    latencies.append(elapsed)
                else:
                    errors += 1

    shares = [requests // concurrency + (1 if i < requests % concurrency else 0)
              for i in range(concurrency)]
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(worker, shares))
    return latencies, errors, time.perf_counter() - started


def run(work_dir: Path | None = None, concurrency: int = 8, requests: int = 200,
        warmup: int = 16, sentence: str = "The quick brown fox jumps over the lazy dog.",
        configs: Sequence[BenchConfig] = SEED_CONFIGS,
        base_repo: Path | None = None, quiet: bool = True) -> list[BenchResult]:
    """Measure ``configs`` in order; ``base_repo`` reuses an already built text repository.
    ``quiet``: the exporters' output is hidden while the ensemble builds (ensembles/quiet.py)."""
    import boto3
    from botocore.config import Config

    from emulator.server import EmulatorServer
    from emulator.settings import Settings

    owned = work_dir is None
    root = Path(tempfile.mkdtemp(prefix="mme-bench-")) if work_dir is None else Path(work_dir)
    try:
        if base_repo is None:
            print("building text_embedding (the exporters' output is hidden; --verbose shows "
                  "it)" if quiet else "building text_embedding", flush=True)
            with exporter_output_hidden(quiet):
                base_repo = catalogue.build("text_embedding", root / "base").repository
        base = base_repo
        model_data = root / "model-data"
        model_data.mkdir(parents=True, exist_ok=True)
        for config in configs:
            package(derive(base, root / config.slug, config), model_data / f"{config.slug}.tar.gz")
        settings = Settings(model_data=str(model_data), port=0, cache_dir=root / "cache",
                            endpoint_name="bench", log_level="WARNING")
        results = []
        with EmulatorServer(settings) as server:
            client = boto3.client(
                "sagemaker-runtime", endpoint_url=server.url, region_name="us-east-1",
                aws_access_key_id="bench", aws_secret_access_key="bench",
                config=Config(max_pool_connections=concurrency * 2, read_timeout=120,
                              retries={"max_attempts": 1, "mode": "standard"}),
            )
            body = _json_body(sentence)
            for config in configs:
                target = f"{config.slug}.tar.gz"
                measure(client, "bench", target, body, 1, 1)  # load (cold start not measured)
                measure(client, "bench", target, body, concurrency, warmup)
                latencies, errors, seconds = measure(client, "bench", target, body,
                                                     concurrency, requests)
                results.append(BenchResult(config, len(latencies), errors, seconds, latencies))
        return results
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)


def table(results: Sequence[BenchResult], concurrency: int) -> str:
    base = results[0].per_minute if results else 0.0
    header = (f"{'configuration':<42} {'invocations/min':>15} {'p50 ms':>8} {'p90 ms':>8} "
              f"{'p99 ms':>8} {'errors':>6} {'vs base':>8}")
    lines = [f"text_embedding ensemble through the emulator, concurrency {concurrency}, "
             f"{os.cpu_count()} CPU cores", header, "-" * len(header)]
    for r in results:
        ratio = r.per_minute / base if base else float("nan")
        lines.append(f"{r.config.label:<42} {r.per_minute:>15.0f} {r.percentile(50):>8.1f} "
                     f"{r.percentile(90):>8.1f} {r.percentile(99):>8.1f} {r.errors:>6} "
                     f"{ratio:>7.2f}x")
    return "\n".join(lines)
