"""What a person or a tool looks at: health, metrics, and the fleet with its models.

The live page (``/_emulator/``) is ``emulator/page``; it reads ``describe_endpoint``.

- ``GET  /ping``               200 once the app is up
- ``GET  /metrics``            Prometheus exposition (``emulator/prometheus.py``): histograms,
                               counters per variant, gauges per instance
- ``GET  /_emulator/metrics``  the same as JSON: per endpoint, all variants added up, then each
- ``GET  /_emulator/models``   every endpoint -> variants -> instances -> models (state, size,
                               pins, LRU position), and each model's instance at the top level;
                               during a guarded deployment its new fleet as ``Green`` (instances
                               ``i-1-green1``, ...); an asynchronous endpoint's queue as
                               ``AsyncQueue`` (backlog, waiting, in flight, oldest request's
                               age)
- ``POST /_emulator/endpoints/{name}/models/{target}/unload``  unload one model everywhere
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from emulator import prometheus
from emulator.async_inference import AsyncInference
from emulator.cloudwatch.alarms import AlarmStore
from emulator.hosting.endpoint import Endpoint
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.metrics import endpoint_snapshot


def describe_endpoint(endpoint: Endpoint,
                      async_inference: AsyncInference | None = None) -> dict[str, object]:
    """The fleet of one endpoint; ``Models`` lists every instance's models, each named; an
    asynchronous endpoint's queue as ``AsyncQueue``."""
    instances = [(v.name, i) for v in endpoint.variants for i in v.instances]
    first = instances[0][1].describe() if instances else {}
    models = [{**m, "Variant": v, "Instance": i.id} for v, i in instances
              for m in i.manager.describe()]
    # The first instance's budgets and Triton at the top level: one-instance endpoints read
    # as before the fleet; the budgets are per instance anyway.
    summary = {key: first.get(key) for key in (
        "TritonUrl", "MemoryBudgetBytes", "MaxLoadedModels", "DiskBudgetBytes")}
    usages = [i.manager.usage() for _, i in instances]
    summary["LoadedBytes"] = sum(u.loaded_bytes for u in usages)
    summary["DiskBytes"] = sum(u.disk_bytes for u in usages)
    described = {**summary, "Models": models, **endpoint.describe()}
    green = getattr(endpoint, "green", None)
    if green is not None:  # a guarded deployment's new fleet (its instances: i-1-green1, ...)
        described["Green"] = describe_endpoint(green)
    queue = async_inference.queue(endpoint) if async_inference is not None else None
    if queue is not None:
        described["AsyncQueue"] = queue
    return described


def build_introspection_router(registry: EndpointRegistry,
                               alarms: AlarmStore | None = None,
                               async_inference: AsyncInference | None = None) -> APIRouter:
    router = APIRouter()

    @router.get("/ping")
    async def ping() -> Response:
        return Response(status_code=200)

    @router.get("/metrics")
    async def metrics() -> Response:
        return Response(prometheus.exposition(registry, alarms),
                        media_type=prometheus.CONTENT_TYPE)

    @router.get("/_emulator/metrics")
    async def metrics_json() -> dict[str, object]:
        return {"Endpoints": {e.name: endpoint_snapshot(e.name, [v.metrics for v in e.variants])
                              for e in registry.all()}}

    @router.get("/_emulator/models")
    async def models() -> dict[str, object]:
        return {"Endpoints": {e.name: describe_endpoint(e, async_inference)
                              for e in registry.all()}}

    @router.post("/_emulator/endpoints/{endpoint_name}/models/{target:path}/unload")
    async def unload(endpoint_name: str, target: str) -> JSONResponse:
        endpoint = registry.get(endpoint_name)
        if endpoint is None:
            return JSONResponse({"error": f"no endpoint {endpoint_name}"}, status_code=404)
        done = [await i.manager.unload(target) for i in endpoint.instances]
        return JSONResponse({"unloaded": any(done)}, status_code=200 if any(done) else 409)

    return router
