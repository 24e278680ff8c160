"""Startup time of the docker launcher against the embedded one, measured in the same run.

    python docker/bench_startup.py [--runs 5] [--image mme-triton-cpu:test]

For each launcher and run: start() until /v2/health/ready answers 200 (the time an endpoint
waits before it can load models), then the first load of a one-step Python model, then stop().
Prints the medians and the docker/embedded ratio. Runs alternate between the launchers so
that machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from emulator.triton.docker_launcher import DockerLauncher
from emulator.triton.embedded import EmbeddedLauncher
from emulator.triton.launcher import TritonLauncher, TritonOptions
from harness.testmodels import write_vector_model

MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


def write_model(repository: Path) -> None:
    write_vector_model(repository, "echo", MODEL)


async def measure(launcher: TritonLauncher) -> tuple[float, float]:
    started = time.perf_counter()
    await launcher.start()
    ready = time.perf_counter() - started
    try:
        loaded_at = time.perf_counter()
        async with aiohttp.ClientSession() as session:
            url = f"{launcher.http_url}/v2/repository/models/echo/load"
            async with session.post(url) as resp:
                assert resp.status == 200, await resp.text()
        return ready, time.perf_counter() - loaded_at
    finally:
        await launcher.stop()


async def main(runs: int, image: str) -> None:
    results: dict[str, list[tuple[float, float]]] = {"embedded": [], "docker": []}
    with tempfile.TemporaryDirectory(prefix="mme-bench-startup-") as tmp:
        root = Path(tmp)
        for run in range(runs):
            for kind in ("embedded", "docker"):
                work = root / f"{kind}-{run}"
                options = TritonOptions(repository=work / "repo")
                write_model(options.repository)
                launcher: TritonLauncher
                if kind == "embedded":
                    launcher = EmbeddedLauncher(options, work)
                else:
                    launcher = DockerLauncher(options, work, image=image, cache_dir=work)
                results[kind].append(await measure(launcher))
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores; "
          f"{runs} runs each; image {image}")
    print(f"{'launcher':<10} {'start->ready p50':>17} {'first load p50':>15}")
    medians = {}
    for kind, rows in results.items():
        ready = statistics.median(r for r, _ in rows)
        load = statistics.median(load for _, load in rows)
        medians[kind] = (ready, load)
        print(f"{kind:<10} {ready:>16.2f}s {load:>14.2f}s")
    ratio_ready = medians["docker"][0] / medians["embedded"][0]
    ratio_load = medians["docker"][1] / medians["embedded"][1]
    print(f"docker/embedded: start->ready x{ratio_ready:.2f}, first load x{ratio_load:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--image", default=os.environ.get("MME_TEST_IMAGE", "mme-triton-cpu:test"))
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.image))
