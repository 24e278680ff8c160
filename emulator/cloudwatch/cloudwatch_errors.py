"""CloudWatch's errors: the query-protocol code, the modelled shape name, the HTTP status.

CloudWatch is ``awsQueryCompatible``: over JSON and CBOR the body's ``__type`` names the shape
(``InvalidParameterValueException``) and the ``x-amzn-query-error`` header carries the code the
query protocol uses (``InvalidParameterValue;Sender``); botocore reports that code, so
``ClientError.response["Error"]["Code"]`` is the same over all three protocols.
"""

from __future__ import annotations

# query code -> modelled shape (botocore's cloudwatch model, "error": {"code": ...})
SHAPES = {
    "InvalidParameterValue": "InvalidParameterValueException",
    "MissingParameter": "MissingRequiredParameterException",
    "InvalidParameterCombination": "InvalidParameterCombinationException",
    "InvalidNextToken": "InvalidNextToken",
    "ResourceNotFound": "ResourceNotFound",
    "InternalServiceError": "InternalServiceFault",
    "InvalidAction": "InvalidAction",
    "ValidationError": "ValidationError",
    "InvalidFormat": "InvalidFormatFault",
    "LimitExceeded": "LimitExceededFault",
    "ResourceNotFoundException": "ResourceNotFoundException",
}


class CloudWatchError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    @property
    def shape(self) -> str:
        return SHAPES.get(self.code, self.code)

    @property
    def fault(self) -> str:
        return "Receiver" if self.status >= 500 else "Sender"


def invalid(message: str) -> CloudWatchError:
    return CloudWatchError("InvalidParameterValue", message)


def combination(message: str) -> CloudWatchError:
    return CloudWatchError("InvalidParameterCombination", message)
