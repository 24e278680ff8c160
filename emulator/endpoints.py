"""Endpoints: each one owns its Triton (through a launcher), its model manager and its metrics.

``Endpoint.invoke`` is the behaviour behind ``POST /endpoints/{name}/invocations``: it splits the
work as SageMaker does. What the front end decides (no TargetModel, an object missing from the
store) is a ValidationError; whatever the container answers with an error comes back as a
ModelError carrying the container's status and body.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from emulator.contract import errors, runtime
from emulator.manager.extract import UnsafeArchive
from emulator.manager.models import ModelLoadFailed, ModelManager, ModelNotReady
from emulator.manager.repository import InvalidModelRepository
from emulator.manager.store import ObjectNotFound, source_for
from emulator.metrics import EndpointMetrics
from emulator.settings import Settings
from emulator.triton.client import TritonClient, TritonUnreachable
from emulator.triton.launcher import TritonLauncher, TritonOptions, count_gpus

log = logging.getLogger("emulator.endpoints")


@dataclass
class EndpointSpec:
    name: str
    model_data: str  # MultiModel: the prefix (s3://b/p/ or a folder); SingleModel: one tarball
    mode: str = "MultiModel"  # MultiModel | SingleModel
    environment: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    variant_name: str = "AllTraffic"
    model_cache_enabled: bool = True


@dataclass(frozen=True)
class InvokeResult:
    body: bytes
    headers: dict[str, str]


class EndpointStartFailed(Exception):
    """The endpoint's container did not become healthy (CreateEndpoint -> Failed)."""


LauncherFactory = Callable[[EndpointSpec, TritonOptions, Path], TritonLauncher]

# SingleModel endpoints have one model; the manager keys it by this TargetModel.
SINGLE_MODEL = ""


class Endpoint:
    def __init__(self, spec: EndpointSpec, settings: Settings, launcher: TritonLauncher,
                 work_dir: Path) -> None:
        self.spec = spec
        self.settings = settings
        self.launcher = launcher
        self.work_dir = work_dir
        self.metrics = EndpointMetrics(spec.name, spec.variant_name)
        self.triton = TritonClient(launcher.http_url if launcher.is_running() else "http://0")
        self.log_stream_arn = errors.log_stream_arn(settings.region, settings.account_id,
                                                    spec.name)
        self.manager = ModelManager(
            source=source_for(spec.model_data, settings.s3_endpoint_url, settings.region),
            cache_dir=work_dir,
            triton=self.triton,
            triton_repository=launcher.repository,
            metrics=self.metrics,
            memory_budget=settings.memory_budget,
            max_loaded_models=settings.max_loaded_models,
            disk_budget=settings.disk_budget,
            max_extracted_bytes=settings.max_extracted_bytes,
            load_timeout_s=settings.model_load_timeout_s,
            cache_enabled=spec.model_cache_enabled,
            single_model=spec.mode == "SingleModel",
            default_model=spec.environment.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"),
            gpus_available=count_gpus() > 0,
        )
        launcher.on_restart = self._triton_restarted

    @property
    def is_multi_model(self) -> bool:
        return self.spec.mode == "MultiModel"

    async def start(self) -> None:
        await self.launcher.start()
        self.triton.rebind(self.launcher.http_url)
        if not self.is_multi_model:
            # A SingleModel container loads its model at start-up; failing that, it never
            # becomes healthy and CreateEndpoint fails with the reason.
            try:
                async with self.manager.acquire(SINGLE_MODEL, self.settings.model_load_timeout_s):
                    pass
            except (ModelLoadFailed, InvalidModelRepository, UnsafeArchive, ObjectNotFound) as exc:
                raise EndpointStartFailed(f"The primary container failed to start: {exc}") from exc

    async def stop(self) -> None:
        await self.manager.close()
        # Close our keep-alive connections first: Triton waits for open connections on exit.
        await self.triton.close()
        await self.launcher.stop()

    async def _triton_restarted(self) -> None:
        self.triton.rebind(self.launcher.http_url)
        await self.manager.triton_restarted()

    def _model_error(self, status: int, body: str) -> errors.ModelError:
        s = self.settings
        return errors.model_error(status, body, self.spec.name, s.region, s.account_id,
                                  self.log_stream_arn)

    async def invoke(self, request: runtime.InvokeRequest) -> InvokeResult:
        started = time.monotonic()
        self.metrics.record("Invocations", 1)
        model_latency = 0.0
        try:
            result, model_latency = await self._invoke(request, started)
        except errors.SageMakerError as exc:
            self.metrics.record("Invocation4XXErrors", 1 if 400 <= exc.status < 500 else 0)
            self.metrics.record("Invocation5XXErrors", 1 if exc.status >= 500 else 0)
            self.metrics.record("InvocationModelErrors", 1 if isinstance(exc, errors.ModelError)
                                else 0)
            raise
        self.metrics.record("Invocation4XXErrors", 0)
        self.metrics.record("Invocation5XXErrors", 0)
        self.metrics.record("InvocationModelErrors", 0)
        self.metrics.record("ModelLatency", model_latency * 1e6)
        self.metrics.record("OverheadLatency",
                            (time.monotonic() - started - model_latency) * 1e6)
        return result

    async def _invoke(self, request: runtime.InvokeRequest,
                      started: float) -> tuple[InvokeResult, float]:
        target = request.target_model
        if request.target_variant is not None and request.target_variant != self.spec.variant_name:
            raise errors.variant_not_found(request.target_variant, self.spec.name)
        if self.is_multi_model and target is None:
            raise errors.missing_target_model(request.request_id)
        if not self.is_multi_model and target is not None:
            raise errors.not_multi_model(self.spec.name)
        timeout = self.settings.invocation_timeout_s
        try:
            async with self.manager.acquire(target or SINGLE_MODEL, timeout) as model:
                assert model.entry is not None
                try:
                    headers = runtime.triton_request_headers(request.content_type,
                                                             len(request.body))
                except runtime.ContainerRejected as exc:
                    raise self._model_error(exc.status, exc.body) from None
                remaining = max(timeout - (time.monotonic() - started), 0.001)
                infer_started = time.monotonic()
                try:
                    response = await self.triton.infer(model.entry, request.body, headers,
                                                       timeout=remaining)
                except asyncio.TimeoutError:
                    s = self.settings
                    raise errors.invocation_timed_out(self.spec.name, s.region, s.account_id,
                                                      self.log_stream_arn) from None
                model_latency = time.monotonic() - infer_started
        except ObjectNotFound:
            raise errors.target_model_not_found(target or self.spec.model_data,
                                                self.manager.source.location) from None
        except ModelNotReady:
            raise errors.model_not_ready(target or self.spec.name) from None
        except ModelLoadFailed as exc:
            raise self._model_error(exc.status, exc.body) from None
        except (InvalidModelRepository, UnsafeArchive) as exc:
            raise self._model_error(400, f'{{"error":"failed to load model: {exc}"}}') from None
        except TritonUnreachable as exc:
            # [U] what a client sees when the container dies mid-request.
            raise self._model_error(500, f'{{"error":"container is unreachable: {exc}"}}') from None
        if response.status != 200:
            raise self._model_error(response.status, response.body.decode(errors="replace"))
        body, header_length = runtime.rename_model(
            response.body, runtime.binary_header_length(response.headers), model.entry,
            target or model.entry)
        content_type = runtime.sagemaker_content_type(header_length)
        headers = runtime.response_headers(
            request.request_id, self.spec.variant_name, content_type,
            response.headers.get("X-Amzn-SageMaker-Custom-Attributes"))
        # Emulator-only headers (not in SageMaker's contract), for load tests and debugging.
        headers["X-Mme-Model-Latency-Us"] = str(int(model_latency * 1e6))
        headers["X-Mme-Model-Cache-Hit"] = "1" if model.cache_hit else "0"
        return InvokeResult(body, headers), model_latency


class EndpointRegistry:
    """All endpoints by name; the single place that starts and stops them."""

    def __init__(self, settings: Settings, launcher_factory: LauncherFactory) -> None:
        self.settings = settings
        self.launcher_factory = launcher_factory
        self._endpoints: dict[str, Endpoint] = {}

    def get(self, name: str) -> Endpoint | None:
        return self._endpoints.get(name)

    def names(self) -> list[str]:
        return sorted(self._endpoints)

    def all(self) -> list[Endpoint]:
        return [self._endpoints[n] for n in self.names()]

    async def _start(self, spec: EndpointSpec, generation: str = "") -> Endpoint:
        source = source_for(spec.model_data, self.settings.s3_endpoint_url, self.settings.region)
        await asyncio.to_thread(source.check, spec.mode == "SingleModel")
        work_dir = self.settings.cache_dir / "endpoints" / (spec.name + generation)
        if work_dir.exists():  # a previous run's cache: models reload on demand
            await asyncio.to_thread(shutil.rmtree, work_dir)
        work_dir.mkdir(parents=True)
        options = TritonOptions(repository=work_dir / "triton-repo")
        launcher = self.launcher_factory(spec, options, work_dir)
        endpoint = Endpoint(spec, self.settings, launcher, work_dir)
        try:
            await endpoint.start()
        except BaseException:
            await endpoint.stop()
            raise
        log.info("endpoint=%s step=start model_data=%s triton=%s", spec.name, spec.model_data,
                 launcher.http_url)
        return endpoint

    async def create(self, spec: EndpointSpec) -> Endpoint:
        if spec.name in self._endpoints:
            raise ValueError(f"endpoint {spec.name} already exists")
        endpoint = await self._start(spec)
        self._endpoints[spec.name] = endpoint
        return endpoint

    async def replace(self, spec: EndpointSpec) -> Endpoint:
        """Start the new runtime, switch traffic to it, then stop the old one."""
        old = self._endpoints.get(spec.name)
        endpoint = await self._start(spec, generation=f".{time.monotonic_ns()}")
        self._endpoints[spec.name] = endpoint
        if old is not None:
            await old.stop()
            await asyncio.to_thread(shutil.rmtree, old.work_dir, True)
        return endpoint

    async def delete(self, name: str) -> None:
        endpoint = self._endpoints.pop(name, None)
        if endpoint is not None:
            await endpoint.stop()
            await asyncio.to_thread(shutil.rmtree, endpoint.work_dir, True)

    async def close(self) -> None:
        await asyncio.gather(*(self.delete(name) for name in self.names()))
