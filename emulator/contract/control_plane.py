"""Wire format of the SageMaker control plane (JSON 1.1, ``X-Amz-Target: SageMaker.<Op>``).

Pure functions only: no state, no I/O besides reading botocore's bundled service model, which
is the single source of truth for member names, constraints and output shapes. A request is
checked against that model (``botocore_validation``, shared with the other AWS APIs), then
against the rules SageMaker adds across members (``sagemaker_rules``). The behaviour (what
exists, lifecycles) lives in ``emulator.control.service``.

Errors mirror what the real service sends for these operations: HTTP 400 with the body
``{"__type": "ValidationException", "message": ...}``. botocore's ``json`` parser reads the error
code only from ``__type``; none of these operations model ValidationException, so boto3 raises
a plain ``ClientError`` whose ``Code`` is ``ValidationException``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from botocore.model import OperationModel

from emulator.contract import sagemaker_rules
from emulator.contract.apis import TARGET_PREFIX_OF, Service
from emulator.contract.botocore_output import output_problems, project
from emulator.contract.botocore_validation import (
    format_errors,
    service_model,
    to_epoch,
    validate_request,
)
from emulator.contract.json_errors import (
    SERIALIZATION,
    JsonProtocolError,
    UnreadableBody,
    read_body,
)

DEFAULT_ACCOUNT = "123456789012"
JSON_CONTENT_TYPE = "application/x-amz-json-1.1"
TARGET_PREFIX = TARGET_PREFIX_OF[Service.SAGEMAKER]

OPERATIONS = frozenset(
    {
        "CreateModel",
        "DescribeModel",
        "ListModels",
        "DeleteModel",
        "CreateEndpointConfig",
        "DescribeEndpointConfig",
        "ListEndpointConfigs",
        "DeleteEndpointConfig",
        "CreateEndpoint",
        "DescribeEndpoint",
        "ListEndpoints",
        "UpdateEndpoint",
        "DeleteEndpoint",
        "UpdateEndpointWeightsAndCapacities",
        "ListTags",
    }
)

# Kinds as they appear in ARNs and in the service's "Could not find <kind>" messages.
KIND_MODEL = "model"
KIND_CONFIG = "endpoint-config"
KIND_ENDPOINT = "endpoint"
_KIND_WORDS = {
    KIND_MODEL: "model",
    KIND_CONFIG: "endpoint configuration",
    KIND_ENDPOINT: "endpoint",
}


class ControlPlaneError(JsonProtocolError):
    """An error the control plane answers with (status, ``__type``, ``message``)."""


def validation_error(message: str) -> ControlPlaneError:
    return ControlPlaneError(message)


def operation_model(operation: str) -> OperationModel:
    return service_model("sagemaker").operation_model(operation)


# ---------------------------------------------------------------------------------------------
# ARNs and messages


def arn(kind: str, name: str, region: str, account: str = DEFAULT_ACCOUNT) -> str:
    """SageMaker ARNs carry the lowercased resource name (observed: "DEMO-x" -> ".../demo-x")."""
    return f"arn:aws:sagemaker:{region}:{account}:{kind}/{name.lower()}"


def resource_limit_exceeded(message: str) -> ControlPlaneError:
    return ControlPlaneError(message, code="ResourceLimitExceeded")


def not_found(kind: str, resource_arn: str) -> ControlPlaneError:
    return validation_error(f'Could not find {_KIND_WORDS[kind]} "{resource_arn}".')


def already_exists(kind: str, resource_arn: str) -> ControlPlaneError:
    return validation_error(f'Cannot create already existing {_KIND_WORDS[kind]} "{resource_arn}".')


# ---------------------------------------------------------------------------------------------
# Requests: botocore's model (botocore_validation), then SageMaker's own rules (sagemaker_rules)


def parse_request(target: str | None, body: bytes) -> tuple[str, dict[str, Any]]:
    """Operation name and validated parameters of one JSON 1.1 request."""
    if not target or not target.startswith(TARGET_PREFIX):
        raise ControlPlaneError(
            f"Missing or invalid X-Amz-Target header {target!r}; expected SageMaker.<Operation>",
            code="UnknownOperationException",
        )
    operation = target[len(TARGET_PREFIX) :]
    if operation not in OPERATIONS:
        raise ControlPlaneError(
            f"Operation {operation} is not supported by the emulator "
            f"(supported: {', '.join(sorted(OPERATIONS))})",
            code="UnknownOperationException",
        )
    try:
        params = read_body(body)
        errors = validate_request(operation_model(operation), params,
                                  pattern_overrides=sagemaker_rules.PATTERN_OVERRIDES)
    except UnreadableBody as exc:  # not JSON, or nested too deeply to read or to validate
        raise ControlPlaneError(str(exc), SERIALIZATION) from exc
    errors += sagemaker_rules.violations(operation, params)
    if errors:
        raise validation_error(format_errors(errors))
    return operation, params


# ---------------------------------------------------------------------------------------------
# Outputs


def output(operation: str, value: dict[str, Any]) -> dict[str, Any]:
    shape = operation_model(operation).output_shape
    if shape is None:
        return {}
    projected: dict[str, Any] = project(shape, value)
    return projected


def check_output(operation: str, value: Any) -> list[str]:
    """Problems of an output against botocore's model: missing required members, wrong types.

    Used by the tests; the service's outputs must come back clean.
    """
    shape = operation_model(operation).output_shape
    if shape is None:
        return []
    return output_problems(shape, value, operation,
                           pattern_overrides=sagemaker_rules.PATTERN_OVERRIDES)


def encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# ---------------------------------------------------------------------------------------------
# Listing: filters, sorting, pagination

T = TypeVar("T")


def encode_token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def decode_token(token: str | None) -> int:
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(token.encode()))["offset"]
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise validation_error(f"Invalid pagination token {token!r}.") from exc
    if not isinstance(offset, int) or offset < 0:
        raise validation_error(f"Invalid pagination token {token!r}.")
    return offset


def list_page(
    items: Iterable[T],
    params: dict[str, Any],
    *,
    name: Callable[[T], str],
    created: Callable[[T], float],
    modified: Callable[[T], float] | None = None,
    status: Callable[[T], str] | None = None,
) -> tuple[list[T], str | None]:
    """Apply the List* filters, SortBy/SortOrder (default CreationTime, Descending), paginate."""
    selected = list(items)
    contains = params.get("NameContains")
    if contains:
        selected = [i for i in selected if contains.lower() in name(i).lower()]
    bounds: list[tuple[str, Callable[[T], float], Callable[[float, float], bool]]] = [
        ("CreationTimeBefore", created, lambda t, b: t < b),
        ("CreationTimeAfter", created, lambda t, b: t > b),
    ]
    if modified is not None:
        bounds += [
            ("LastModifiedTimeBefore", modified, lambda t, b: t < b),
            ("LastModifiedTimeAfter", modified, lambda t, b: t > b),
        ]
    for key, get, keep in bounds:
        bound = to_epoch(params.get(key)) if params.get(key) is not None else None
        if bound is not None:
            selected = [i for i in selected if keep(get(i), bound)]
    if status is not None and params.get("StatusEquals"):
        selected = [i for i in selected if status(i) == params["StatusEquals"]]
    sort_by = params.get("SortBy", "CreationTime")
    key_fn: Callable[[T], Any]
    if sort_by == "Name":
        key_fn = lambda i: (name(i).lower(), created(i))  # noqa: E731
    elif sort_by == "Status" and status is not None:
        key_fn = lambda i: (status(i), created(i))  # noqa: E731
    else:
        key_fn = lambda i: (created(i), name(i).lower())  # noqa: E731
    selected.sort(key=key_fn, reverse=params.get("SortOrder", "Descending") == "Descending")
    offset = decode_token(params.get("NextToken"))
    limit = int(params.get("MaxResults") or 10)
    page = selected[offset : offset + limit]
    token = encode_token(offset + limit) if offset + limit < len(selected) else None
    return page, token
