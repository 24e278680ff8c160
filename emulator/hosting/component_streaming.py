"""InvokeEndpointWithResponseStream with InferenceComponentName.

The call is routed as InvokeEndpoint's is (``ComponentEndpoint.serving_copies``: the same
errors before a copy is reached, the same choice among ready copies) and counted in the same
component metrics. What the copy is asked depends on its container:

- a SageMaker inference container (any image run with ``serve``): SageMaker forwards the call
  to the container's ``POST /invocations`` and relays its answer as it arrives; a container that
  streams answers with chunked transfer encoding [U: AWS's container guide says the container
  must support streaming; the path is the same /invocations, as SageMaker's LLM containers
  (TGI, LMI) stream there]. Each piece read becomes one PayloadPart event.
- a Triton copy: SageMaker's Triton container (Triton's ``src/sagemaker_server.cc``) serves only
  ``/ping``, ``/invocations`` and the MME's ``/models``, sends one response per request ("expected
  a single response") and refuses decoupled (streaming) models; its whole answer is relayed as
  one PayloadPart [U: what AWS relays from a container that does not stream is not documented;
  relaying what the container sent is the plausible reading].

Errors before the first byte are the usual error responses (the container's non-200 status is a
ModelError, 424); after it, a ModelStreamError event ends the stream (ErrorCode
``ModelInvocationTimeExceeded`` past the invocation timeout, ``StreamBroken`` when the
connection to the container breaks), as AWS's API reference describes them.

Metrics: as InvokeEndpoint's on the component (Invocations, InvocationsPerCopy,
ConcurrentRequestsPerCopy as the call arrives; errors and latencies when it ends). ModelLatency
runs to the last byte; a ModelStreamError counts as an InvocationModelErrors (neither 4XX nor
5XX: the HTTP answer was 200) [U].
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from emulator.contract import event_stream, runtime, runtime_errors
from emulator.hosting.call_record import CallRecord
from emulator.hosting.component_copies import ComponentCopies, Copy
from emulator.hosting.components import ComponentEndpoint
from emulator.hosting.instance import ErrorContext
from emulator.hosting.invocation_outcome import failed_call_samples
from emulator.hosting.multi_container import MultiContainerInstance, ServeMember

log = logging.getLogger(__name__)


@dataclass
class StreamAnswer:
    """The answer's headers, and its body: encoded events, to be sent as they come (close
    ``events`` if the client leaves: the call's bookkeeping ends there)."""

    headers: dict[str, str]
    events: AsyncGenerator[bytes, None]


class _Tally:
    """One streamed call's count on its component: counted in as an InvokeEndpoint call is
    (``ComponentCopies.arrive``), in flight from its routing to its end, recorded once."""

    def __init__(self, copies: ComponentCopies, started: float, copy_id: str) -> None:
        self._copies = copies
        self._started = started
        self._copy_id = copy_id  # the copy that answers it
        self.call: CallRecord = copies.arrive(started)
        self._done = False

    def _end(self, samples: list[tuple[str, float]]) -> None:
        if self._done:
            return
        self._done = True
        self._copies.leave()
        self.call.streamed(samples, self._copy_id)

    def failed(self, exc: BaseException | None) -> None:
        """Ended by an error (None: one without a status, such as the client leaving)."""
        if isinstance(exc, runtime_errors.SageMakerError):
            self._end(failed_call_samples(exc, time.monotonic() - self._started))
        else:
            self._end([("Invocation4XXErrors", 0), ("Invocation5XXErrors", 0),
                       ("InvocationModelErrors", 0)] if exc is not None else [])

    def stream_failed(self) -> None:
        """A ModelStreamError after the first byte [U: a model error, the status was 200]."""
        self._end([("Invocation4XXErrors", 0), ("Invocation5XXErrors", 0),
                   ("InvocationModelErrors", 1)])

    def succeeded(self, model_latency_s: float) -> None:
        overhead = time.monotonic() - self._started - model_latency_s
        self._end([("Invocation4XXErrors", 0), ("Invocation5XXErrors", 0),
                   ("InvocationModelErrors", 0), ("ModelLatency", model_latency_s * 1e6),
                   ("OverheadLatency", overhead * 1e6)])


def _serve_member(copy: Copy) -> ServeMember | None:
    """The SageMaker container a copy runs, if it is one (else: a Triton copy)."""
    if isinstance(copy, MultiContainerInstance) and len(copy.members) == 1:
        member = copy.members[0]
        if isinstance(member, ServeMember):
            return member
    return None


@contextlib.contextmanager
def _busy(copy: MultiContainerInstance) -> Iterator[None]:
    """The copy counts this call in flight, as its own ``invoke`` does, so that routing sees
    it and a drain waits for the stream's end."""
    copy.in_flight += 1
    copy._idle.clear()  # the drain's event; invoke() keeps it the same way
    try:
        yield
    finally:
        copy.in_flight -= 1
        if not copy.in_flight:
            copy._idle.set()


async def open_stream(endpoint: ComponentEndpoint, request: runtime.InvokeRequest
                      ) -> StreamAnswer:
    """Route the call to a ready copy and start its answer; raises a SageMakerError for what
    fails before the first byte."""
    started = time.monotonic()
    generation = endpoint.generation()  # a guarded UpdateEndpoint's share: its new fleet
    if isinstance(generation, ComponentEndpoint):
        endpoint = generation
    copies, state = endpoint.serving_copies(request)
    copy, _ = copies.choose(request)
    tally = _Tally(copies, started, copy.id)
    if endpoint.call_log is not None:
        tally.call.log_to(endpoint.call_log, request, state.variant,
                          "InvokeEndpointWithResponseStream")
    member = _serve_member(copy)
    try:
        if member is None:
            answer = await copy.invoke(request, None, started, endpoint.invocation_timeout_s)
        else:
            assert isinstance(copy, MultiContainerInstance)
            return await _open_container_stream(endpoint, request, state.variant, copy, member,
                                                tally, started)
    except BaseException as exc:
        tally.failed(exc if isinstance(exc, Exception) else None)
        raise
    tally.succeeded(answer.model_latency_s)
    headers = event_stream.response_headers(request.request_id, state.variant,
                                            answer.content_type, answer.custom_attributes)
    runtime.add_emulator_headers(headers, f"{state.variant}/{copy.id}")  # as InvokeEndpoint

    async def whole() -> AsyncGenerator[bytes, None]:
        for part in event_stream.payload_parts(answer.body):
            yield part

    return StreamAnswer(headers, whole())


async def _open_container_stream(endpoint: ComponentEndpoint, request: runtime.InvokeRequest,
                                 variant: str, copy: MultiContainerInstance, member: ServeMember,
                                 tally: _Tally, started: float) -> StreamAnswer:
    """``POST /invocations`` to the copy's container, its answer relayed piece by piece."""
    errors: ErrorContext = endpoint.errors
    timeout_s = endpoint.invocation_timeout_s
    headers: dict[str, Any] = {}
    if request.content_type:
        headers["Content-Type"] = request.content_type
    if request.accept:
        headers["Accept"] = request.accept
    if request.custom_attributes is not None:
        headers["X-Amzn-SageMaker-Custom-Attributes"] = request.custom_attributes
    stack = contextlib.AsyncExitStack()
    stack.enter_context(_busy(copy))
    try:
        session = await stack.enter_async_context(aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=max(timeout_s - (time.monotonic() - started),
                                                    0.001))))
        model_started = time.monotonic()
        try:
            response = await stack.enter_async_context(session.post(
                f"{member.container.http_url}/invocations", data=bytes(request.body),
                headers=headers))
        except asyncio.TimeoutError:
            raise errors.timed_out() from None
        except aiohttp.ClientError as exc:
            # [U] what a client sees when the container is gone or answers no HTTP.
            raise errors.model_error(500, f'{{"error":"{member.label} is unreachable: '
                                          f'{type(exc).__name__}"}}') from None
        if response.status != 200:
            try:
                body = await response.read()
            except (asyncio.TimeoutError, aiohttp.ClientError):
                body = b""
            raise errors.model_error(response.status, body.decode(errors="replace"))
    except BaseException:
        await stack.aclose()
        raise
    answer_headers = event_stream.response_headers(
        request.request_id, variant, response.headers.get("Content-Type") or "application/json",
        response.headers.get("X-Amzn-SageMaker-Custom-Attributes"))
    runtime.add_emulator_headers(answer_headers, f"{variant}/{copy.id}")

    async def relay() -> AsyncGenerator[bytes, None]:
        outcome = "client-left"
        try:
            async for piece in response.content.iter_any():
                for part in event_stream.payload_parts(piece):
                    yield part
            outcome = "done"
        except asyncio.TimeoutError:
            outcome = "failed"
            yield event_stream.model_stream_error(
                f"The model did not finish sending its response within {timeout_s:g} seconds.",
                event_stream.MODEL_INVOCATION_TIME_EXCEEDED)
        except aiohttp.ClientError as exc:
            outcome = "failed"
            log.info("request=%s the container's stream broke: %s", request.request_id, exc)
            yield event_stream.model_stream_error(
                "The connection to the model was closed before its response was complete.",
                event_stream.STREAM_BROKEN)
        finally:
            if outcome == "done":
                tally.succeeded(time.monotonic() - model_started)
            elif outcome == "failed":
                tally.stream_failed()
            else:
                tally.failed(None)
            await stack.aclose()

    return StreamAnswer(answer_headers, relay())
