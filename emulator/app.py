"""The composition root: builds every part from the settings and wires them into one FastAPI app.

Routes (the wire formats live in ``emulator/contract``, the behaviour in ``emulator/endpoints``):
- ``POST /endpoints/{name}/invocations``  sagemaker-runtime InvokeEndpoint
- ``GET  /ping``                           health (200 once the app is up)
- ``GET  /metrics``                        MME CloudWatch metrics, Prometheus text format
- ``GET  /_emulator/metrics``              the same as JSON, per endpoint
- ``GET  /_emulator/models``               every known model: state, size, pins, LRU position
- ``POST /_emulator/endpoints/{name}/models/{target}/unload``  unload one model (tests, tools)
- ``POST /`` with ``X-Amz-Target: SageMaker.<Operation>``: the control plane (``emulator/control``)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from emulator.contract import errors, runtime
from emulator.control import ControlPlaneService, ControlStore, build_control_router
from emulator.endpoints import EndpointRegistry, EndpointSpec
from emulator.metrics import prometheus_text
from emulator.settings import Settings
from emulator.triton.docker_launcher import DockerLauncher
from emulator.triton.embedded import EmbeddedLauncher
from emulator.triton.external import ExternalLauncher
from emulator.triton.launcher import LauncherError, TritonLauncher, TritonOptions, count_gpus
from emulator.triton.sagemaker_env import SageMakerEnvironmentError, triton_args_from_environment

log = logging.getLogger("emulator.app")


def make_launcher(settings: Settings, spec: EndpointSpec, options: TritonOptions,
                  work_dir: Path) -> TritonLauncher:
    """Pick the launcher by ``--launcher``; the endpoint's environment becomes Triton flags."""
    gpu_count = count_gpus() if settings.launcher != "external" else 0
    try:
        translated = triton_args_from_environment(
            spec.environment, multi_model=spec.mode == "MultiModel", gpu_count=gpu_count)
    except SageMakerEnvironmentError as exc:
        raise LauncherError(f"the container's Environment is invalid: {exc}") from exc
    options.extra_args.extend(translated.args)
    options.environment.update(translated.passthrough_env)
    if settings.launcher == "embedded":
        return EmbeddedLauncher(options, work_dir, tritonserver=settings.tritonserver,
                                name=f"triton[{spec.name}]")
    if settings.launcher == "docker":
        # --image wins over the model's Image: it maps the production image (an ECR URI that
        # cannot be pulled here) to one this machine has; without it, the model's Image is used.
        return DockerLauncher(options, work_dir, image=settings.image or spec.image,
                              cache_dir=settings.cache_dir, mounts=settings.docker_mounts,
                              shm_size=settings.shm_size,
                              gpus=settings.gpus, name=spec.name)
    if settings.launcher == "external":
        if not settings.triton_url:
            raise LauncherError("--launcher external needs --triton-url")
        return ExternalLauncher(options, settings.triton_url,
                                repository=settings.triton_repository)
    raise LauncherError(f"unknown launcher {settings.launcher!r}: embedded, docker or external")


def _error_response(error: errors.SageMakerError, request_id: str) -> JSONResponse:
    return JSONResponse(error.members(), status_code=error.status,
                        headers=runtime.error_headers(error, request_id))


def build_app(settings: Settings, registry: EndpointRegistry | None = None) -> FastAPI:
    registry = registry or EndpointRegistry(
        settings, lambda spec, options, work_dir: make_launcher(settings, spec, options, work_dir)
    )

    control = ControlPlaneService(
        store=ControlStore(settings.cache_dir / "control-plane.sqlite3"),
        registry=registry, region=settings.region, account=settings.account_id)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if settings.model_data:
            await registry.create(EndpointSpec(
                name=settings.endpoint_name, model_data=settings.model_data,
                variant_name=settings.variant_name,
            ))
        await control.restore()  # endpoints created through the control plane come back
        try:
            yield
        finally:
            await control.aclose()
            await registry.close()

    app = FastAPI(title="SageMaker MME emulator", lifespan=lifespan, docs_url="/_emulator/docs",
                  openapi_url="/_emulator/openapi.json", redoc_url=None)
    app.state.settings = settings
    app.state.registry = registry
    app.state.control_plane = control
    app.include_router(build_control_router(control))

    @app.post("/endpoints/{endpoint_name}/invocations")
    async def invoke_endpoint(endpoint_name: str, request: Request) -> Response:
        request_id = runtime.new_request_id()
        try:
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > settings.max_payload_bytes:
                raise errors.oversize_body(request_id, settings.max_payload_bytes)  # unread
            body = await request.body()
            parsed = runtime.parse_invoke(endpoint_name, request.headers, body,
                                          settings.max_payload_bytes, request_id)
            endpoint = registry.get(endpoint_name)
            if endpoint is None:
                raise errors.endpoint_not_found(endpoint_name, settings.account_id)
            result = await endpoint.invoke(parsed)
        except errors.SageMakerError as exc:
            return _error_response(exc, request_id)
        except Exception as exc:  # a bug of ours: say so in SageMaker's shape, log the details
            log.exception("request=%s outcome=internal-failure", request_id)
            return _error_response(errors.InternalFailure(f"internal failure: {exc}"), request_id)
        return Response(content=result.body, headers=result.headers)

    @app.post("/endpoints/{endpoint_name}/invocations-response-stream")
    @app.post("/endpoints/{endpoint_name}/async-invocations")
    async def unsupported_invocation(endpoint_name: str, request: Request) -> Response:
        """Neither operation has a TargetModel, so neither can reach a model of an MME."""
        request_id = runtime.new_request_id()
        operation = ("InvokeEndpointWithResponseStream"
                     if request.url.path.endswith("-response-stream") else "InvokeEndpointAsync")
        if registry.get(endpoint_name) is None:
            error: errors.SageMakerError = errors.endpoint_not_found(endpoint_name,
                                                                     settings.account_id)
        else:
            error = errors.unsupported_for_multi_model(operation, endpoint_name)
        return _error_response(error, request_id)

    @app.get("/ping")
    async def ping() -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(prometheus_text([e.metrics for e in registry.all()]),
                                 media_type="text/plain; version=0.0.4")

    @app.get("/_emulator/metrics")
    async def metrics_json() -> dict[str, object]:
        return {"Endpoints": {e.spec.name: e.metrics.snapshot() for e in registry.all()}}

    @app.get("/_emulator/models")
    async def models() -> dict[str, object]:
        return {"Endpoints": {
            e.spec.name: {
                "TritonUrl": e.launcher.http_url,
                "MemoryBudgetBytes": settings.memory_budget,
                "MaxLoadedModels": settings.max_loaded_models,
                "DiskBudgetBytes": settings.disk_budget,
                "LoadedBytes": e.manager.memory.total_bytes,
                "DiskBytes": e.manager.disk.total_bytes,
                "Models": e.manager.describe(),
            }
            for e in registry.all()
        }}

    @app.post("/_emulator/endpoints/{endpoint_name}/models/{target:path}/unload")
    async def unload(endpoint_name: str, target: str) -> JSONResponse:
        endpoint = registry.get(endpoint_name)
        if endpoint is None:
            return JSONResponse({"error": f"no endpoint {endpoint_name}"}, status_code=404)
        done = await endpoint.manager.unload(target)
        return JSONResponse({"unloaded": done}, status_code=200 if done else 409)

    return app
