"""An AWS error in the shape of the API's protocol, as botocore parses it.

For errors the front door answers before any service sees the request (auth, a body too large
to read): JSON services (sagemaker-runtime's rest-json, JSON 1.0/1.1) take ``__type`` and
``message``, CloudWatch's smithy RPC v2 CBOR the same members in CBOR, and its query protocol an
XML ``ErrorResponse``. The services' own errors render themselves (``contract/runtime_errors.py``,
``cloudwatch/wire.py``, ...).
"""

from __future__ import annotations

import json
import uuid
from xml.sax.saxutils import escape

import cbor2

from emulator.contract.apis import Protocol

Rendered = tuple[int, list[tuple[bytes, bytes]], bytes]


def render_error(protocol: Protocol, code: str, status: int, message: str) -> Rendered:
    """Status, headers and body of one error in ``protocol``'s own shape."""
    request_id = str(uuid.uuid4())
    headers = [(b"x-amzn-requestid", request_id.encode())]
    if protocol is Protocol.QUERY:
        kind = "Receiver" if status >= 500 else "Sender"
        body = (f'<ErrorResponse xmlns="http://monitoring.amazonaws.com/doc/2010-08-01/">'
                f"<Error><Type>{kind}</Type><Code>{escape(code)}</Code>"
                f"<Message>{escape(message)}</Message></Error>"
                f"<RequestId>{request_id}</RequestId></ErrorResponse>").encode()
        headers.append((b"content-type", b"text/xml"))
    elif protocol is Protocol.CBOR:
        body = cbor2.dumps({"__type": code, "message": message})
        headers += [(b"content-type", b"application/cbor"), (b"smithy-protocol", b"rpc-v2-cbor")]
    else:
        body = json.dumps({"__type": code, "message": message}).encode()
        content_type = b"application/json" if protocol is Protocol.REST_JSON \
            else b"application/x-amz-json-1.1"
        headers += [(b"x-amzn-errortype", code.encode()), (b"content-type", content_type)]
    headers.append((b"content-length", str(len(body)).encode()))
    return status, headers, body
