"""``mme demo``: the whole path once, on this machine, with the embedded Triton.

Builds the bundled ensembles, packages them into a local model store, starts the emulator with
room for one loaded model, invokes both ensembles alternately through boto3 by ``TargetModel``
(so the MME cache evicts), prints the results and the MME metrics, and stops.

While it runs, the live page at ``<url>/_emulator/`` shows the models load and evict. On a
terminal the demo ends on that page: it waits for Enter before it stops the emulator. It never
waits when standard input is not a terminal or ``CI`` is set (``make demo`` in CI).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from emulator.server import EmulatorServer

SENTENCES = [
    "A local twin of a SageMaker multi-model endpoint.",
    "Test Triton ensembles on a laptop before deploying them.",
    "The cat sat on the mat.",
]
SHOWN_METRICS = ("Invocations", "ModelCacheHit", "LoadedModelCount", "ModelDownloadingTime",
                 "ModelLoadingTime", "ModelUnloadingTime", "ModelLoadingWaitTime", "ModelLatency",
                 "OverheadLatency")


def build_store(work_dir: Path) -> Path:
    from ensembles import catalogue
    from ensembles.quiet import exporter_output_hidden

    store = work_dir / "store"
    for name in ("text_embedding", "image_classification"):
        tarball = store / f"{name}.tar.gz"
        if tarball.exists():
            print(f"  {name}: reusing {tarball}")
            continue
        print(f"  {name}: building (first run only; exports models to ONNX) ...", flush=True)
        with exporter_output_hidden():  # the exporters' hundred-odd lines; shown on failure
            result = catalogue.build(name, work_dir / "repos" / name, tarball=tarball)
        print(f"  {name}: {tarball.stat().st_size / 1e6:.1f} MB tarball in {result.seconds:.0f}s")
    return store


def demo_image() -> bytes:
    from PIL import Image

    y, x = np.mgrid[0:240, 0:320]
    pixels = np.stack([x * 255 // 320, y * 255 // 240, (x + y) % 256], axis=-1).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()


def invoke_text(rt: Any) -> npt.NDArray[np.float32]:
    body = {"inputs": [{"name": "INPUT0", "shape": [len(SENTENCES), 1], "datatype": "BYTES",
                        "data": SENTENCES}]}
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel="text_embedding.tar.gz",
                              ContentType="application/octet-stream", Body=json.dumps(body))
    out = json.loads(resp["Body"].read())["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def invoke_image(rt: Any, image: bytes) -> npt.NDArray[np.float32]:
    body = {"inputs": [{"name": "INPUT", "shape": [1, len(image)], "datatype": "UINT8",
                        "data": list(image)}]}
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel="image_classification.tar.gz",
                              ContentType="application/octet-stream", Body=json.dumps(body))
    out = json.loads(resp["Body"].read())["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def print_metrics(server: EmulatorServer) -> None:
    import urllib.request

    with urllib.request.urlopen(f"{server.url}/_emulator/metrics") as resp:
        metrics = json.loads(resp.read())["Endpoints"]["local"]["Metrics"]
    print(f"\n{'metric':<22}{'unit':<14}{'samples':>8}{'sum':>14}{'average':>14}{'max':>14}")
    for name in SHOWN_METRICS:
        m = metrics[name]
        print(f"{name:<22}{m['Unit']:<14}{m['SampleCount']:>8}{m['Sum']:>14.0f}"
              f"{m['Average']:>14.2f}{m['Maximum']:>14.0f}")


def waits_for_enter() -> bool:
    """Only a person at a terminal is asked to press Enter; CI and pipes never wait."""
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return sys.stdin is not None and sys.stdin.isatty() and not ci


def end_on_the_page(page_url: str) -> None:
    if not waits_for_enter():
        return
    print(f"\n   The emulator is still serving: open {page_url} to look around (the"
          f"\n   models, their states and evictions, the timeline), or invoke it yourself.")
    try:
        input("   Press Enter to stop. ")
    except (EOFError, KeyboardInterrupt):
        print()


def run(work_dir: Path) -> int:
    import boto3
    from botocore.config import Config

    from emulator.cache_lock import CacheDirInUse
    from emulator.server import EmulatorServer
    from emulator.settings import Settings

    print("1. Building and packaging the bundled ensembles into a local model store")
    store = build_store(work_dir)
    print(f"\n2. Starting the emulator (embedded Triton, room for 1 loaded model) on {store}")
    settings = Settings.from_env(model_data=str(store), cache_dir=work_dir / "cache", port=0,
                                 max_loaded_models=1)
    started = time.perf_counter()
    try:
        server = EmulatorServer(settings)
    except CacheDirInUse as exc:  # another demo runs from this work dir
        print(f"mme demo: {exc} (or run this one with --work-dir DIR)", file=sys.stderr)
        return 2
    with server:
        page_url = f"{server.url}/_emulator/"
        print(f"   up in {time.perf_counter() - started:.1f}s at {server.url}")
        print(f"   live page: {page_url} (models, states, LRU, loads and evictions as they happen)")
        rt = boto3.client("sagemaker-runtime", endpoint_url=server.url, region_name="us-east-1",
                          aws_access_key_id="local", aws_secret_access_key="local",
                          config=Config(read_timeout=120, retries={"max_attempts": 1}))
        image = demo_image()
        print("\n3. Invoking through boto3 by TargetModel, alternating (each switch evicts)")
        for round_ in (1, 2):
            t0 = time.perf_counter()
            embeddings = invoke_text(rt)
            t1 = time.perf_counter()
            probabilities = invoke_image(rt, image)
            t2 = time.perf_counter()
            print(f"   round {round_}: text_embedding {1e3 * (t1 - t0):7.1f} ms, "
                  f"image_classification {1e3 * (t2 - t1):7.1f} ms")
        norms = ", ".join(f"{n:.4f}" for n in np.linalg.norm(embeddings, axis=1))
        print(f"\n   text_embedding: {embeddings.shape[0]} sentences -> {embeddings.shape[1]}-d "
              f"unit vectors (norms {norms})")
        similarity = embeddings @ embeddings.T
        for i, sentence in enumerate(SENTENCES):
            cosines = "  ".join(f"{c:+.3f}" for c in similarity[i])
            print(f"     {sentence[:48]:<50} cosine: {cosines}")
        top = np.argsort(probabilities[0])[::-1][:3]
        classes = ", ".join(f"{c} (p={probabilities[0][c]:.3f})" for c in top)
        print(f"   image_classification: {probabilities.shape[1]} probabilities summing to "
              f"{probabilities[0].sum():.4f}; top classes {classes}")
        print("\n4. MME metrics (CloudWatch names and units)")
        print_metrics(server)
        print(f"   the same, live: {page_url}; Prometheus: {server.url}/metrics")
        end_on_the_page(page_url)
        print("\n5. Stopping the emulator and its Triton")
    print("   stopped cleanly.")
    return 0


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("demo", help="build the bundled ensembles, serve, invoke, show "
                                           "the MME metrics, stop")
    p.add_argument("--work-dir", default=".mme-demo", help="where models and caches go")
    p.set_defaults(func=lambda args: run(Path(args.work_dir).resolve()))
