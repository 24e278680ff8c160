"""The ``application/vnd.amazon.eventstream`` encoding: InvokeEndpointWithResponseStream's body.

botocore ships the decoder (``botocore.eventstream``); this is the encoder, for the events of
sagemaker-runtime's ``ResponseStream`` (botocore's model): ``PayloadPart`` (an event whose
payload is its ``Bytes``), and the two modelled exceptions ``ModelStreamError`` (Message,
ErrorCode) and ``InternalStreamFailure`` (Message), sent as exception events whose JSON payload
holds their members.

One message, every integer big-endian::

    total length (4) | headers length (4) | CRC32 of the 8 bytes before (4)
    headers: name length (1) | name | value type (1; 7 = string) | value length (2) | value
    payload
    CRC32 of everything before it (4)

No state and no I/O.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping, Sequence

from emulator.contract import runtime

CONTENT_TYPE = "application/vnd.amazon.eventstream"

_STRING = 7  # the header value type of a UTF-8 string
_PRELUDE = struct.Struct(">II")
_CRC = struct.Struct(">I")
_PRELUDE_AND_CRCS = _PRELUDE.size + 2 * _CRC.size
# The decoder's bounds (botocore.eventstream): at most 128 KiB of headers, 16 MiB in all.
MAX_HEADERS_BYTES = 128 * 1024
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024

# ModelStreamError's ErrorCode values, as AWS's API reference lists them.
MODEL_INVOCATION_TIME_EXCEEDED = "ModelInvocationTimeExceeded"  # the model took too long
STREAM_BROKEN = "StreamBroken"  # the connection to the model was reset or closed


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (struct.pack(">B", len(raw_name)) + raw_name
            + struct.pack(">BH", _STRING, len(raw_value)) + raw_value)


def message(headers: Sequence[tuple[str, str]], payload: bytes) -> bytes:
    """One event-stream message with these string headers and this payload."""
    encoded_headers = b"".join(_header(name, value) for name, value in headers)
    if len(encoded_headers) > MAX_HEADERS_BYTES:
        raise ValueError(f"event headers of {len(encoded_headers)} bytes exceed "
                         f"{MAX_HEADERS_BYTES}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"an event payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    prelude = _PRELUDE.pack(_PRELUDE_AND_CRCS + len(encoded_headers) + len(payload),
                            len(encoded_headers))
    head = prelude + _CRC.pack(zlib.crc32(prelude)) + encoded_headers
    return head + payload + _CRC.pack(zlib.crc32(payload, zlib.crc32(head)))


def payload_parts(data: bytes) -> list[bytes]:
    """``data`` as PayloadPart events: one, or more past the decoder's payload bound; none for
    no bytes."""
    headers = ((":event-type", "PayloadPart"), (":content-type", "application/octet-stream"),
               (":message-type", "event"))
    return [message(headers, data[start:start + MAX_PAYLOAD_BYTES])
            for start in range(0, len(data), MAX_PAYLOAD_BYTES)]


def _exception(shape: str, members: dict[str, str]) -> bytes:
    return message((
        (":exception-type", shape),
        (":content-type", "application/json"),
        (":message-type", "exception"),
    ), json.dumps(members).encode())


def model_stream_error(text: str, error_code: str) -> bytes:
    """The ModelStreamError event: the model's stream failed after its first bytes were sent."""
    return _exception("ModelStreamError", {"Message": text, "ErrorCode": error_code})


def internal_stream_failure(text: str) -> bytes:
    """The InternalStreamFailure event: the stream failed for a reason of the service's."""
    return _exception("InternalStreamFailure", {"Message": text})


# --- InvokeEndpointWithResponseStream's headers (botocore's model) ----------------------------

# The request's Accept travels in this header (InvokeEndpoint's is plain Accept).
H_STREAM_ACCEPT = "x-amzn-sagemaker-accept"


def request_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The request's (lower-case) headers as InvokeEndpoint's parser reads them: Accept is
    X-Amzn-SageMaker-Accept's (a plain Accept header is no member of this operation)."""
    mapped = {name: value for name, value in headers.items() if name != "accept"}
    if H_STREAM_ACCEPT in headers:
        mapped["accept"] = headers[H_STREAM_ACCEPT]
    return mapped


def response_headers(request_id: str, variant: str, content_type: str,
                     custom_attributes: str | None) -> dict[str, str]:
    """The answer's headers: the model's content type is X-Amzn-SageMaker-Content-Type, the
    body itself an event stream."""
    headers = runtime.response_headers(request_id, variant, CONTENT_TYPE, custom_attributes)
    return {"Content-Type": CONTENT_TYPE, "X-Amzn-SageMaker-Content-Type": content_type, **headers}
