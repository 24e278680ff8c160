"""The server's whole state at once: emptied (``reset``), read (``export``) and brought back
(``restore``), without a restart.

What the state is: the control plane's resources (models, endpoint configs, endpoints with
their runtimes, inference components), CloudWatch alarms and their history, Application Auto
Scaling's targets and policies, the metric series, the fault rules, the asynchronous requests
queued and, for the live page, what it was told. The ``--model-data`` endpoint belongs to how
the server started: a reset stops it with the rest and starts it again empty
(``start_default``), as at start.

A reset stops every endpoint the way a shutdown does (lifecycle tasks cancelled, guarded
deployments with both generations, every stop awaited), so when it answers no Triton or
container of the server runs and the cache folder holds what it held at start (the stores'
files, the lock); ``keep_cache`` leaves the stopped instances' folders (their downloaded and
extracted models) on disk, until a reset without it. A new endpoint never reads them: each
starts from an empty folder, so they are there to look at, not to warm anything.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from emulator.async_inference import AsyncInference
from emulator.autoscaling.service import AutoScalingService
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.series import MetricStore
from emulator.control.service import ControlPlaneService
from emulator.control.state_db import AlreadyExists, EndpointRecord
from emulator.faults.table import FaultTable
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.state import snapshot_format
from emulator.state.snapshot_format import SnapshotError

log = logging.getLogger(__name__)


class NotEmpty(Exception):
    """A restore into a server that holds something already; the message says what."""


class ServerState:
    def __init__(self, control: ControlPlaneService, registry: EndpointRegistry,
                 alarms: AlarmStore, scaling: AutoScalingService, metrics: MetricStore,
                 faults: FaultTable, default_endpoint: str | None,
                 start_default: Callable[[], Awaitable[None]],
                 model_load_timeout_s: float, endpoints_dir: Path,
                 async_inference: AsyncInference | None = None) -> None:
        # InvokeEndpointAsync's accepted requests: saved in a snapshot, queued again by its
        # restore (a reset forgets them through ``reset_listeners``).
        self.async_inference = async_inference
        self.control = control
        self.registry = registry
        self.alarms = alarms
        self.scaling = scaling
        self.metrics = metrics
        self.faults = faults
        # The --model-data endpoint (None: none), started again by a reset.
        self.default_endpoint = default_endpoint
        self._start_default = start_default
        self._load_timeout_s = model_load_timeout_s
        # Where endpoints keep their instances' folders: emptied by a reset (unless it keeps
        # the cache), so folders an earlier reset kept go too.
        self._endpoints_dir = endpoints_dir
        # Told after every reset (the live page forgets what it was told).
        self.reset_listeners: list[Callable[[], None]] = []
        self._lock = asyncio.Lock()  # one reset or restore at a time

    # -- what is there --------------------------------------------------------------------------

    def contents(self) -> dict[str, int]:
        """What the APIs created, by kind (all 0: the server is as it started)."""
        counts = self.control.store.counts()
        default = (self.default_endpoint or "").lower()
        counts["running_endpoints"] = sum(1 for n in self.registry.names() if n.lower() != default
                                          and self.control.store.get_endpoint(n) is None)
        counts["alarms"] = len(self.alarms.all())
        counts["scalable_targets"] = len(self.scaling.targets)
        counts["scaling_policies"] = len(self.scaling.policies)
        return counts

    # -- reset ----------------------------------------------------------------------------------

    async def reset(self, keep_cache: bool = False) -> dict[str, Any]:
        """Everything removed and every endpoint stopped; the --model-data endpoint started
        again, empty. Returns what was removed, by kind."""
        async with self._lock:
            return await self._reset(keep_cache)

    async def _reset(self, keep_cache: bool = False) -> dict[str, Any]:
        removed: dict[str, int] = dict(await self.control.clear())
        stopped = await self.registry.clear(keep_files=keep_cache)
        if not keep_cache and self._endpoints_dir.is_dir():
            await asyncio.to_thread(_remove_children, self._endpoints_dir)
        removed["alarms"] = self.alarms.clear()
        scaling = self.scaling.clear()
        removed["scalable_targets"] = scaling["targets"]
        removed["scaling_policies"] = scaling["policies"]
        removed["metric_series"] = self.metrics.clear()
        removed["fault_rules"] = self.faults.clear()
        removed["transition_rules"] = self.control.transitions.clear()
        for listener in self.reset_listeners:
            listener()
        if self.default_endpoint is not None:
            await self._start_default()
        log.info("reset: %s; %d endpoint(s) stopped", removed, stopped)
        return {"removed": removed, "stopped_endpoints": stopped,
                "restarted": [self.default_endpoint] if self.default_endpoint else []}

    # -- snapshots ------------------------------------------------------------------------------

    def export(self, with_models: bool = False) -> dict[str, Any]:
        """The state as a snapshot document (``snapshot_format``); ``with_models``: which
        TargetModels each variant of each endpoint has loaded, to load them again."""
        return snapshot_format.document(
            self.control.export(), self.alarms.export(), self.scaling.export(),
            self._loaded_models() if with_models else None,
            self.async_inference.export() if self.async_inference is not None else None)

    def _loaded_models(self) -> list[dict[str, str]]:
        loaded = []
        for endpoint in self.registry.all():
            if not endpoint.is_multi_model:
                continue  # a single model is loaded by its instance's start
            for variant in endpoint.variants:
                targets = sorted({m["TargetModel"] for i in variant.instances
                                  for m in i.manager.describe() if m["Loaded"]})
                loaded += [{"endpoint": endpoint.name, "variant": variant.name,
                            "target_model": t} for t in targets]
        return loaded

    async def restore(self, doc: Any) -> dict[str, Any]:
        """A snapshot document brought back into a server that holds nothing yet (NotEmpty
        otherwise; SnapshotError for a document that is not one): alarms, scaling targets and
        policies, then the control plane's resources, their endpoints started as after a
        restart, then the loaded models loaded again. Answers once the endpoints have started
        and the models are loaded; a snapshot that cannot be taken in leaves the server empty."""
        doc = snapshot_format.check(doc)
        async with self._lock:
            there = {kind: n for kind, n in self.contents().items() if n}
            if there:
                raise NotEmpty(", ".join(f"{n} {kind}" for kind, n in there.items()))
            return await self._restore(doc)

    async def replace_stored(self, doc: Any) -> dict[str, Any]:
        """At start (``--restore``): the state the cache folder held is discarded and the
        snapshot taken in its place."""
        doc = snapshot_format.check(doc)
        async with self._lock:
            self.control.store.clear()
            if self.async_inference is not None:
                self.async_inference.clear()
            self.alarms.clear()
            self.scaling.clear()
            return await self._restore(doc)

    async def _restore(self, doc: dict[str, Any]) -> dict[str, Any]:
        control = doc.get("control_plane", {})
        for row in control.get("endpoints", []):
            try:
                EndpointRecord.from_doc(row["doc"])
            except (TypeError, KeyError, AttributeError) as exc:
                raise SnapshotError(f"control_plane.endpoints: {row['name']} is not an "
                                    f"endpoint's stored record ({exc})") from None
        try:
            self.alarms.load(doc.get("alarms", []))
            self.scaling.load(doc.get("autoscaling", {}))
            await self.control.load(control)
        except (ValueError, AlreadyExists) as exc:
            await self._reset()
            raise SnapshotError(f"the snapshot was not restored: {exc}") from None
        loaded, failed = await self._load_models(doc.get("loaded_models") or [])
        requests = doc.get("async_requests") or []
        skipped: list[str] = []
        if self.async_inference is not None:
            known = {r.name.lower() for r in self.control.store.endpoints()} | {
                n.lower() for n in self.registry.names()}
            skipped = self.async_inference.load(requests, known)
        elif requests:
            skipped = [str(r["doc"].get("inference_id")) for r in requests]
        counts = {table: len(rows) for table, rows in control.items()}
        counts.update(alarms=len(doc.get("alarms", [])),
                      scalable_targets=len(doc.get("autoscaling", {}).get("targets", [])),
                      scaling_policies=len(doc.get("autoscaling", {}).get("policies", [])),
                      async_requests=len(requests) - len(skipped))
        endpoints = {r.name: r.status for r in self.control.store.endpoints()}
        answer: dict[str, Any] = {"restored": counts, "endpoints": endpoints,
                                  "loaded_models": loaded, "failed_models": failed}
        if skipped:  # queued for an endpoint the snapshot does not have: not taken
            answer["skipped_async_requests"] = skipped
        return answer

    async def _load_models(self, wanted: list[dict[str, str]]) -> tuple[int, list[str]]:
        """Each TargetModel loaded on every instance of its variant, as a first call would load
        it; the loads done, and what could not be loaded (and why)."""
        failed: list[str] = []

        async def load_on(instance: Any, item: dict[str, str]) -> int:
            try:
                async with instance.manager.acquire(item["target_model"], self._load_timeout_s):
                    return 1
            except Exception as exc:  # noqa: BLE001 - each model's failure is reported
                failed.append(f"{item['endpoint']}/{item['variant']}/{item['target_model']} "
                              f"on {instance.id}: {exc}")
                return 0

        async def load_all(instance: Any, items: list[dict[str, str]]) -> int:
            return sum([await load_on(instance, item) for item in items])  # one Triton: in turn

        per_instance: dict[int, tuple[Any, list[dict[str, str]]]] = {}
        for item in wanted:
            endpoint = self.registry.get(item["endpoint"])
            variant = (endpoint.variant(item["variant"])
                       if endpoint is not None and endpoint.is_multi_model else None)
            if variant is None:
                failed.append(f"{item['endpoint']}/{item['variant']}/{item['target_model']}: "
                              "no such running variant of an endpoint of models")
                continue
            for instance in variant.instances:
                per_instance.setdefault(id(instance), (instance, []))[1].append(item)
        loads = await asyncio.gather(*(load_all(i, items) for i, items in per_instance.values()))
        return sum(loads), failed


def _remove_children(folder: Path) -> None:
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
