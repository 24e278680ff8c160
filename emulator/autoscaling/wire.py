"""Wire of Application Auto Scaling: JSON 1.1, ``X-Amz-Target: AnyScaleFrontendService.<Op>``.

Requests are validated against botocore's ``application-autoscaling`` model (the same checks,
and the same "N validation errors detected" wording, as the SageMaker control plane); outputs
keep only what the model's output shapes hold. Errors: ``{"__type": ..., "Message": ...}``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from botocore.model import ServiceModel

from emulator.contract.control_plane import format_errors, project, validate
from emulator.contract.json_errors import JsonProtocolError

TARGET_PREFIX = "AnyScaleFrontendService."
JSON_CONTENT_TYPE = "application/x-amz-json-1.1"

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


@functools.lru_cache(maxsize=1)
def service_model() -> ServiceModel:
    import botocore.session

    loader = botocore.session.get_session().get_component("data_loader")
    raw = loader.load_service_model("application-autoscaling", "service-2")
    return ServiceModel(raw, "application-autoscaling")


def parse_request(target: str, body: bytes) -> tuple[str, dict[str, Any]]:
    operation = target[len(TARGET_PREFIX):] if target.startswith(TARGET_PREFIX) else ""
    if operation not in OPERATIONS:
        raise ScalingError(f"Operation {operation or target!r} is not supported by the emulator "
                           f"(supported: {', '.join(sorted(OPERATIONS))})",
                           "UnknownOperationException")
    try:
        params = json.loads(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise ScalingError(f"Could not parse the request body as JSON: {exc}",
                           "SerializationException") from exc
    if not isinstance(params, dict):
        raise ScalingError("The request body must be a JSON object", "SerializationException")
    errors = validate(service_model().operation_model(operation).input_shape, params)
    if errors:
        raise ScalingError(format_errors(errors))
    return operation, params


def encode_output(operation: str, value: dict[str, Any]) -> bytes:
    shape = service_model().operation_model(operation).output_shape
    return json.dumps(project(shape, value) if shape else {}, separators=(",", ":")).encode()


def encode_error(error: ScalingError) -> bytes:
    return json.dumps(error.body()).encode()
