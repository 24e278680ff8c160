"""One call's invocation metrics, whatever serves it: a production variant's instance or an
inference component's copy.

A call is counted once. Its arrival samples are taken as it is routed: Invocations, the group's
share per serving unit (InvocationsPerInstance, InvocationsPerCopy: 1 / the group's units) and
whatever else the group samples then. Its outcome adds the error counts and latencies
(``invocation_outcome``). The whole batch is recorded once the answer is written
(``CallSink.record_soon``: the bookkeeping does not stand between the model's answer and the
client's), or at once when the call is cut short (the client left, a stop: no answer will be
written). The group supplies the sink, its per-unit metric and its units count: the record
knows neither kind of group.

With ``mme serve --record`` the call's line is handed to the call log (``hosting.call_log``)
here too, once, as the call ends (``log_to``: set as the call arrives).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from emulator.contract import runtime_errors
from emulator.contract.runtime import InvokeRequest
from emulator.hosting.call_log import CallLog
from emulator.hosting.instance import ContainerAnswer
from emulator.hosting.invocation_outcome import Samples, failed_call_samples

# What an answered call adds before its latencies: no error of any kind.
_NO_ERRORS: tuple[tuple[str, float], ...] = (
    ("Invocation4XXErrors", 0), ("Invocation5XXErrors", 0), ("InvocationModelErrors", 0))


class CallSink(Protocol):
    """Where a serving group's call samples go, under the group's own dimensions."""

    def record_soon(self, samples: Sequence[tuple[str, float]],
                    unit_id: str | None, /) -> None:
        """Record once the event loop's current step is done (the answer is written then);
        ``unit_id``: the instance or copy that served the call (None: none was reached)."""

    def record_now(self, samples: Sequence[tuple[str, float]], unit_id: str | None, /) -> None:
        """Record at once."""

    def record_container_latencies(self, latencies: Sequence[tuple[str, float]], /) -> None:
        """(container, seconds) of each container an answered call went through."""


class CallRecord:
    """One call's samples from its arrival to its one recording."""

    __slots__ = ("_arrived", "_log", "_operation", "_request", "_sink", "_started", "_variant",
                 "samples")

    def __init__(self, sink: CallSink, started: float, per_unit_metric: str, units: int,
                 *also: tuple[str, float]) -> None:
        self._sink = sink
        self._started = started  # time.monotonic() as the call arrived
        self.samples: Samples = [("Invocations", 1), (per_unit_metric, 1 / max(units, 1)), *also]
        self._log: CallLog | None = None

    def log_to(self, call_log: CallLog, request: InvokeRequest, variant: str | None,
               operation: str = "InvokeEndpoint") -> None:
        """The call's line goes to ``call_log`` as it ends (``mme serve --record``)."""
        self._log = call_log
        self._request = request
        self._variant = variant
        self._operation = operation
        # The arrival on the wall clock: now, less what passed since ``started``.
        self._arrived = call_log.clock() - (time.monotonic() - self._started)

    def _logged(self, unit_id: str | None, status: int, error: str | None,
                model_latency_s: float | None, cache_hit: bool | None) -> None:
        assert self._log is not None
        self._log.add((self._arrived, self._operation, self._request, self._variant, unit_id,
                       status, error, time.monotonic() - self._started, model_latency_s,
                       cache_hit))

    def answered(self, answer: ContainerAnswer, unit_id: str) -> None:
        model_latency_s = answer.model_latency_s
        self.samples += (
            *_NO_ERRORS, ("ModelLatency", model_latency_s * 1e6),
            ("OverheadLatency", (time.monotonic() - self._started - model_latency_s) * 1e6))
        self._sink.record_soon(self.samples, unit_id)
        if answer.container_latencies:
            self._sink.record_container_latencies(answer.container_latencies)
        if self._log is not None:
            self._logged(unit_id, 200, None, model_latency_s, answer.cache_hit)

    def failed(self, exc: runtime_errors.SageMakerError, unit_id: str | None) -> None:
        """Answered with an error (``unit_id``: None when it failed before a unit was chosen)."""
        self.samples += failed_call_samples(exc, time.monotonic() - self._started)
        self._sink.record_soon(self.samples, unit_id)
        if self._log is not None:
            self._logged(unit_id, exc.status, exc.shape,
                         getattr(exc, "model_latency_s", None), None)

    def streamed(self, outcome: Samples, unit_id: str) -> None:
        """A streamed answer ended (its last event is sent, or the stream broke): ``outcome``'s
        samples added, the call recorded at once (``unit_id``: the copy that answered)."""
        self.samples += outcome
        self._sink.record_now(self.samples, unit_id)
        if self._log is not None:
            self._logged(unit_id, *_streamed_status(outcome))

    def cut_short(self, unit_id: str | None) -> None:
        """Counted, never answered (cancelled: the client left, a stop)."""
        self._sink.record_now(self.samples, unit_id)
        if self._log is not None:  # [U] status 499: nobody was answered (nginx's "client left")
            self._logged(unit_id, 499, "ClientClosedRequest", None, None)


def _streamed_status(outcome: Samples) -> tuple[int, str | None, float | None, None]:
    """A streamed call's (status, error, model latency s, cache hit) from the counts its end
    added (``component_streaming``): errors by kind, else 200 with its ModelLatency."""
    counts = dict(outcome)
    model_s = counts["ModelLatency"] / 1e6 if "ModelLatency" in counts else None
    errors_4xx, errors_5xx = counts.get("Invocation4XXErrors"), counts.get("Invocation5XXErrors")
    if counts.get("InvocationModelErrors") and (errors_4xx or errors_5xx):
        return 424, "ModelError", model_s, None  # the container's error, as InvokeEndpoint's
    if errors_5xx:  # [U] SageMaker's own error: its exact status is not in the counts
        return 500, "Error", model_s, None
    if errors_4xx:
        return 400, "Error", model_s, None
    if counts.get("InvocationModelErrors"):  # broke after its first byte: the status was 200
        return 200, "ModelStreamError", model_s, None
    if not counts:  # the client left
        return 499, "ClientClosedRequest", None, None
    return 200, None, model_s, None
