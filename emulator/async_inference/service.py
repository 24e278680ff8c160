"""The behaviour behind InvokeEndpointAsync: accept, queue, invoke, write, notify, measure.

``AsyncInference.accept`` validates what only state can tell (the endpoint exists, is not a
multi-model endpoint, has an AsyncInferenceConfig), keeps the request in the ``RequestStore``
and queues it on its endpoint's ``_Lane``; the 202 follows. Each lane's dispatcher hands queued
requests, oldest first, to the endpoint's normal ``Endpoint.invoke`` path, at most
MaxConcurrentInvocationsPerInstance per instance in service at once (none while the variant has
no instance: the backlog then waits for capacity, ``HasBacklogWithoutCapacity`` is 1). A
request that waited longer than its RequestTTLSeconds fails as expired. The answer is written to
``<S3OutputPath>/<InferenceId>.out``, a failure to ``<S3FailurePath>/<InferenceId>-error.out``
(``contract/async_inference.py``), then the SNS topic is told, then the request leaves the
store: a restart in between processes it again [U: at least once, as a queue delivers].

Metrics (AWS/SageMaker, AWS's names): the backlog gauges per EndpointName every tick
(``ApproximateBacklogSize``, ``ApproximateBacklogSizePerInstance``,
``ApproximateAgeOfOldestRequest``, ``HasBacklogWithoutCapacity``), and per EndpointName and
VariantName each request's ``InvocationsProcesssed`` (AWS's spelling), ``InvocationFailures``,
``ExpiredRequests``, ``RequestDownloadFailures``, ``ResponseUploadFailures``,
``NotificationFailures``, ``RequestDownloadLatency``, ``ResponseUploadLatency``,
``TimeInBacklog`` and ``TotalProcessingTime``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from emulator.async_inference.store import RequestStore, StoredRequest
from emulator.clock import Clock
from emulator.cloudwatch.notifications import sns_client
from emulator.contract import async_inference as wire
from emulator.contract import runtime, runtime_errors
from emulator.hosting.components import ComponentEndpoint
from emulator.hosting.endpoint import InvokeResult
from emulator.metrics import MetricSink
from emulator.s3_objects import S3_POOL, S3Objects

log = logging.getLogger(__name__)

NAMESPACE = "AWS/SageMaker"
# How often the backlog gauges are published and queued requests looked at for expiry and for
# new capacity (real seconds at most; sooner on an emulated clock that runs faster).
TICK_S = 1.0
# The backlog gauges' period, emulated seconds (AWS publishes them each minute [U: how many
# samples a minute holds]).
GAUGE_PERIOD_S = 10.0


class AsyncEndpoint(Protocol):
    """What the queue uses of an endpoint (``hosting.endpoint.Endpoint``)."""

    name: str
    variants: Any  # each with ``name`` and ``serving()``

    @property
    def spec(self) -> Any: ...  # ``async_config``: the config's AsyncInferenceConfig

    async def invoke(self, request: runtime.InvokeRequest) -> InvokeResult: ...


class Endpoints(Protocol):
    def get(self, name: str) -> Any: ...

    def names(self) -> list[str]: ...


def async_config(endpoint: Any) -> dict[str, Any] | None:
    """The endpoint's AsyncInferenceConfig; None for a real-time endpoint (or none at all)."""
    config = getattr(getattr(endpoint, "spec", None), "async_config", None)
    return config if isinstance(config, dict) else None


@dataclass(frozen=True)
class Accepted:
    """InvokeEndpointAsync's answer: the id and where its result (or failure) will be."""

    inference_id: str
    output_location: str
    failure_location: str | None


@dataclass
class _Item:
    stored: StoredRequest
    request: wire.AsyncInvokeRequest
    started: float = 0.0  # emulated time it left the queue


@dataclass
class _Lane:
    """One endpoint's queue: requests waiting (oldest first) and in flight."""

    name: str
    waiting: deque[_Item] = field(default_factory=deque)
    in_flight: dict[str, _Item] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    @property
    def backlog(self) -> int:
        return len(self.waiting) + len(self.in_flight)


def _serving(endpoint: Any) -> int:
    """Instances in service across the endpoint's variants."""
    return sum(len(v.serving()) for v in getattr(endpoint, "variants", ()))


class Notifier:
    """SNS publishes through ``--sns-endpoint-url`` (none: recorded in the log only), in
    threads; a client is made once per region (``_sns`` runs on the event loop's thread)."""

    def __init__(self, endpoint_url: str | None) -> None:
        self.endpoint_url = endpoint_url
        self._clients: dict[str, Any] = {}

    def _sns(self, region: str) -> Any:
        client = self._clients.get(region)
        if client is None:  # one per region, as CloudWatch's alarm actions make them
            client = self._clients[region] = sns_client(self.endpoint_url, region, S3_POOL)
        return client

    async def publish(self, topic: str, message: dict[str, Any]) -> None:
        if self.endpoint_url is None:
            log.info("async inference: SNS %s not published (no --sns-endpoint-url)", topic)
            return
        region = topic.split(":")[3]
        text = json.dumps(message)
        client = self._sns(region)
        await asyncio.to_thread(lambda: client.publish(TopicArn=topic, Message=text))


class AsyncInference:
    def __init__(self, endpoints: Endpoints, store: RequestStore, clock: Clock, *, region: str,
                 account: str, s3: S3Objects, notifier: Notifier,
                 sink: MetricSink | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.endpoints = endpoints
        self.store = store
        self.clock = clock
        self.region = region
        self.account = account
        self.s3 = s3
        self.notifier = notifier
        self.sink = sink
        self._wall = wall_clock
        self._lanes: dict[str, _Lane] = {}
        # Endpoints being deleted, by name: they take no new request.
        self._deleting: dict[str, Any] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._running = False

    # -- accepting -----------------------------------------------------------------------------

    def async_endpoint(self, name: str) -> AsyncEndpoint:
        """The endpoint, if it takes InvokeEndpointAsync; else the error SageMaker answers."""
        endpoint = self.endpoints.get(name)
        deleting = self._deleting.pop(name, None)
        if deleting is not None and deleting is endpoint:
            self._deleting[name] = deleting  # still stopping
            endpoint = None  # [U] a Deleting endpoint is not found, as once it is gone
        if endpoint is None:
            raise runtime_errors.endpoint_not_found(name, self.account)
        if isinstance(endpoint, ComponentEndpoint):
            raise wire.not_for_inference_components(name)
        if async_config(endpoint) is None:
            if getattr(endpoint, "is_multi_model", False):
                raise runtime_errors.unsupported_for_multi_model("InvokeEndpointAsync", name)
            raise wire.not_async_endpoint(name)
        found: AsyncEndpoint = endpoint
        return found

    def accept(self, request: wire.AsyncInvokeRequest, body: bytes | None) -> Accepted:
        """Keep the request (before it is answered) and queue it."""
        endpoint = self.async_endpoint(request.endpoint_name)
        output = (async_config(endpoint) or {}).get("OutputConfig") or {}
        stored = StoredRequest(str(uuid.uuid4()), endpoint.name, self.clock.now(),
                               self._wall(), request.to_doc(), body)
        self.store.add(stored)
        self._queue(_Item(stored, request))
        return Accepted(request.inference_id, wire.output_location(output, request),
                        wire.failure_location(output, request)
                        if output.get("S3FailurePath") else None)

    def _lane(self, name: str) -> _Lane:
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = _Lane(name)
        if self._running and (lane.task is None or lane.task.done()):
            lane.task = asyncio.get_running_loop().create_task(self._dispatch(lane))
        return lane

    def _queue(self, item: _Item) -> None:
        lane = self._lane(item.stored.endpoint)
        lane.waiting.append(item)
        lane.wake.set()

    # -- running -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Requests kept from a previous run queued again, the dispatchers and the metrics'
        ticker running; on exit they stop (what is queued stays in the store)."""
        self._running = True
        restored = self.store.pending()
        for stored in restored:
            self._queue(_Item(stored, wire.AsyncInvokeRequest.from_doc(stored.doc)))
        if restored:
            log.info("async inference: %d queued requests restored", len(restored))
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        try:
            yield
        finally:
            await self.stop()

    async def stop(self) -> None:
        self._running = False
        tasks = [t for t in (self._ticker, *(lane.task for lane in self._lanes.values()),
                             *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._ticker = None

    def clear(self) -> None:
        """Every queued request forgotten (a reset of the whole state); requests in flight
        finish."""
        for lane in self._lanes.values():
            lane.waiting.clear()
        self.store.clear()

    def export(self) -> list[dict[str, Any]]:
        """Every accepted request not yet answered (waiting or in flight), oldest first, for a
        snapshot: its age on the emulated clock rather than its time (another server's
        timeline differs), the request, its inline body as base64."""
        now = self.clock.now()
        return [{"endpoint": r.endpoint,
                 "age_s": round(self.clock.emulated_duration(max(now - r.received, 0.0)), 6),
                 "received_wall": r.received_wall, "doc": r.doc,
                 "body": None if r.body is None else base64.b64encode(r.body).decode()}
                for r in self.store.pending()]

    def load(self, requests: list[dict[str, Any]], endpoints: set[str]) -> list[str]:
        """A snapshot's requests queued again (kept in the store first), each as old as it was
        when saved; those whose endpoint is not among ``endpoints`` (lower-case names) are not
        taken: their InferenceIds are returned."""
        now = self.clock.now()
        skipped = []
        for doc in requests:
            request = wire.AsyncInvokeRequest.from_doc(doc["doc"])
            if doc["endpoint"].lower() not in endpoints:
                skipped.append(request.inference_id)
                continue
            stored = StoredRequest(
                str(uuid.uuid4()), doc["endpoint"],
                now - self.clock.real_duration(float(doc["age_s"])),
                float(doc["received_wall"]), doc["doc"],
                None if doc["body"] is None else base64.b64decode(doc["body"]))
            self.store.add(stored)
            if self._running:  # else ``running`` queues what the store holds
                self._queue(_Item(stored, request))
        return skipped

    def endpoint_deleted(self, name: str) -> None:
        """DeleteEndpoint accepted: every request still waiting for endpoint ``name`` fails
        now (written to the failure path, told to the ErrorTopic, ``InvocationFailures``)
        [U: AWS does not publish what becomes of them]; requests in flight end as the
        endpoint's stop ends their calls. The queue is gone: an endpoint created again under
        the name starts with an empty one."""
        lane = self._lanes.pop(name, None)
        running = self.endpoints.get(name)
        # Those stopped since are forgotten (a name is not held for ever).
        self._deleting = {key: gone for key, gone in self._deleting.items()
                          if self.endpoints.get(key) is gone}
        if async_config(running) is not None:
            self._deleting[running.name] = running
        if lane is None:
            return
        if lane.task is not None:
            lane.task.cancel()
        output_config = (async_config(running) or {}).get("OutputConfig") or {}
        variant = running.variants[0].name if getattr(running, "variants", None) \
            else "AllTraffic"
        reason = wire.endpoint_deleted_reason(lane.name)
        waiting = list(lane.waiting)
        lane.waiting.clear()
        if waiting:
            log.info("async inference: %d queued requests of %s fail: the endpoint is deleted",
                     len(waiting), lane.name)
        loop = asyncio.get_running_loop()
        for item in waiting:
            lane.in_flight[item.stored.key] = item
            task = loop.create_task(self._failed(lane, item, variant, output_config, [], reason))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def backlog(self, name: str) -> int:
        lane = self._lanes.get(name)
        return 0 if lane is None else lane.backlog

    def describe(self) -> dict[str, dict[str, int]]:
        return {name: {"Waiting": len(lane.waiting), "InFlight": len(lane.in_flight)}
                for name, lane in self._lanes.items()}

    def queue(self, endpoint: Any) -> dict[str, Any] | None:
        """The queue of ``endpoint`` as ``/_emulator/models`` and the live page show it: the
        backlog (waiting and in flight), each part, and the oldest request's age in emulated
        seconds (as ``ApproximateAgeOfOldestRequest``); None for a real-time endpoint."""
        config = async_config(endpoint)
        if config is None:
            return None
        lane = self._lanes.get(endpoint.name)
        items = [] if lane is None else [*lane.waiting, *lane.in_flight.values()]
        oldest = 0.0
        if items:
            oldest = self.clock.emulated_duration(
                max(self.clock.now() - min(i.stored.received for i in items), 0.0))
        return {"Backlog": len(items), "Waiting": len(lane.waiting) if lane else 0,
                "InFlight": len(lane.in_flight) if lane else 0,
                "OldestRequestAgeSeconds": round(oldest, 3),
                "MaxConcurrentInvocationsPerInstance": wire.max_concurrency(config),
                "InstancesInService": _serving(endpoint)}

    async def _dispatch(self, lane: _Lane) -> None:
        # ``_running`` too: a cancellation that ``asyncio.wait_for`` swallows (it can, when the
        # event is set as the task is cancelled) still ends the loop.
        while self._running:
            lane.wake.clear()
            self._expire(lane)
            endpoint = self.endpoints.get(lane.name)
            config = async_config(endpoint)
            if config is not None:
                capacity = wire.max_concurrency(config) * _serving(endpoint)
                while lane.waiting and len(lane.in_flight) < capacity:
                    item = lane.waiting.popleft()
                    item.started = self.clock.now()
                    lane.in_flight[item.stored.key] = item
                    task = asyncio.get_running_loop().create_task(
                        self._process(lane, endpoint, item))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lane.wake.wait(), self._tick_s())

    def _tick_s(self) -> float:
        return min(TICK_S, self.clock.real_duration(10))

    def _expire(self, lane: _Lane) -> None:
        """Requests that waited past their RequestTTLSeconds fail (ExpiredRequests)."""
        now = self.clock.now()
        age = self.clock.emulated_duration
        expired = [i for i in lane.waiting if age(now - i.stored.received) > i.request.ttl_s]
        for item in expired:
            lane.waiting.remove(item)
            lane.in_flight[item.stored.key] = item
            task = asyncio.get_running_loop().create_task(self._fail_expired(lane, item))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- one request ---------------------------------------------------------------------------

    async def _process(self, lane: _Lane, endpoint: AsyncEndpoint, item: _Item) -> None:
        request = item.request
        samples: list[tuple[str, str, str, float]] = [
            (NAMESPACE, "Microseconds", "TimeInBacklog",
             self.clock.emulated_duration(max(item.started - item.stored.received, 0.0)) * 1e6)]
        variant = endpoint.variants[0].name if endpoint.variants else "AllTraffic"
        output_config = (async_config(endpoint) or {}).get("OutputConfig") or {}
        try:
            body = item.stored.body
            if body is None:
                assert request.input_location is not None
                started = time.monotonic()
                try:
                    body = await self.s3.get(request.input_location)
                except Exception as exc:  # noqa: BLE001 - any failure to read is the request's
                    samples.append((NAMESPACE, "Count", "RequestDownloadFailures", 1))
                    await self._failed(lane, item, variant, output_config, samples,
                                       wire.download_failed_reason(request.input_location,
                                                                   str(exc)))
                    return
                samples.append((NAMESPACE, "Microseconds", "RequestDownloadLatency",
                                (time.monotonic() - started) * 1e6))
            try:
                result = await endpoint.invoke(self._invoke_request(request, body))
            except runtime_errors.SageMakerError as exc:
                reason = (wire.timed_out_reason(request.timeout_s)
                          if isinstance(exc, runtime_errors.ModelError)
                          and exc.original_status == 0 else wire.model_failure_reason(exc))
                await self._failed(lane, item, variant, output_config, samples, reason,
                                   exc.members().get("OriginalMessage") or exc.message)
                return
            await self._succeeded(lane, item, result, output_config, samples)
        except asyncio.CancelledError:
            raise  # a stop: the request stays in the store, queued again at the next start
        except Exception as exc:  # a bug of ours: the request fails, logged
            log.exception("async inference %s failed", request.inference_id)
            await self._failed(lane, item, variant, output_config, samples,
                               f"InternalFailure: {exc}")

    @staticmethod
    def _invoke_request(request: wire.AsyncInvokeRequest, body: bytes) -> runtime.InvokeRequest:
        return runtime.InvokeRequest(
            endpoint_name=request.endpoint_name, request_id=runtime.new_request_id(),
            body=body, content_type=request.content_type, accept=request.accept,
            target_model=None, custom_attributes=request.custom_attributes,
            inference_id=request.inference_id, target_variant=None,
            timeout_s=float(request.timeout_s))

    async def _succeeded(self, lane: _Lane, item: _Item, result: InvokeResult,
                         output_config: Mapping[str, Any],
                         samples: list[tuple[str, str, str, float]]) -> None:
        request = item.request
        location = wire.output_location(output_config, request)
        started = time.monotonic()
        try:
            await self.s3.put(location, result.body, result.content_type)
        except Exception as exc:  # noqa: BLE001 - the upload failed: the request fails
            samples.append((NAMESPACE, "Count", "ResponseUploadFailures", 1))
            log.warning("async inference %s: writing %s failed: %s", request.inference_id,
                        location, exc)
            await self._failed(lane, item, result.variant, output_config, samples,
                               f"ClientError: Failed to upload the response to {location}: "
                               f"{exc}")  # [U] wording
            return
        samples.append((NAMESPACE, "Microseconds", "ResponseUploadLatency",
                        (time.monotonic() - started) * 1e6))
        await self._notify(output_config, item, samples, location, None,
                           result.content_type, result.body)
        self._done(lane, item, result.variant, samples, failed=False)

    async def _failed(self, lane: _Lane, item: _Item, variant: str,
                      output_config: Mapping[str, Any],
                      samples: list[tuple[str, str, str, float]], reason: str,
                      detail: str | None = None) -> None:
        """The failure written to its location (the reason, and the model's own answer when
        there is one [U: the object's content]) and told to the ErrorTopic."""
        request = item.request
        location = wire.failure_location(output_config, request)
        text = reason if detail is None or detail == reason else f"{reason}\n{detail}"
        try:
            await self.s3.put(location, text.encode(), "text/plain")
        except Exception as exc:  # noqa: BLE001 - counted; the notification still says why
            samples.append((NAMESPACE, "Count", "ResponseUploadFailures", 1))
            log.warning("async inference %s: writing %s failed: %s", request.inference_id,
                        location, exc)
        await self._notify(output_config, item, samples, location, reason, None,
                           detail.encode() if detail else None)
        self._done(lane, item, variant, samples, failed=True)

    async def _fail_expired(self, lane: _Lane, item: _Item) -> None:
        endpoint = self.endpoints.get(lane.name)
        output_config = (async_config(endpoint) or {}).get("OutputConfig") or {}
        variant = endpoint.variants[0].name if getattr(endpoint, "variants", None) \
            else "AllTraffic"
        await self._failed(lane, item, variant, output_config,
                           [(NAMESPACE, "Count", "ExpiredRequests", 1)],
                           wire.expired_reason(item.request.ttl_s))

    async def _notify(self, output_config: Mapping[str, Any], item: _Item,
                      samples: list[tuple[str, str, str, float]], location: str,
                      failure_reason: str | None, content_type: str | None,
                      body: bytes | None) -> None:
        """SageMaker's message to the SuccessTopic (no ``failure_reason``) or the ErrorTopic,
        if the config names one; the response included where IncludeInferenceResponseIn says."""
        notification = output_config.get("NotificationConfig") or {}
        succeeded = failure_reason is None
        topic = notification.get("SuccessTopic" if succeeded else "ErrorTopic")
        if not topic:
            return
        include = (wire.SUCCESS_TOPIC_TYPE if succeeded else wire.ERROR_TOPIC_TYPE) in (
            notification.get("IncludeInferenceResponseIn") or ())
        message = wire.notification(
            region=self.region, request=item.request, received=item.stored.received_wall,
            finished=self._wall(), succeeded=succeeded, location=location,
            response_content_type=content_type, failure_reason=failure_reason,
            response_body=body if include else None)
        try:
            await self.notifier.publish(topic, message)
        except Exception as exc:  # noqa: BLE001 - counted in NotificationFailures
            samples.append((NAMESPACE, "Count", "NotificationFailures", 1))
            log.warning("async inference %s: publishing to %s failed: %s",
                        item.request.inference_id, topic, exc)

    def _done(self, lane: _Lane, item: _Item, variant: str,
              samples: list[tuple[str, str, str, float]], failed: bool) -> None:
        self.store.remove(item.stored.key)
        lane.in_flight.pop(item.stored.key, None)
        lane.wake.set()
        if self.sink is not None:
            samples += [(NAMESPACE, "Count", "InvocationsProcesssed", 1),  # AWS's spelling
                        (NAMESPACE, "Count", "InvocationFailures", 1 if failed else 0),
                        (NAMESPACE, "Milliseconds", "TotalProcessingTime",
                         self.clock.emulated_duration(
                             max(self.clock.now() - item.stored.received, 0.0)) * 1e3)]
            self.sink.record_many({"EndpointName": lane.name, "VariantName": variant}, samples)

    # -- the backlog gauges --------------------------------------------------------------------

    async def _tick(self) -> None:
        """The gauges every ``GAUGE_PERIOD_S`` emulated seconds: an advance of the emulated
        clock publishes each of the samples it passes, at its time."""
        while self._running:
            self.publish_backlog()
            await self.clock.sleep(GAUGE_PERIOD_S)

    def publish_backlog(self) -> None:
        """The backlog gauges of every asynchronous endpoint, stamped now."""
        if self.sink is None:
            return
        now = self.clock.now()
        for name in self.endpoints.names():
            endpoint = self.endpoints.get(name)
            if async_config(endpoint) is None:
                continue
            lane = self._lanes.get(name)
            backlog = 0 if lane is None else lane.backlog
            oldest = 0.0
            if lane is not None and lane.backlog:
                received = [i.stored.received for i in (*lane.waiting, *lane.in_flight.values())]
                oldest = self.clock.emulated_duration(max(now - min(received), 0.0))
            instances = _serving(endpoint)
            # [U] With no instance, the backlog per instance is the whole backlog.
            per_instance = backlog / instances if instances else float(backlog)
            self.sink.record_many({"EndpointName": name}, [
                (NAMESPACE, "Count", "ApproximateBacklogSize", backlog),
                (NAMESPACE, "Count", "ApproximateBacklogSizePerInstance", per_instance),
                (NAMESPACE, "Seconds", "ApproximateAgeOfOldestRequest", oldest),
                (NAMESPACE, "Count", "HasBacklogWithoutCapacity",
                 1 if backlog and not instances else 0)])
