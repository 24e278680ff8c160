"""Wire of Application Auto Scaling: JSON 1.1, ``X-Amz-Target: AnyScaleFrontendService.<Op>``.

Requests are validated against botocore's ``application-autoscaling`` model by the validator
every AWS API here shares (``contract/botocore_validation``: the same checks, and the same "N
validation errors detected" wording, as the SageMaker control plane), then by this service's own
rule (MaxResults' documented range); outputs keep only what the model's output shapes hold.
Errors: ``{"__type": ..., "Message": ...}``.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.model import OperationModel

from emulator.contract.apis import TARGET_PREFIX_OF, Service
from emulator.contract.botocore_output import project
from emulator.contract.botocore_validation import (
    constraint_failure,
    format_errors,
    service_model,
    validate_request,
)
from emulator.contract.json_errors import (
    SERIALIZATION,
    JsonProtocolError,
    UnreadableBody,
    read_body,
)

TARGET_PREFIX = TARGET_PREFIX_OF[Service.AUTOSCALING]
JSON_CONTENT_TYPE = "application/x-amz-json-1.1"

# MaxResults' range, where botocore's model documents it ("This value can be between 1 and 50")
# but does not constrain it; also each operation's page size when MaxResults is not given.
MAX_RESULTS = {
    "DescribeScalableTargets": 50,
    "DescribeScalingActivities": 50,
    "DescribeScalingPolicies": 10,
}

OPERATIONS = frozenset({
    "RegisterScalableTarget", "DeregisterScalableTarget", "DescribeScalableTargets",
    "PutScalingPolicy", "DescribeScalingPolicies", "DeleteScalingPolicy",
    "DescribeScalingActivities",
})


class ScalingError(JsonProtocolError):
    """Application Auto Scaling's error; its message member is ``Message``."""

    message_member = "Message"


def not_found(message: str) -> ScalingError:
    return ScalingError(message, "ObjectNotFoundException")


def _operation_model(operation: str) -> OperationModel:
    return service_model("application-autoscaling").operation_model(operation)


def parse_request(target: str, body: bytes) -> tuple[str, dict[str, Any]]:
    operation = target[len(TARGET_PREFIX):] if target.startswith(TARGET_PREFIX) else ""
    if operation not in OPERATIONS:
        raise ScalingError(f"Operation {operation or target!r} is not supported by the emulator "
                           f"(supported: {', '.join(sorted(OPERATIONS))})",
                           "UnknownOperationException")
    try:
        params = read_body(body)
        errors = validate_request(_operation_model(operation), params)
    except UnreadableBody as exc:  # not JSON, or nested too deeply to read or to validate
        raise ScalingError(str(exc), SERIALIZATION) from exc
    errors += _page_size_violations(operation, params)
    if errors:
        raise ScalingError(format_errors(errors))
    return operation, params


def _page_size_violations(operation: str, params: dict[str, Any]) -> list[str]:
    """MaxResults outside the range the model documents but does not constrain."""
    errors: list[str] = []
    page_size = params.get("MaxResults")
    if operation in MAX_RESULTS and isinstance(page_size, int) and not isinstance(page_size, bool):
        # [U] the service's wording for its documented range: the model's own constraint phrasing
        if page_size < 1:
            errors.append(constraint_failure("maxResults", page_size,
                                             "Member must have value greater than or equal to 1"))
        elif page_size > MAX_RESULTS[operation]:
            errors.append(constraint_failure(
                "maxResults", page_size,
                f"Member must have value less than or equal to {MAX_RESULTS[operation]}"))
    return errors


def encode_output(operation: str, value: dict[str, Any]) -> bytes:
    shape = _operation_model(operation).output_shape
    return json.dumps(project(shape, value) if shape else {}, separators=(",", ":")).encode()


def encode_error(error: ScalingError) -> bytes:
    return json.dumps(error.body()).encode()
