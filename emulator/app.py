"""The composition root: builds every part from the settings and wires them into one FastAPI app.

Every HTTP binding is in ``emulator/routes``: one module per AWS service (``runtime.py``,
``control.py``, ``autoscaling.py``, ``cloudwatch.py``), each giving its rows of the front door's
one (service, operation) table (``table.py``), and ``introspection.py`` (``/ping``,
``/metrics``, ``/_emulator/*``). What runs while the app runs (the endpoints, the alarms'
evaluation, the scaling engine) is started and stopped here, in the app's lifespan. The hosting
model (endpoint -> variants -> instances) is in ``emulator/hosting``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import MappingProxyType

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from emulator import autoscaling, page_key, startup
from emulator.async_inference import AsyncInference, RequestStore
from emulator.async_inference.service import Notifier
from emulator.auth import install_auth
from emulator.clock import Clock
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.series import MetricStore
from emulator.cloudwatch.service import CloudWatchService
from emulator.contract.apis import API_SCOPE_KEY, ApiRequest, Service, read_request
from emulator.control import ControlPlaneService, ControlStore
from emulator.faults.table import FaultTable, UnitFaults
from emulator.hosting.call_log import CallLog, RecordFileError
from emulator.hosting.endpoint import HostedInstance
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.hosting.factory import InstanceFactory
from emulator.hosting.spec import EndpointSpec, VariantSpec, single_variant
from emulator.http_protocol import Answered, DirectAnswer
from emulator.init_file import InitApplier, read_init_file
from emulator.manager.model_manager import ModelManager
from emulator.metrics import EndpointMetrics
from emulator.page import Feed, install_page
from emulator.page.activities import fault_listener, scaling_listener
from emulator.page.failed_invocations import InvocationErrors
from emulator.routes.autoscaling import autoscaling_rows
from emulator.routes.clock import build_clock_router
from emulator.routes.cloudwatch import cloudwatch_rows
from emulator.routes.control import build_control_router, control_rows
from emulator.routes.faults import build_faults_router
from emulator.routes.introspection import build_introspection_router
from emulator.routes.limits import ApiBodyLimit
from emulator.routes.runtime import (
    Invocations,
    InvocationsApp,
    misdirected,
    runtime_handlers,
)
from emulator.routes.state import build_state_router
from emulator.routes.table import lookup
from emulator.s3_objects import S3Objects
from emulator.settings import Settings, StartRefused
from emulator.state import snapshot_format
from emulator.state.server_state import ServerState

log = logging.getLogger(__name__)


class EmulatorApp(FastAPI):
    """The FastAPI app behind one front door.

    Every HTTP request goes through ``front`` once: it is read once (repeated headers joined, its
    API identified as (service, operation, protocol): ``contract/apis.py``; the answer stays in
    the scope), then passes the error feed of the live page, the auth check (``--auth sigv4``)
    and the bound on the APIs' bodies, then ``routed``: the handler ``handlers`` names for its
    (service, operation) (every operation of every AWS API: ``emulator/routes/table.py``), else
    FastAPI's routing (the emulator's own routes, and ``POST /`` naming no API). The table's
    handlers are plain ASGI apps: under load FastAPI's routing and request objects cost more
    CPU than an InvokeEndpoint itself. With auth off, a server that writes answers itself
    (``emulator/http_protocol.py``) asks ``direct_answer`` first and answers InvokeEndpoint
    without ASGI; the error feed is told of those answers too.
    """

    front: ASGIApp | None = None  # the feed, auth and body bound around ``routed``
    # The front door's table: (service, operation) -> the handler that answers it.
    handlers: Mapping[tuple[Service, str], ASGIApp] = MappingProxyType({})
    # InvokeEndpoint answered without ASGI (None while auth is on: SigV4 is an ASGI layer),
    # and the error feed told of those answers.
    direct_invocations: DirectAnswer | None = None
    direct_answered: Answered | None = None

    def direct_answer(self, scope: Scope) -> DirectAnswer | None:
        """How to answer this request without ASGI, or None to call the app."""
        if self.direct_invocations is None:
            return None
        api = read_request(scope)
        if api is not None and api.operation == "InvokeEndpoint" \
                and api.service is Service.RUNTIME:
            return self.direct_invocations
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.front is not None:
            read_request(scope)
            await self.front(scope, receive, send)
            return
        await super().__call__(scope, receive, send)  # lifespan, or before build_app is done

    async def routed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Behind the feed, auth and body bound: the table's handler, or FastAPI's routing."""
        api: ApiRequest | None = scope[API_SCOPE_KEY]
        if api is not None:
            handler = lookup(self.handlers, api)
            if handler is not None:
                await handler(scope, receive, send)
                return
        else:
            refused = misdirected(scope)  # the runtime's paths with another method or a slash
            if refused is not None:
                await refused(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def build_app(settings: Settings) -> EmulatorApp:
    clock = Clock(settings.clock_scale)
    metric_store = MetricStore(clock)  # every sample of the fleet, for CloudWatch
    # every alarm, evaluated over metric_store; deployments (emulator/control) watch them too
    # Where the state is kept: files in the cache folder, or memory (--ephemeral).
    state_dir = None if settings.ephemeral else settings.cache_dir
    alarms = AlarmStore(metric_store, clock, settings.region, settings.account_id,
                        state_dir / "alarms.db" if state_dir else None,
                        sns_endpoint_url=settings.sns_endpoint_url)
    factory = InstanceFactory(settings)
    feed = Feed()  # what the live page at /_emulator/ shows beyond the fleet's state
    faults = FaultTable()  # the fault rules a test puts in force (/_emulator/faults)
    faults.listeners.append(fault_listener(feed))

    async def build_instance(endpoint: EndpointSpec, variant: VariantSpec, instance_id: str,
                             work_dir: Path, metrics: EndpointMetrics) -> HostedInstance:
        instance = await factory.build(endpoint, variant, instance_id, work_dir, metrics)
        feed.watch(endpoint.name, variant.name, instance_id, instance.manager)  # before it starts
        if isinstance(instance.manager, ModelManager):  # its loads and downloads ask the rules
            instance.manager.faults = UnitFaults(faults, endpoint.name, variant.name, instance_id)
        return instance

    # How a resource's Creating, Updating or Deleting goes, as a test set it (a copy's start too).
    transitions = startup.transition_table(settings, clock)  # --transitions FILE, if given
    # --record FILE: every runtime call, one JSON line each, written beside the serving
    call_log = (CallLog(settings.record, settings.record_bodies)
                if settings.record is not None else None)
    # The server's S3 client: data capture's files, asynchronous inference's inputs and outputs.
    s3 = S3Objects(settings.s3_endpoint_url, settings.region)
    registry = EndpointRegistry(settings, build_instance, sink=metric_store,
                                sample_period_s=clock.real_duration(60), faults=faults,
                                clock=clock, transitions=transitions, call_log=call_log, s3=s3)
    control = ControlPlaneService(
        store=ControlStore(state_dir / "control-plane.sqlite3" if state_dir else ":memory:"),
        registry=registry, region=settings.region, account=settings.account_id,
        image_problem=factory.image_problem, emulated_clock=clock, alarms=alarms,
        transitions=transitions)
    # InvokeEndpointAsync's queues, kept where the control plane keeps its state.
    async_inference = AsyncInference(
        registry, RequestStore(state_dir / "async-inference.sqlite3" if state_dir
                               else ":memory:"),
        clock, region=settings.region, account=settings.account_id,
        s3=s3,
        notifier=Notifier(settings.sns_endpoint_url), sink=metric_store)
    metrics_api = CloudWatchService(metric_store, clock, alarms)
    scaling = autoscaling.AutoScalingService(autoscaling.SageMakerVariants(control), clock,
                                             settings.region, settings.account_id, alarms,
                                             state_dir / "autoscaling.json" if state_dir
                                             else None)
    scaling_engine = autoscaling.ScalingEngine(scaling, metric_store, clock)
    # --restore: read (and checked) now, so a folder that is not a snapshot stops the start.
    restored = (snapshot_format.read_folder(settings.restore) if settings.restore is not None
                else None)

    init = InitApplier(control, scaling, metrics_api, state_dir)

    async def start_default_endpoint() -> None:
        """The --model-data endpoint, as at start (a reset starts it again)."""
        if settings.model_data:
            await registry.create(single_variant(
                settings.endpoint_name, settings.model_data, variant_name=settings.variant_name,
                instance_count=settings.instances))

    # The whole state at once: reset, snapshot, restore (/_emulator/reset, /_emulator/snapshot).
    state = ServerState(control, registry, alarms, scaling, metric_store, faults,
                        settings.endpoint_name if settings.model_data else None,
                        start_default_endpoint, settings.model_load_timeout_s,
                        settings.cache_dir / "endpoints", async_inference)
    state.reset_listeners.append(feed.clear)
    state.reset_listeners.append(async_inference.clear)  # queued requests are state too
    control.endpoint_deleted.append(async_inference.endpoint_deleted)  # they fail

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            if call_log is not None:
                try:
                    call_log.start()
                except RecordFileError as exc:
                    raise StartRefused(str(exc)) from None
            await start_default_endpoint()
            await startup.preload(registry, settings)  # --preload, before the server listens
            if restored is not None:  # the snapshot in place of the stored state
                await state.replace_stored(restored)
            else:
                await control.restore()  # endpoints created through the control plane come back
            # --init FILE: through the APIs' own paths
            if settings.init is not None and not await init.apply(read_init_file(settings.init)):
                log.info("init: %s applied already; nothing changed", settings.init)
            # The alarms are evaluated, the scaling engine runs and --watch looks at the store
            # while the app runs.
            async with alarms.running(), scaling_engine.running(), \
                    startup.store_watch(registry, settings), async_inference.running():
                yield
        except StartRefused as exc:
            app.state.start_refused = exc  # mme serve says it in one line (exit status 2)
            raise
        finally:
            await control.aclose()
            await registry.close()
            if call_log is not None:  # after the endpoints' last calls
                await call_log.close()

    app = EmulatorApp(title="SageMaker MME emulator", lifespan=lifespan,
                      docs_url="/_emulator/docs", openapi_url="/_emulator/openapi.json",
                      redoc_url=None)
    # --auth sigv4: the SigV4 + IAM layer, and the key a browser reads the live page with;
    # off: logs that it is off and adds nothing
    app.state.page_key = page_key.new_key() if settings.auth == "sigv4" else None
    with_auth = install_auth(app, settings, app.state.page_key)
    app.state.settings = settings
    app.state.registry = registry
    app.state.control_plane = control
    app.state.metric_store = metric_store
    app.state.alarms = alarms
    app.state.async_inference = async_inference
    # POST / that names no API (no or an unknown X-Amz-Target): the control plane's error.
    app.include_router(build_control_router(control))
    app.include_router(build_introspection_router(registry, alarms, async_inference))
    app.include_router(build_faults_router(faults))
    app.include_router(build_state_router(state))
    app.include_router(build_clock_router(clock, control.transitions))
    install_page(app, registry, feed)  # the live page at /_emulator/
    # Its history: each deployment's start, rollback and end, each scaling activity.
    control.on_activity = feed.activity
    scaling.activity_listeners.append(scaling_listener(feed))
    invocations = InvocationsApp(Invocations(settings, registry))
    app.handlers = MappingProxyType({**runtime_handlers(settings, registry, invocations, faults,
                                                        async_inference),
                                     **control_rows(control, faults),
                                     **autoscaling_rows(scaling, faults),
                                     **cloudwatch_rows(metrics_api, faults)})
    # The front door's one chain, for every request: the error feed, auth, the bound on the
    # APIs' bodies, then the route.
    errors_feed = InvocationErrors(with_auth(ApiBodyLimit(app.routed)), feed)
    app.front = errors_feed
    if settings.auth == "off":
        app.direct_invocations = invocations.answer
        app.direct_answered = errors_feed.answered
    return app
