"""Request bodies a client compressed: ``Content-Encoding: gzip``, as botocore sends an operation
whose service model has the ``requestcompression`` trait (CloudWatch's PutMetricData, once its
body reaches 10,240 bytes; the AWS SDKs' default since 2024).

A body is inflated up to a bound and no further: one that would inflate past it (a gzip bomb:
a few KB that inflate to gigabytes) is ``TooLarge`` without ever being held whole.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

GZIP = "gzip"


class TooLarge(ValueError):
    """The body inflates past the bound."""


class Undecodable(ValueError):
    """The body is not what its Content-Encoding says, or the encoding is not one served."""


def encodings(headers: Mapping[str, str]) -> list[str]:
    """The content codings applied to the body, in the order they were applied."""
    value = headers.get("content-encoding", "")
    return [e.strip().lower() for e in value.split(",") if e.strip()
            and e.strip().lower() != "identity"]


def inflate(body: bytes, headers: Mapping[str, str], limit: int) -> bytes:
    """The body as sent before compression, at most ``limit`` bytes."""
    for coding in reversed(encodings(headers)):
        if coding != GZIP:
            raise Undecodable(f"Content-Encoding {coding} is not supported (gzip is).")
        body = _gunzip(body, limit)
    return body


def _gunzip(data: bytes, limit: int) -> bytes:
    out = bytearray()
    while True:  # a gzip file may hold several members, one after the other
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error as exc:
            raise Undecodable(f"The body is not valid gzip: {exc}.") from exc
        if len(out) > limit or inflater.unconsumed_tail:
            raise TooLarge(f"The body inflates to more than {limit} bytes.")
        if not inflater.eof:
            raise Undecodable("The body is not valid gzip: it ends before the gzip stream.")
        data = inflater.unused_data
        if not data:
            return bytes(out)
