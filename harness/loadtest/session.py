"""Glue for the CLI and the sweep: an emulator for a store, a payload, one run over HTTP."""

from __future__ import annotations

import argparse
import contextlib
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.loadtest.config import LoadPlan
from harness.loadtest.invokers import EmulatorFleet, EmulatorMetrics, HttpInvoker, Outcome
from harness.loadtest.locust_run import Engine, Target, run_load
from harness.loadtest.runner import LoadResult
from harness.model_config import entry_model, input_specs
from harness.payloads import Request, build_request, random_inputs


@contextlib.contextmanager
def emulator(
    store: Path,
    work_dir: Path,
    settings: Mapping[str, str] | None = None,
    endpoint_name: str = "local",
) -> Iterator[str]:
    """``mme serve`` for ``store`` in a child process (its own GIL: the generator's CPU time
    does not slow the endpoint's event loop); yields its URL."""
    from harness.live_endpoint import EmulatorProcess

    env = {
        "MME_MODEL_DATA": str(store),
        "MME_CACHE_DIR": str(work_dir / "cache"),
        "MME_ENDPOINT_NAME": endpoint_name,
        **(settings or {}),
    }
    process = EmulatorProcess(env, work_dir / "emulator.log").start()
    try:
        yield process.url
    finally:
        process.stop()


def auto_request(tarball: Path, *, binary: bool = True, batch_size: int = 1) -> Request:
    """Random inputs shaped by the entry model's ``config.pbtxt`` inside ``tarball``."""

    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tarball) as tar:
            members = [m for m in tar.getmembers() if m.name.endswith("config.pbtxt")]
            tar.extractall(tmp, members=members, filter="data")
        config = (entry_model(Path(tmp)) / "config.pbtxt").read_text()
    return build_request(random_inputs(input_specs(config, batch_size)), binary=binary)


def npz_request(path: Path, *, binary: bool = True) -> Request:
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return build_request({k: data[k] for k in data.files}, binary=binary)


async def invoke_once(url: str, endpoint: str, target: str | None, request: Request) -> Outcome:
    invoker = HttpInvoker(url, endpoint, request.body, request.content_type)
    try:
        return await invoker.invoke(target)
    finally:
        await invoker.close()


async def unload(url: str, endpoint: str, target: str) -> bool:
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/_emulator/endpoints/{endpoint}/models/{target}/unload") as resp,
    ):
        return resp.status == 200


async def run_http(
    url: str,
    endpoint: str,
    plan: LoadPlan,
    request: Request,
    *,
    label: str = "",
    poll_s: float = 0.5,
    metrics: bool = True,
    engine: Engine | None = None,
    **kwargs: Any,
) -> LoadResult:
    """``plan`` on Locust against the emulator at ``url``, its counters and instances polled."""
    source = EmulatorMetrics(url, endpoint) if metrics else None
    # Each instance's loaded models, from the emulator's introspection (not on AWS).
    fleet = EmulatorFleet(url, endpoint) if metrics else None
    return await run_load(plan, Target(endpoint, url), request, metrics=source, fleet=fleet,
                          poll_s=poll_s, label=label, engine=engine or Engine(), **kwargs)


def emulator_settings(args: argparse.Namespace) -> dict[str, str]:
    """The ``MME_*`` settings a load test's own emulator gets from its command line (the
    flags ``mme loadtest`` shares with ``mme serve``)."""
    settings = {}
    if args.launcher:
        settings["MME_LAUNCHER"] = args.launcher
    if args.memory_budget:
        settings["MME_MEMORY_BUDGET"] = args.memory_budget
    if args.max_loaded_models is not None:
        settings["MME_MAX_LOADED_MODELS"] = str(args.max_loaded_models)
    if getattr(args, "instances", None) is not None:
        settings["MME_INSTANCES"] = str(args.instances)
    if getattr(args, "clock_scale", None):
        settings["MME_CLOCK_SCALE"] = str(args.clock_scale)
    return settings
