"""``mme loadtest --async``'s driver (``harness.loadtest.async_load``) against fakes: accepted,
refused, answered, failed and unfinished counted; percentiles by nearest rank."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

from harness.loadtest import async_load


class FakeRuntime:
    """Every third call refused; the others accepted, answered in S3 (``s3``), or failed, or
    never, in turn."""

    def __init__(self, s3: FakeS3) -> None:
        self.s3 = s3
        self.count = itertools.count()
        self.lock = threading.Lock()

    def invoke_endpoint_async(self, **kwargs: Any) -> dict[str, Any]:
        with self.lock:
            n = next(self.count)
        if n % 3 == 2:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}},
                              "InvokeEndpointAsync")
        out, failure = f"s3://b/out/{n}.out", f"s3://b/failed/{n}-error.out"
        if n % 3 == 0:
            self.s3.objects.add(out)
        elif n % 6 == 1:
            self.s3.objects.add(failure)
        return {"InferenceId": str(n), "OutputLocation": out, "FailureLocation": failure}


class FakeS3:
    def __init__(self) -> None:
        self.objects: set[str] = set()

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        if f"s3://{Bucket}/{Key}" not in self.objects:
            raise ClientError({"Error": {"Code": "404"}}, "HeadObject")
        return {}


def test_a_run_counts_each_outcome() -> None:
    s3 = FakeS3()
    run = async_load.run_async_load(FakeRuntime(s3), s3, "ep", b"{}", "application/json",
                                    users=2, duration_s=1.0, think_time_s=0.01,
                                    result_timeout_s=0.2, poll_s=0.005)
    summary = run.summary()  # every outcome needs five calls: a second leaves a starved runner room
    assert summary["accepted"] == run.answered + run.failed + len(run.unfinished)
    assert run.answered and run.failed and run.unfinished
    assert summary["refused"]["ThrottlingException"] >= 1
    assert summary["time_to_result_ms"]["p50"] is not None
    assert "time to result in S3" in async_load.to_markdown(summary, "ep")


def test_percentiles_are_nearest_rank_in_milliseconds() -> None:
    figures = async_load._percentiles([i / 1000 for i in range(1, 101)])
    assert figures == {"p50": 50.0, "p90": 90.0, "p99": 99.0, "max": 100.0}
    assert async_load._percentiles([])["p50"] is None


def test_an_inline_body_over_128000_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 128000"):
        async_load.run_async_load(None, None, "ep", b"x" * 128_001, "a/b", 1, 1.0)
