"""An instance hosting several containers: a multi-container endpoint or an inference pipeline.

SageMaker runs every container of the model on every instance. ``Serial`` (the default, and what
the SageMaker Python SDK's ``PipelineModel`` creates) sends the request through the containers in
order: each container's response body and Content-Type are the next one's request, the caller's
``Accept`` goes to the last one, and an error at any step is the request's ModelError, naming the
container. ``Direct`` sends the request to the one container ``TargetContainerHostname`` names.

The same class hosts a single non-Triton container (any SageMaker inference container run with
``serve``): a pipeline of one.

Members are either a Triton (an ``Instance`` of one SingleModel container: the emulator's model
manager in front of a Triton) or any other image run under SageMaker's container contract
(``emulator.containers.sagemaker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Protocol

from emulator.containers.sagemaker import ContainerUnreachable, SageMakerContainer
from emulator.contract import multi_container, runtime, sessions
from emulator.hosting.instance import ContainerAnswer, ErrorContext, Instance, InstanceStartFailed
from emulator.hosting.spec import VariantSpec
from emulator.manager.events import ModelObserver
from emulator.manager.model_manager import ModelManager
from emulator.manager.usage import Usage
from emulator.metrics import EndpointMetrics, InstanceMetrics
from emulator.supervision import LauncherError

log = logging.getLogger(__name__)


def container_labels(variant: VariantSpec) -> list[str]:
    return [multi_container.container_label(c.hostname, i)
            for i, c in enumerate(variant.containers)]


def check_container_hostname(variant: VariantSpec, request: runtime.InvokeRequest,
                             endpoint: str) -> None:
    """The three ValidationErrors SageMaker documents for TargetContainerHostname: a hostname
    the endpoint does not have, none on a Direct endpoint, one on an endpoint that is not
    Direct (a single-container endpoint included)."""
    hostname = request.target_container_hostname
    if not variant.is_direct:
        if hostname is not None:
            raise multi_container.hostname_on_non_direct(endpoint)
        return
    labels = container_labels(variant)
    if hostname is None:
        raise multi_container.missing_container_hostname(endpoint, labels)
    if hostname not in labels:
        raise multi_container.unknown_container_hostname(hostname, endpoint, labels)


class Member(Protocol):
    """One container of a multi-container instance."""

    label: str  # ContainerHostname, else container-N

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def call(self, request: runtime.InvokeRequest, started: float,
                   timeout_s: float) -> ContainerAnswer: ...

    def describe(self) -> dict[str, object]: ...


class TritonMember:
    """A Triton container: the emulator's single-model instance (model manager + Triton)."""

    def __init__(self, label: str, instance: Instance) -> None:
        self.label = label
        self.instance = instance

    async def start(self) -> None:
        await self.instance.start()

    async def stop(self) -> None:
        await self.instance.stop()

    async def call(self, request: runtime.InvokeRequest, started: float,
                   timeout_s: float) -> ContainerAnswer:
        return await self.instance.invoke(request, None, started, timeout_s)

    def describe(self) -> dict[str, object]:
        return {"ContainerName": self.label, "Kind": "triton",
                "Url": self.instance.launcher.http_url,
                "Models": self.instance.manager.describe()}


class ServeMember:
    """Any SageMaker inference container (``docker run IMAGE serve``)."""

    def __init__(self, label: str, container: SageMakerContainer, model_dir: Path,
                 errors_context: ErrorContext) -> None:
        self.label = label
        self.container = container
        self.model_dir = model_dir
        self._errors = errors_context

    async def start(self) -> None:
        await self.container.start()

    async def stop(self) -> None:
        await self.container.stop()

    async def call(self, request: runtime.InvokeRequest, started: float,
                   timeout_s: float) -> ContainerAnswer:
        remaining = max(timeout_s - (time.monotonic() - started), 0.001)
        step_started = time.monotonic()
        try:
            session_id = request.session_id
            response = await self.container.invoke(
                bytes(request.body), request.content_type, request.accept,
                request.custom_attributes, remaining,
                # [U] NEW_SESSION is asked in the body ({"requestType": "NEW_SESSION"}); the
                # header carries an open session's id only.
                None if session_id == sessions.NEW_SESSION else session_id)
        except asyncio.TimeoutError:
            raise self._errors.timed_out() from None
        except ContainerUnreachable as exc:
            # [U] what a client sees when the container dies mid-request or answers garbage.
            raise self._errors.model_error(500, json.dumps({"error": str(exc)})) from None
        latency = time.monotonic() - step_started
        if response.status != 200:
            answered = self._errors.model_error(response.status,
                                                response.body.decode(errors="replace"))
            answered.model_latency_s = latency  # the container answered, with an error
            raise answered
        return ContainerAnswer(response.body, response.content_type or "application/json",
                               response.custom_attributes, latency, cache_hit=True,
                               new_session=response.new_session,
                               closed_session=response.closed_session)

    def describe(self) -> dict[str, object]:
        return {"ContainerName": self.label, "Kind": "sagemaker-serve",
                "Image": self.container.image, "Url": self.container.http_url,
                "DockerContainer": self.container.container_name}


class MultiContainerInstance:
    """One instance of a variant whose model has several containers (or one non-Triton one).

    It offers the router and the endpoint what ``Instance`` offers (in-flight count, draining,
    start/stop, ``invoke``), so the fleet machinery (variants, capacities, drains) is the same.
    """

    def __init__(self, instance_id: str, variant: VariantSpec, members: list[Member],
                 metrics: InstanceMetrics, variant_metrics: EndpointMetrics,
                 work_dir: Path, endpoint_name: str) -> None:
        self.id = instance_id
        self.variant = variant
        self.members = members
        self.metrics = metrics
        self._variant_metrics = variant_metrics
        self.work_dir = work_dir
        self._endpoint = endpoint_name
        # None of its own: a view over the Triton members' model managers.
        self.manager = MembersModels({m.label: m.instance.manager for m in members
                                      if isinstance(m, TritonMember)})
        self.launcher = _FirstMemberUrl(members)
        self.in_flight = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def direct(self) -> bool:
        return self.variant.is_direct

    def labels(self) -> list[str]:
        return [m.label for m in self.members]

    # --- what the router reads (single-model routing only) -----------------------------------

    def has_loaded(self, target: str) -> bool:
        return False

    def is_bringing_in(self, target: str) -> bool:
        return False

    def has_on_disk(self, target: str) -> bool:
        return False

    def free_fraction(self) -> float:
        return 1.0

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Every container at once; one that fails its health check fails the instance (and
        CreateEndpoint, with the container named), and the others are stopped."""
        results = await asyncio.gather(*(m.start() for m in self.members),
                                       return_exceptions=True)
        failed = [(m, r) for m, r in zip(self.members, results, strict=True)
                  if isinstance(r, BaseException)]
        if failed:
            await self.stop()
            member, exc = failed[0]
            if not isinstance(exc, (LauncherError, InstanceStartFailed)):
                raise exc
            raise InstanceStartFailed(multi_container.failed_ping(
                member.label, self.variant.name, str(exc)))

    async def drain(self, timeout_s: float) -> None:
        self.draining = True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)

    async def stop(self) -> None:
        await asyncio.gather(*(m.stop() for m in self.members), return_exceptions=True)
        for member in self.members:
            self._variant_metrics.forget_instance(f"{self.id}/{member.label}")
        await asyncio.to_thread(shutil.rmtree, self.work_dir / "model-data", True)

    # --- the request path -------------------------------------------------------------------

    def check_request(self, request: runtime.InvokeRequest) -> list[Member]:
        """The containers this request goes through (see ``check_container_hostname``)."""
        check_container_hostname(self.variant, request, self._endpoint)
        if not self.direct:
            return list(self.members)
        return [m for m in self.members if m.label == request.target_container_hostname]

    async def invoke(self, request: runtime.InvokeRequest, target: str | None, started: float,
                     timeout_s: float) -> ContainerAnswer:
        chain = self.check_request(request)
        self.in_flight += 1
        self._idle.clear()
        try:
            return await self._run_chain(chain, request, started, timeout_s)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    async def _run_chain(self, chain: list[Member], request: runtime.InvokeRequest,
                         started: float, timeout_s: float) -> ContainerAnswer:
        latencies: list[tuple[str, float]] = []
        step = request
        answer: ContainerAnswer | None = None
        for index, member in enumerate(chain):
            last = index == len(chain) - 1
            # [U] Intermediate containers get no Accept: the caller's applies to the last one.
            step = dataclasses.replace(step, target_model=None,
                                       accept=request.accept if last else None)
            step_started = time.monotonic()
            answer = await member.call(step, started, timeout_s)
            latencies.append((member.label, time.monotonic() - step_started))
            step = dataclasses.replace(step, body=answer.body, content_type=answer.content_type,
                                       custom_attributes=request.custom_attributes)
        assert answer is not None
        return dataclasses.replace(answer, model_latency_s=sum(s for _, s in latencies),
                                   container_latencies=tuple(latencies))

    def describe(self) -> dict[str, object]:
        return {
            "InstanceId": self.id,
            "Draining": self.draining,
            "InFlight": self.in_flight,
            # A single non-Triton container has no InferenceExecutionConfig: "Single" here.
            "ExecutionMode": self.variant.execution_mode or "Single",
            "Containers": [m.describe() for m in self.members],
            "LoadedModelCount": self.metrics.loaded_model_count,
        }


class MembersModels:
    """What readers of ``instance.manager`` (introspection, the live page, utilization) see on
    a multi-container instance: the models of its Triton members, named by container; no
    budget of its own."""

    def __init__(self, managers: dict[str, ModelManager]) -> None:
        self._managers = managers

    def loaded_file_bytes(self) -> int:
        return sum(m.loaded_file_bytes() for m in self._managers.values())

    def usage(self) -> Usage:
        """The members' models added up; no budget of its own."""
        usages = [m.usage() for m in self._managers.values()]
        return Usage(loaded_bytes=sum(u.loaded_bytes for u in usages),
                     loaded_file_bytes=sum(u.loaded_file_bytes for u in usages),
                     loaded_count=sum(u.loaded_count for u in usages), memory_budget_bytes=None,
                     max_loaded_models=None, disk_bytes=sum(u.disk_bytes for u in usages),
                     disk_budget_bytes=None)

    def describe(self) -> list[dict[str, Any]]:
        return [{**model, "ContainerName": label} for label, manager in self._managers.items()
                for model in manager.describe()]

    def add_observer(self, observer: ModelObserver) -> None:
        for manager in self._managers.values():
            manager.add_observer(observer)

    async def unload(self, target: str) -> bool:
        done = [await m.unload(target) for m in self._managers.values()]
        return any(done)


class _FirstMemberUrl:
    """What logs and introspection read from ``instance.launcher``."""

    def __init__(self, members: list[Member]) -> None:
        self._members = members

    @property
    def http_url(self) -> str:
        urls = []
        for member in self._members:
            if isinstance(member, TritonMember):
                urls.append(member.instance.launcher.http_url)
            elif isinstance(member, ServeMember):
                urls.append(member.container.http_url)
        return ", ".join(urls)



def manages_sessions(unit: object) -> bool:
    """Whether ``unit`` runs SageMaker containers only, which keep stateful sessions
    themselves (the container contract); a Triton unit's sessions are the emulator's."""
    return isinstance(unit, MultiContainerInstance) and all(
        isinstance(m, ServeMember) for m in unit.members)
