"""The composition root: builds every part from the settings and wires them into one FastAPI app.

Routes live beside their behaviour: ``routes/runtime.py`` (sagemaker-runtime),
``routes/introspection.py`` (``/ping``, ``/metrics``, ``/_emulator/*``) and
``control/routes.py`` (``POST /`` with ``X-Amz-Target``: the control plane). The hosting model
(endpoint -> variants -> instances) is in ``emulator/hosting``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from emulator import autoscaling, cloudwatch
from emulator.auth import install_auth
from emulator.clock import Clock
from emulator.control import ControlPlaneService, ControlStore, build_control_router
from emulator.hosting.factory import InstanceFactory
from emulator.hosting.registry import EndpointRegistry
from emulator.hosting.spec import single_variant
from emulator.page import install_page
from emulator.routes.introspection import build_introspection_router
from emulator.routes.runtime import build_runtime_router, install_invocations
from emulator.settings import Settings


def build_app(settings: Settings, registry: EndpointRegistry | None = None) -> FastAPI:
    clock = Clock(settings.clock_scale)
    metric_store = cloudwatch.MetricStore(clock)  # every sample of the fleet, for CloudWatch
    factory = InstanceFactory(settings)
    registry = registry or EndpointRegistry(settings, factory.build,
                                            sink=metric_store.record,
                                            sample_period_s=clock.real_duration(60))
    control = ControlPlaneService(
        store=ControlStore(settings.cache_dir / "control-plane.sqlite3"),
        registry=registry, region=settings.region, account=settings.account_id,
        image_problem=factory.image_problem)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if settings.model_data:
            await registry.create(single_variant(
                settings.endpoint_name, settings.model_data, variant_name=settings.variant_name,
                instance_count=settings.instances))
        await control.restore()  # endpoints created through the control plane come back
        try:
            yield
        finally:
            await control.aclose()
            await registry.close()

    app = FastAPI(title="SageMaker MME emulator", lifespan=lifespan, docs_url="/_emulator/docs",
                  openapi_url="/_emulator/openapi.json", redoc_url=None)
    # InvokeEndpoint's fast path first, so that the auth middleware added next wraps it.
    install_invocations(app, settings, registry)
    install_auth(app, settings)  # --auth sigv4: SigV4 + IAM middleware; off: logs that it is off
    app.state.settings = settings
    app.state.registry = registry
    app.state.control_plane = control
    app.state.metric_store = metric_store
    metrics_api = cloudwatch.CloudWatchService(metric_store, clock)
    scaling = autoscaling.AutoScalingService(autoscaling.SageMakerVariants(control), clock,
                                             settings.region, settings.account_id)
    app.include_router(build_control_router(control, targets={
        "AnyScaleFrontendService.": autoscaling.json_handler(scaling),
        "GraniteServiceVersion20100801.": cloudwatch.json_handler(metrics_api),
    }, form=cloudwatch.query_handler(metrics_api)))
    app.include_router(cloudwatch.build_cloudwatch_router(metrics_api))  # rpc-v2-cbor paths
    app.include_router(autoscaling.build_autoscaling_router(
        autoscaling.ScalingEngine(scaling, metric_store, clock)))
    app.include_router(build_runtime_router(settings, registry))
    app.include_router(build_introspection_router(registry))
    install_page(app, registry)  # the live page at /_emulator/
    return app
