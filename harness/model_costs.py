"""What each model of a store costs an instance: its memory once loaded, measured by loading
it once on an emulator without a budget, and how long its load and unload take.

``mme plan`` predicts hit ratios from these costs; ``mme lint --measure`` judges each model's
memory against an instance type's. PSS, not RSS: docs/memory.md says how a model is measured.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.instance_types import machine_memory_bytes


@dataclass(frozen=True)
class ModelCost:
    target: str
    memory_bytes: int  # measured (its files' bytes where nothing can be measured)
    file_bytes: int
    load_s: float
    unload_s: float


def measure(model_data: str, targets: list[str] | None, launcher: str,
            skipped: dict[str, str] | None = None) -> dict[str, ModelCost]:
    """Load and unload every model once on an emulator without a budget. A model that does not
    load (a broken tarball, a config Triton refuses) is left out of the plan: its reason goes
    into ``skipped``; when none loads, the command stops with every reason."""
    skipped = {} if skipped is None else skipped
    import urllib.request

    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError
    from tqdm import tqdm

    from emulator.server import EmulatorServer
    from emulator.settings import Settings

    with tempfile.TemporaryDirectory(prefix="mme-plan-") as work:
        server = EmulatorServer(Settings.from_env(
            env={}, model_data=model_data, port=0, cache_dir=Path(work) / "cache",
            launcher=launcher, log_level="WARNING")).start()
        try:
            endpoint = server.registry.get("local")
            if endpoint is None:  # the one endpoint the emulator starts with is always "local"
                raise RuntimeError("the emulator started without its endpoint 'local'")
            instance = endpoint.instances[0]
            events: dict[tuple[str, str], dict[str, Any]] = {}
            done = threading.Condition()

            def observe(step: str, target: str, details: dict[str, Any]) -> None:
                with done:
                    events[(step, target)] = details
                    done.notify_all()

            instance.manager.add_observer(observe)
            names = targets or _store_targets(model_data)
            client = boto3.client(
                "sagemaker-runtime", endpoint_url=server.url, region_name="us-east-1",
                aws_access_key_id="x", aws_secret_access_key="x",
                config=Config(read_timeout=900, retries={"max_attempts": 1}))
            manager = instance.manager

            def unload(target: str) -> None:
                url = f"{server.url}/_emulator/endpoints/local/models/{target}/unload"
                urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=900)
                with done:
                    done.wait_for(lambda: ("unloaded", target) in events, timeout=900)

            # Loaded side by side (while they take less than half this machine): a stub's pages
            # shared with the others (the interpreter, numpy) then count as on an instance that
            # holds several models, not in full as for a model alone (docs/memory.md, PSS).
            resident: list[str] = []
            own: dict[str, int] = {}
            room = machine_memory_bytes() // 2
            for target in tqdm(names, desc="measuring", unit="model", file=sys.stderr,
                               disable=None):
                # an empty body: the model loads, then Triton may refuse the request
                with contextlib.suppress(ClientError):
                    client.invoke_endpoint(EndpointName="local", TargetModel=target,
                                           ContentType="application/json", Body=b"{}")
                if ("loaded", target) not in events:
                    skipped[target] = str(events.get(("failed", target), {}).get(
                        "error", "it did not load"))
                    continue
                resident.append(target)
                while sum(int(events[("loaded", t)].get("measured") or 0)
                          for t in resident) > room and len(resident) > 1:
                    oldest = resident.pop(0)
                    own[oldest] = _own_bytes(manager, oldest)
                    unload(oldest)
            for target in resident:
                own[target] = _own_bytes(manager, target)
            for target in list(resident):
                unload(target)
            if len(skipped) == len(names):
                raise SystemExit("mme plan: no model could be measured: " + "; ".join(
                    f"{target}: {why}" for target, why in skipped.items()))
            costs = {}
            for target in (name for name in names if name not in skipped):
                loaded, unloaded = events[("loaded", target)], events[("unloaded", target)]
                size = int(loaded.get("size") or 0)
                measured = loaded.get("measured")
                memory = (int(loaded.get("growth") or 0) + own[target]
                          if measured is not None and own[target] else
                          int(measured) if measured is not None else size)
                costs[target] = ModelCost(target, memory, size, float(loaded.get("seconds", 0.0)),
                                          float(unloaded.get("seconds", 0.0)))
            return costs
        finally:
            server.stop()


def _own_bytes(manager: Any, target: str) -> int:
    """What the model's own processes hold now (0 where nothing can be measured)."""
    probe, record = manager.memory_probe, manager.records.get(target)
    if probe is None or record is None:
        return 0
    return int(probe.own_bytes(record.installed))


def _store_targets(model_data: str) -> list[str]:
    folder = Path(model_data)
    if not folder.is_dir():
        raise SystemExit("mme plan: give --target-model for an S3 store (the models to plan)")
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.tar.gz"))
