"""Asynchronous inference's wire rules and its queue, without a server: InvokeEndpointAsync's
headers checked as botocore's model constrains them, AsyncInferenceConfig as SageMaker checks
it, where results and failures go, the SNS message's shape, and the queue's concurrency per
instance, waiting for capacity, expiry and restart from its store (a fake endpoint)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from emulator.async_inference import AsyncInference, RequestStore
from emulator.clock import Clock
from emulator.contract import async_inference as wire
from emulator.contract import control_plane, runtime_errors
from emulator.contract.runtime import InvokeRequest
from emulator.hosting.components import ComponentEndpoint
from emulator.hosting.endpoint import InvokeResult
from tests.support import wait_for_async

OUTPUT = {"S3OutputPath": "s3://bucket/out/", "S3FailurePath": "s3://bucket/failed"}


def _parse(headers: dict[str, str], body: bytes = b"{}") -> wire.AsyncInvokeRequest:
    return wire.parse_async_invoke("ep", headers, body, "req-1")[0]


def test_defaults_are_botocores() -> None:
    request = _parse({})
    assert (request.ttl_s, request.timeout_s) == (21_600, 900)
    assert len(request.inference_id) == 36  # generated, a UUID
    assert wire.output_location(OUTPUT, request) == \
        f"s3://bucket/out/{request.inference_id}.out"
    assert wire.failure_location(OUTPUT, request) == \
        f"s3://bucket/failed/{request.inference_id}-error.out"


@pytest.mark.parametrize(("headers", "body", "words"), [
    ({wire.H_TTL: "59"}, b"{}", "requestTTLSeconds' failed to satisfy constraint: Member must "
                                "have value greater than or equal to 60"),
    ({wire.H_TTL: "21601"}, b"{}", "less than or equal to 21600"),
    ({wire.H_TIMEOUT: "0"}, b"{}", "invocationTimeoutSeconds"),
    ({wire.H_TIMEOUT: "soon"}, b"{}", "Member must be an integer"),
    ({wire.H_INPUT_LOCATION: "ftp://bucket/x"}, b"", "inputLocation"),
    ({wire.H_INPUT_LOCATION: "s3://bucket/x"}, b"{}", "mutually exclusive"),
    ({}, b"", "either inline as Body"),
    ({wire.H_FILENAME: "a.b.c"}, b"{}", "'filename'"),
    ({wire.H_OUTPUT_EXTENSION: "s3://x"}, b"{}", "s3OutputPathExtension"),
    ({wire.H_INFERENCE_ID: "x" * 65}, b"{}", "inferenceId"),
    ({wire.H_INFERENCE_ID: " leading-space"}, b"{}", "inferenceId"),
    ({}, b"x" * 128_001, "oversize"),
])
def test_bad_requests_are_validation_errors(headers: dict[str, str], body: bytes,
                                            words: str) -> None:
    with pytest.raises(runtime_errors.ValidationError) as caught:
        _parse(headers, body)
    assert words in caught.value.message


def test_an_s3_input_has_no_inline_body_and_names_its_output() -> None:
    request, body = wire.parse_async_invoke("ep", {
        wire.H_INPUT_LOCATION: "s3://bucket/in/x.json", wire.H_INFERENCE_ID: "id-1",
        wire.H_OUTPUT_EXTENSION: "run-7", wire.H_FILENAME: "result.json",
        wire.H_TTL: "60", wire.H_TIMEOUT: "3600"}, b"", "req")
    assert body is None
    assert (request.ttl_s, request.timeout_s) == (60, 3600)
    assert wire.output_location(OUTPUT, request) == "s3://bucket/out/run-7/result.json"
    assert wire.failure_location({"S3OutputPath": "s3://bucket/out"}, request) == \
        "s3://bucket/out/run-7/result.json-error.out"
    assert wire.AsyncInvokeRequest.from_doc(request.to_doc()) == request


def test_notification_shape() -> None:
    request = _parse({wire.H_INFERENCE_ID: "id-9", wire.H_CONTENT_TYPE: "text/csv"})
    message = wire.notification(
        region="us-east-1", request=request, received=0.0, finished=1.5, succeeded=True,
        location="s3://bucket/out/id-9.out", response_content_type="application/json",
        failure_reason=None, response_body=b'{"y": 1}')
    assert message == {
        "awsRegion": "us-east-1", "eventTime": "1970-01-01T00:00:01.500Z",
        "receivedTime": "1970-01-01T00:00:00.000Z", "invocationStatus": "Completed",
        "requestParameters": {"endpointName": "ep", "contentType": "text/csv"},
        "responseParameters": {"contentType": "application/json",
                               "outputLocation": "s3://bucket/out/id-9.out"},
        "inferenceId": "id-9", "eventVersion": "1.0", "eventSource": "aws:sagemaker",
        "eventName": "InferenceResult",
        "responseBody": {"content": '{"y": 1}', "encoding": "UTF-8"}}


def _config_request(async_config: dict[str, Any]) -> str:
    body = {"EndpointConfigName": "c", "ProductionVariants": [{
        "VariantName": "v", "ModelName": "m", "InstanceType": "ml.m5.xlarge",
        "InitialInstanceCount": 1}], "AsyncInferenceConfig": async_config}
    with pytest.raises(control_plane.ControlPlaneError) as caught:
        control_plane.parse_request("SageMaker.CreateEndpointConfig", json.dumps(body).encode())
    return str(caught.value.message)


def test_async_inference_config_is_checked_as_botocore_and_sagemaker_check_it() -> None:
    assert _config_request(
        {"ClientConfig": {"MaxConcurrentInvocationsPerInstance": 0}, "OutputConfig": OUTPUT}
    ) == ("1 validation error detected: Value '0' at 'asyncInferenceConfig.clientConfig."
          "maxConcurrentInvocationsPerInstance' failed to satisfy constraint: Member must have "
          "value greater than or equal to 1")
    assert "less than or equal to 1000" in _config_request(
        {"ClientConfig": {"MaxConcurrentInvocationsPerInstance": 1001}, "OutputConfig": OUTPUT})
    assert "notificationConfig.includeInferenceResponseIn" in _config_request({"OutputConfig": {
        **OUTPUT, "NotificationConfig": {"IncludeInferenceResponseIn": ["EVERYWHERE"]}}})
    assert "notificationConfig.successTopic" in _config_request({"OutputConfig": {
        **OUTPUT, "NotificationConfig": {"SuccessTopic": "not-an-arn"}}})
    assert "S3OutputPath is required" in _config_request({"OutputConfig": {
        "S3FailurePath": "s3://bucket/failed"}})
    assert "asyncInferenceConfig.outputConfig' failed to satisfy constraint: Member must not " \
        "be null" in _config_request({"ClientConfig": {}})


# --- the queue, with a fake endpoint ------------------------------------------------------------


@dataclass
class FakeVariant:
    count: int
    name: str = "AllTraffic"

    def serving(self) -> list[object]:
        return [object()] * self.count


@dataclass
class FakeSpec:
    async_config: dict[str, Any] | None


@dataclass
class FakeEndpoint:
    name: str
    variants: list[FakeVariant]
    spec: FakeSpec
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: int = 0
    most: int = 0
    calls: list[InvokeRequest] = field(default_factory=list)
    is_multi_model: bool = False

    async def invoke(self, request: InvokeRequest) -> InvokeResult:
        self.calls.append(request)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.gate.wait()
        finally:
            self.in_flight -= 1
        return InvokeResult(b"answer:" + bytes(request.body), "application/json", None,
                            "AllTraffic", "i-1", 0.001, True)


@dataclass
class FakeEndpoints:
    found: dict[str, Any]

    def get(self, name: str) -> Any:
        return self.found.get(name)

    def names(self) -> list[str]:
        return sorted(self.found)


class FakeS3:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {"s3://bucket/in/x.json": b"from-s3"}

    async def get(self, url: str) -> bytes:
        if url not in self.objects:
            raise KeyError(f"NoSuchKey: {url}")
        return self.objects[url]

    async def put(self, url: str, body: bytes, content_type: str | None) -> None:
        self.objects[url] = body


class FakeNotifier:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def publish(self, topic: str, message: dict[str, Any]) -> None:
        self.sent.append((topic, message))


class Sink:
    def __init__(self) -> None:
        self.samples: list[tuple[dict[str, str], str, float]] = []

    def record_many(self, dimensions: Any, samples: Any) -> None:
        self.samples += [(dict(dimensions), name, value) for _, _, name, value in samples]

    def last(self, name: str) -> float:
        return [v for _, n, v in self.samples if n == name][-1]


def run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """The test on an event loop of its own."""
    @functools.wraps(test)
    def sync(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))
    return sync


def _service(endpoint: FakeEndpoint, store: RequestStore
             ) -> tuple[AsyncInference, FakeS3, FakeNotifier, Sink]:
    """The service on an emulated clock of its own (``service.clock``)."""
    s3, notifier, sink = FakeS3(), FakeNotifier(), Sink()
    service = AsyncInference(FakeEndpoints({endpoint.name: endpoint}), store, Clock(),
                             region="us-east-1", account="123456789012", s3=s3,  # type: ignore[arg-type]
                             notifier=notifier, sink=sink)  # type: ignore[arg-type]
    return service, s3, notifier, sink


def _endpoint(instances: int, concurrency: int = 2, answering: bool = False) -> FakeEndpoint:
    """``answering``: its calls are answered at once (else each waits for ``gate``)."""
    endpoint = FakeEndpoint("ep", [FakeVariant(instances)], FakeSpec({
        "ClientConfig": {"MaxConcurrentInvocationsPerInstance": concurrency},
        "OutputConfig": {**OUTPUT, "NotificationConfig": {
            "SuccessTopic": "arn:aws:sns:us-east-1:123456789012:ok"}}}))
    if answering:
        endpoint.gate.set()
    return endpoint


@run
async def test_at_most_the_concurrency_per_instance_in_flight() -> None:
    endpoint = _endpoint(instances=2, concurrency=3)
    service, s3, notifier, sink = _service(endpoint, RequestStore())
    async with service.running():
        accepted = [service.accept(_parse({wire.H_INFERENCE_ID: f"id-{i}"}, f"{i}".encode()),
                                   f"{i}".encode()) for i in range(20)]
        await wait_for_async(lambda: endpoint.in_flight == 6, 5, "6 calls in flight")
        await asyncio.sleep(0.05)
        assert endpoint.in_flight == 6 and service.backlog("ep") == 20
        endpoint.gate.set()
        await wait_for_async(lambda: service.backlog("ep") == 0, 5, "the queue drained")
    assert endpoint.most == 6
    assert [s3.objects[a.output_location] for a in accepted] == [
        f"answer:{i}".encode() for i in range(20)]
    assert [m["inferenceId"] for _, m in notifier.sent] == [f"id-{i}" for i in range(20)]
    assert endpoint.calls[0].timeout_s == 900.0  # InvocationTimeoutSeconds reaches the call
    assert sum(v for _, n, v in sink.samples if n == "InvocationsProcesssed") == 20


@run
async def test_no_instance_no_call_until_one_comes() -> None:
    endpoint = _endpoint(instances=0, answering=True)
    service, s3, _, sink = _service(endpoint, RequestStore())
    async with service.running():
        accepted = service.accept(_parse({}, b"x"), b"x")
        await asyncio.sleep(0.1)
        service.publish_backlog()
        assert not endpoint.calls
        assert sink.last("HasBacklogWithoutCapacity") == 1
        assert sink.last("ApproximateBacklogSize") == 1
        endpoint.variants[0].count = 1  # scaled out
        await wait_for_async(lambda: accepted.output_location in s3.objects, 5, "the answer")
        service.publish_backlog()
        assert sink.last("HasBacklogWithoutCapacity") == 0


@run
async def test_a_request_past_its_ttl_fails_as_expired() -> None:
    endpoint = _endpoint(instances=0)
    service, s3, _, sink = _service(endpoint, RequestStore())
    async with service.running():
        accepted = service.accept(_parse({wire.H_TTL: "60"}, b"x"), b"x")
        await service.clock.advance(61)
        await wait_for_async(lambda: accepted.failure_location in s3.objects, 5, "the expiry")
    assert b"RequestTTLSeconds (60 seconds)" in s3.objects[str(accepted.failure_location)]
    assert sink.last("ExpiredRequests") == 1 and sink.last("InvocationFailures") == 1
    assert not endpoint.calls


@run
async def test_a_missing_input_fails_with_a_download_failure() -> None:
    endpoint = _endpoint(instances=1, answering=True)
    service, s3, _, sink = _service(endpoint, RequestStore())
    async with service.running():
        ok = service.accept(_parse({wire.H_INPUT_LOCATION: "s3://bucket/in/x.json"}, b""),
                            None)
        missing = service.accept(_parse({wire.H_INPUT_LOCATION: "s3://bucket/in/no"}, b""),
                                 None)
        await wait_for_async(lambda: missing.failure_location in s3.objects, 5, "the failure")
        await wait_for_async(lambda: ok.output_location in s3.objects, 5, "the answer")
    assert s3.objects[ok.output_location] == b"answer:from-s3"
    assert b"Failed to download" in s3.objects[str(missing.failure_location)]
    assert sink.last("RequestDownloadFailures") == 1


@run
async def test_queued_requests_come_back_from_the_store(tmp_path: Path) -> None:
    endpoint = _endpoint(instances=1)
    store = RequestStore(tmp_path / "async.sqlite3")
    service, _, _, _ = _service(endpoint, store)
    async with service.running():
        for i in range(5):
            service.accept(_parse({wire.H_INFERENCE_ID: f"id-{i}"}, b"x"), b"x")
        await wait_for_async(lambda: endpoint.in_flight == 2, 5, "2 in flight")
    store.close()  # stopped with 2 in flight and 3 waiting: all 5 stay stored
    again = RequestStore(tmp_path / "async.sqlite3")
    assert again.count() == 5
    endpoint = _endpoint(instances=1, answering=True)
    service, s3, _, _ = _service(endpoint, again)
    async with service.running():
        await wait_for_async(lambda: again.count() == 0, 5, "the restored queue drained")
    assert sorted(r.inference_id for r in endpoint.calls) == [f"id-{i}" for i in range(5)]


@run
async def test_refusals() -> None:
    endpoint = _endpoint(instances=1)
    service, _, _, _ = _service(endpoint, RequestStore())
    with pytest.raises(runtime_errors.ValidationError, match="Endpoint nope of account"):
        service.async_endpoint("nope")
    endpoint.spec.async_config = None
    with pytest.raises(runtime_errors.ValidationError, match="not configured for asynchronous"):
        service.async_endpoint("ep")
    endpoint.is_multi_model = True
    with pytest.raises(runtime_errors.ValidationError, match="InvokeEndpointAsync"):
        service.async_endpoint("ep")


def test_an_endpoint_for_inference_components_is_refused_saying_why() -> None:
    components = object.__new__(ComponentEndpoint)  # only its type is read
    service = AsyncInference(FakeEndpoints({"ic": components}), RequestStore(), Clock(),
                             region="us-east-1", account="123456789012", s3=FakeS3(),  # type: ignore[arg-type]
                             notifier=FakeNotifier())  # type: ignore[arg-type]
    with pytest.raises(runtime_errors.ValidationError) as caught:
        service.async_endpoint("ic")
    message = caught.value.message
    assert "no InferenceComponentName member" in message
    assert "InvokeEndpoint and InferenceComponentName" in message and "AsyncInferenceConfig" in \
        message


@run
async def test_a_reset_forgets_what_is_queued() -> None:
    endpoint = _endpoint(instances=0)
    store = RequestStore()
    service, _, _, _ = _service(endpoint, store)
    async with service.running():
        for _ in range(3):
            service.accept(_parse({}, b"x"), b"x")
        assert (service.backlog("ep"), store.count()) == (3, 3)
        service.clear()
        assert (service.backlog("ep"), store.count()) == (0, 0)


@run
async def test_a_deleted_endpoints_queued_requests_fail_and_its_queue_shows() -> None:
    endpoint = _endpoint(instances=1, concurrency=1)
    endpoint.spec.async_config["OutputConfig"]["NotificationConfig"]["ErrorTopic"] = \
        "arn:aws:sns:us-east-1:123456789012:failed"
    store = RequestStore()
    service, s3, notifier, sink = _service(endpoint, store)
    async with service.running():
        accepted = [service.accept(_parse({wire.H_INFERENCE_ID: f"id-{i}"}, b"x"), b"x")
                    for i in range(3)]
        await wait_for_async(lambda: endpoint.in_flight == 1, 5, "1 in flight")
        queue = service.queue(endpoint)
        assert queue is not None
        assert (queue["Backlog"], queue["Waiting"], queue["InFlight"]) == (3, 2, 1)
        assert queue["MaxConcurrentInvocationsPerInstance"] == 1
        service.endpoint_deleted("ep")
        for answer in accepted[1:]:
            await wait_for_async(lambda a=answer: a.failure_location in s3.objects, 5, "failed")
            assert b"was deleted before" in s3.objects[str(answer.failure_location)]
        failed = [m for topic, m in notifier.sent if topic.endswith(":failed")]
        assert sorted(m["inferenceId"] for m in failed) == ["id-1", "id-2"]
        assert sink.last("InvocationFailures") == 1
        assert store.count() == 1  # the one in flight ends with its call
        queue = service.queue(endpoint)
        assert queue is not None and queue["Backlog"] == 0  # a new queue for the name
        with pytest.raises(runtime_errors.ValidationError, match="Endpoint ep of account"):
            service.accept(_parse({}, b"x"), b"x")  # Deleting: as if it were gone
        endpoint.gate.set()
        await wait_for_async(lambda: store.count() == 0, 5, "the call in flight ended")
    endpoint.spec.async_config = None
    assert service.queue(endpoint) is None


@run
async def test_queued_requests_are_exported_and_loaded_as_old_as_they_were() -> None:
    endpoint = _endpoint(instances=0)
    service, _, _, _ = _service(endpoint, RequestStore())
    async with service.running():
        service.accept(_parse({wire.H_INFERENCE_ID: "inline"}, b"\xffbytes"), b"\xffbytes")
        service.accept(_parse({wire.H_INPUT_LOCATION: "s3://bucket/in/x.json",
                               wire.H_INFERENCE_ID: "from-s3"}, b""), None)
        await service.clock.advance(30)
        saved = json.loads(json.dumps(service.export()))  # as a snapshot holds it
    assert [s["doc"]["inference_id"] for s in saved] == ["inline", "from-s3"]
    assert saved[0]["age_s"] >= 30 and saved[1]["body"] is None
    other = _endpoint(instances=1, answering=True)
    again, s3, _, _ = _service(other, RequestStore())
    async with again.running():
        skipped = again.load([*saved, {**saved[0], "endpoint": "gone"}], {"ep"})
        assert skipped == ["inline"]  # the one for an endpoint the snapshot has not
        queue = again.queue(other)
        assert queue is not None and queue["OldestRequestAgeSeconds"] >= 30
        await wait_for_async(lambda: again.backlog("ep") == 0, 5, "the loaded queue drained")
    assert sorted(r.inference_id for r in other.calls) == ["from-s3", "inline"]
    assert [r.body for r in other.calls if r.inference_id == "inline"] == [b"\xffbytes"]
