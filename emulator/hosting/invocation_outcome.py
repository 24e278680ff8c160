"""How a failed call is counted in the invocation metrics, as AWS's metric list describes it.

- ``Invocation4XXErrors`` / ``Invocation5XXErrors``: "the number of InvokeEndpoint requests
  where the model returned a 4xx (5xx) HTTP response code. For each 4xx (5xx) response, 1 is
  sent; otherwise, 0 is sent". A ModelError is counted by the status the *model* answered with
  (``OriginalStatusCode``), not by the 424 the client gets: a model that answers 500 moves
  Invocation5XXErrors. A call the model did not answer in time (``OriginalStatusCode`` 0) is
  counted as a 5xx [U]. Any other error (a ValidationError, a ModelNotReadyException, ...) is
  SageMaker's own answer, counted by the status the client gets [U].
- ``InvocationModelErrors``: 1 for a ModelError, else 0.
- ``ModelLatency`` / ``OverheadLatency``: "the interval of time taken by a model to respond",
  so recorded for a call the model answered, an error answer included; not for a call the
  model never answered (a timeout, a load that failed, a refusal before the container) [U].
"""

from __future__ import annotations

from emulator.contract import runtime_errors

Samples = list[tuple[str, float]]


def failed_call_samples(exc: runtime_errors.SageMakerError, elapsed_s: float) -> Samples:
    """The samples a failed call adds to its Invocations (``elapsed_s``: since it arrived)."""
    status = exc.status
    model_error = isinstance(exc, runtime_errors.ModelError)
    model_latency_s: float | None = None
    if isinstance(exc, runtime_errors.ModelError):
        status = exc.original_status or 500
        model_latency_s = exc.model_latency_s
    samples: Samples = [("Invocation4XXErrors", 1 if 400 <= status < 500 else 0),
                        ("Invocation5XXErrors", 1 if status >= 500 else 0),
                        ("InvocationModelErrors", 1 if model_error else 0)]
    if model_latency_s is not None:
        samples += [("ModelLatency", model_latency_s * 1e6),
                    ("OverheadLatency", max(elapsed_s - model_latency_s, 0.0) * 1e6)]
    return samples
