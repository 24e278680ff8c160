"""The event-stream encoder (emulator/contract/event_stream.py) read back by botocore's own
decoder and its sagemaker-runtime parser, as boto3 reads InvokeEndpointWithResponseStream."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.eventstream import ChecksumMismatch, EventStream, EventStreamBuffer
from botocore.exceptions import EventStreamError
from botocore.parsers import EventStreamJSONParser

from emulator.contract import event_stream


class _Raw:
    """What botocore's EventStream reads: a raw response's ``stream()``."""

    def __init__(self, data: bytes, piece: int) -> None:
        self._pieces = [data[i:i + piece] for i in range(0, len(data), piece)]

    def stream(self) -> Any:
        return iter(self._pieces)


def _events(data: bytes, piece: int = 7) -> EventStream:
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    output = model.operation_model("InvokeEndpointWithResponseStream").output_shape
    assert model.metadata["protocol"] == "rest-json"  # whose event streams this parser reads
    return EventStream(_Raw(data, piece), output.members["Body"], EventStreamJSONParser(),
                       "InvokeEndpointWithResponseStream")


def test_payload_parts_decode_to_their_bytes_whatever_the_pieces_they_arrive_in() -> None:
    data = b"".join(event_stream.payload_parts(b"first ") + event_stream.payload_parts(b"\x00\xff"))
    for piece in (1, 5, len(data)):
        assert [e["PayloadPart"]["Bytes"] for e in _events(data, piece)] == [b"first ", b"\x00\xff"]


def test_a_model_stream_error_after_parts_raises_after_them_with_its_message() -> None:
    data = b"".join([*event_stream.payload_parts(b"partial"), event_stream.model_stream_error(
        "the model stopped sending", event_stream.STREAM_BROKEN)])
    events = iter(_events(data))
    assert next(events) == {"PayloadPart": {"Bytes": b"partial"}}
    with pytest.raises(EventStreamError) as raised:
        next(events)
    assert raised.value.response["Error"] == {"Code": "ModelStreamError",
                                              "Message": "the model stopped sending"}


def test_an_internal_stream_failure_is_its_modelled_exception() -> None:
    with pytest.raises(EventStreamError) as raised:
        list(_events(event_stream.internal_stream_failure("lost")))
    assert raised.value.response["Error"]["Code"] == "InternalStreamFailure"


def test_the_checksums_are_checked_by_the_decoder() -> None:
    """Both CRC32s are real: a flipped payload byte is caught by botocore."""
    encoded = bytearray(event_stream.payload_parts(b"payload")[0])
    decoder = EventStreamBuffer()
    decoder.add_data(bytes(encoded))
    (decoded,) = list(decoder)
    assert decoded.headers[":event-type"] == "PayloadPart"
    encoded[-6] ^= 0xFF  # a payload byte
    broken = EventStreamBuffer()
    broken.add_data(bytes(encoded))
    with pytest.raises(ChecksumMismatch):
        list(broken)


def test_no_bytes_make_no_event_and_a_huge_payload_is_split_under_the_decoders_bound() -> None:
    assert event_stream.payload_parts(b"") == []
    huge = b"x" * (event_stream.MAX_PAYLOAD_BYTES + 3)
    parts = event_stream.payload_parts(huge)
    assert len(parts) == 2
    assert b"".join(e["PayloadPart"]["Bytes"] for e in _events(b"".join(parts), 1 << 20)) == huge
