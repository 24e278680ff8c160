"""Request bodies botocore compresses (``Content-Encoding: gzip``): inflated up to a bound, and
read by IAM as by the service."""

from __future__ import annotations

import gzip
import urllib.parse

import pytest

from emulator.auth.requests import classify
from emulator.contract import request_compression

FORM = {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}


def test_inflate_is_bounded() -> None:
    plain = b"Action=PutMetricData&" * 100
    assert request_compression.inflate(gzip.compress(plain), {"content-encoding": "gzip"},
                                       10_000) == plain
    two = gzip.compress(b"ab") + gzip.compress(b"cd")  # several members, one after the other
    assert request_compression.inflate(two, {"content-encoding": "gzip"}, 10) == b"abcd"
    assert request_compression.inflate(plain, {}, 10) == plain  # not compressed: as sent
    with pytest.raises(request_compression.TooLarge):
        request_compression.inflate(gzip.compress(b"\0" * 1_000_000),
                                    {"content-encoding": "gzip"}, 10_000)
    with pytest.raises(request_compression.Undecodable):
        request_compression.inflate(gzip.compress(plain)[:-12], {"content-encoding": "gzip"},
                                    10_000)
    with pytest.raises(request_compression.Undecodable):
        request_compression.inflate(b"not gzip", {"content-encoding": "gzip"}, 10_000)
    with pytest.raises(request_compression.Undecodable):
        request_compression.inflate(plain, {"content-encoding": "br"}, 10_000)


def test_iam_reads_the_action_of_a_compressed_query_body() -> None:
    body = gzip.compress(urllib.parse.urlencode({
        "Action": "PutMetricData", "Version": "2010-08-01", "Namespace": "CI"}).encode())
    call = classify("POST", "/", {**FORM, "content-encoding": "gzip"}, body, "us-east-1",
                    "123456789012")
    assert call is not None and call.action == "cloudwatch:PutMetricData"
    # a body that does not inflate is no call IAM could allow (the service refuses it too)
    assert classify("POST", "/", {**FORM, "content-encoding": "gzip"}, b"junk", "us-east-1",
                    "123456789012") is None
