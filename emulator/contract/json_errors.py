"""The error every JSON-protocol AWS API on the emulator's port answers with, and the one way
they all read a request body.

SageMaker's control plane and Application Auto Scaling (JSON 1.1) both answer
``{"__type": <code>, <message member>: <text>}`` with an HTTP status; they differ only in the
case of the message member, which each service's subclass names. CloudWatch's JSON 1.0 has an
error of its own (``emulator/cloudwatch/cloudwatch_errors.py``) but reads its bodies with
``read_body`` too.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

SERIALIZATION = "SerializationException"


class JsonProtocolError(Exception):
    """An error answered as (status, ``__type``, message)."""

    message_member: ClassVar[str] = "message"

    def __init__(self, message: str, code: str = "ValidationException", status: int = 400):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def body(self) -> dict[str, str]:
        return {"__type": self.code, self.message_member: self.message}


class UnreadableBody(ValueError):
    """A body that is not a JSON object: the service answers SerializationException with
    ``str(self)``."""


# [U] No AWS service publishes its nesting limit or message; none of their requests nests more
#     than a few dozen levels, and Python's parser gives up (RecursionError) near 1,000.
TOO_DEEP = ("Could not parse the request body: JSON nested too deeply; no request to this API "
            "nests more than a few dozen levels")


def read_body(body: bytes) -> dict[str, Any]:
    """The request's parameters: an empty body is ``{}``; anything but a JSON object, or one
    nested too deeply to parse, is ``UnreadableBody``."""
    try:
        params = json.loads(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnreadableBody(f"Could not parse the request body as JSON: {exc}") from exc
    except RecursionError as exc:
        raise UnreadableBody(TOO_DEEP) from exc
    if not isinstance(params, dict):
        raise UnreadableBody("The request body must be a JSON object")
    return params
