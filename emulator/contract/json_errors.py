"""The error every JSON-protocol AWS API on the emulator's port answers with.

SageMaker's control plane and Application Auto Scaling (JSON 1.1) both answer
``{"__type": <code>, <message member>: <text>}`` with an HTTP status; they differ only in the
case of the message member, which each service's subclass names.
"""

from __future__ import annotations

from typing import ClassVar


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
