"""Wire format of the SageMaker control plane (JSON 1.1, ``X-Amz-Target: SageMaker.<Op>``).

Pure functions only: no state, no I/O besides reading botocore's bundled service model, which
is the single source of truth for member names, constraints and output shapes. The behaviour
(what exists, lifecycles) lives in ``emulator.control.service``.

Errors mirror what the real service sends for these operations: HTTP 400 with the body
``{"__type": "ValidationException", "message": ...}``. botocore's ``json`` parser reads the error
code only from ``__type``; none of these operations model ValidationException, so boto3 raises
a plain ``ClientError`` whose ``Code`` is ``ValidationException``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

from botocore.model import ListShape, MapShape, OperationModel, ServiceModel, Shape, StructureShape

from emulator.contract import multi_container
from emulator.contract.json_errors import (
    SERIALIZATION,
    TOO_DEEP,
    JsonProtocolError,
    UnreadableBody,
    read_body,
)

DEFAULT_ACCOUNT = "123456789012"
JSON_CONTENT_TYPE = "application/x-amz-json-1.1"
TARGET_PREFIX = "SageMaker."

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

# The real service only takes S3 (or https S3) URLs; the emulator also serves model stores from
# local folders, so ModelDataUrl may be a ``file://`` URL or an absolute path here.
_PATTERN_OVERRIDES = {"Url": r"(https|s3)://([^/]+)/?(.*)|file://.*|/.*"}


# The largest finite IEEE 754 single-precision value: the bound of the model's "float" members.
FLOAT32_MAX = 3.4028234663852886e38


class ControlPlaneError(JsonProtocolError):
    """An error the control plane answers with (status, ``__type``, ``message``)."""


def validation_error(message: str) -> ControlPlaneError:
    return ControlPlaneError(message)


# ---------------------------------------------------------------------------------------------
# Service model


@functools.lru_cache(maxsize=1)
def service_model() -> ServiceModel:
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


def operation_model(operation: str) -> OperationModel:
    return service_model().operation_model(operation)


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
# Request parsing and validation


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
    except UnreadableBody as exc:
        raise ControlPlaneError(str(exc), SERIALIZATION) from exc
    try:
        errors = validate(operation_model(operation).input_shape, params)
        _check_semantics(operation, params, errors)
    except RecursionError as exc:  # a recursive shape walked as deep as the body nests
        raise ControlPlaneError(TOO_DEEP, SERIALIZATION) from exc
    if errors:
        raise validation_error(format_errors(errors))
    return operation, params


def format_errors(errors: Sequence[str]) -> str:
    noun = "error" if len(errors) == 1 else "errors"
    return f"{len(errors)} validation {noun} detected: " + "; ".join(errors)


_UNICODE_CLASSES = {
    r"\p{L}": r"a-zA-Z\u00c0-\uffff",
    r"\p{Z}": r" \u00a0\u2000-\u200b",
    r"\p{N}": r"0-9",
    r"\p{Print}": r"\x20-\x7e",
}


def _java_to_python_pattern(pattern: str) -> str:
    """botocore copies the service's Java patterns; translate the few Unicode classes they use,
    as ranges inside a character class and as a class of their own outside one."""
    out, index, in_class = [], 0, False
    while index < len(pattern):
        name = next((n for n in _UNICODE_CLASSES if pattern.startswith(n, index)), None)
        if name is not None:
            ranges = _UNICODE_CLASSES[name]
            out.append(ranges if in_class else f"[{ranges}]")
            index += len(name)
            continue
        char = pattern[index]
        if char == "\\":
            out.append(pattern[index:index + 2])
            index += 2
            continue
        if char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        out.append(char)
        index += 1
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(_java_to_python_pattern(pattern), re.DOTALL)
    except re.error:
        return None  # a construct Python lacks: skip this check rather than reject valid input


def _camel(member: str) -> str:
    return member[:1].lower() + member[1:]


def _render(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "'true'" if value else "'false'"
    if isinstance(value, str):
        return f"'{value}'"
    try:
        text = json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError):  # what CBOR carries and JSON cannot: bytes, tags, tuple keys
        text = repr(value)
    return f"'{text}'"


def constraint_failure(path: str, value: Any, constraint: str) -> str:
    """One constraint violation, phrased as the service does (for checks made elsewhere)."""
    return f"Value {_render(value)} at '{path}' failed to satisfy constraint: {constraint}"


_fail = constraint_failure


def validate(shape: Shape, value: Any, path: str = "") -> list[str]:
    """Constraint violations of ``value`` against ``shape``, phrased as the service does."""
    errors: list[str] = []
    _validate(shape, value, path, errors)
    return errors


def _validate(shape: Shape, value: Any, path: str, errors: list[str]) -> None:
    meta = shape.metadata
    kind = shape.type_name
    if kind == "structure":
        assert isinstance(shape, StructureShape)
        if not isinstance(value, dict):
            errors.append(_fail(path, value, "Member must be a structure"))
            return
        for name in shape.required_members:
            if value.get(name) is None:
                errors.append(_fail(_join(path, name), None, "Member must not be null"))
        for name, member in shape.members.items():
            if value.get(name) is not None:
                _validate(member, value[name], _join(path, name), errors)
        return
    if kind == "list":
        assert isinstance(shape, ListShape)
        if not isinstance(value, list):
            errors.append(_fail(path, value, "Member must be a list"))
            return
        _check_length(meta, len(value), path, value, errors)
        for index, item in enumerate(value, start=1):
            _validate(shape.member, item, f"{path}.{index}.member", errors)
        return
    if kind == "map":
        assert isinstance(shape, MapShape)
        if not isinstance(value, dict):
            errors.append(_fail(path, value, "Member must be a map"))
            return
        _check_length(meta, len(value), path, value, errors)
        for key, item in value.items():
            before = len(errors)
            _validate(shape.key, key, path, errors)
            if len(errors) > before:
                # Report a bad key once, with the key itself, like the service does for maps.
                del errors[before:]
                errors.append(
                    _fail(path, key, "Map keys must satisfy constraint: " + _key_rule(shape.key))
                )
            _validate(shape.value, item, f"{path}.{key}", errors)
        return
    if kind == "string":
        if not isinstance(value, str):
            errors.append(_fail(path, value, "Member must be a string"))
            return
        _check_length(meta, len(value), path, value, errors)
        enum = meta.get("enum")
        if enum and value not in enum:
            errors.append(
                _fail(path, value, f"Member must satisfy enum value set: [{', '.join(enum)}]")
            )
        pattern = _PATTERN_OVERRIDES.get(shape.name, meta.get("pattern"))
        if pattern and not enum:
            compiled = _compiled(pattern)
            if compiled is not None and compiled.fullmatch(value) is None:
                errors.append(
                    _fail(path, value, f"Member must satisfy regular expression pattern: {pattern}")
                )
        return
    if kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(_fail(path, value, "Member must be an integer"))
            return
        _check_range(meta, value, path, errors)
        return
    if kind in ("float", "double"):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            errors.append(_fail(path, value, "Member must be a number"))
            return
        if kind == "float" and abs(value) > FLOAT32_MAX:
            # [U] wording. A "float" member is 32 bits on the service (VariantWeight): a larger
            # value is no weight, and two of them summed overflow.
            errors.append(_fail(path, value, "Member must be a 32-bit floating-point number "
                                f"(at most {FLOAT32_MAX:.7e} in magnitude)"))
            return
        _check_range(meta, value, path, errors)
        return
    if kind == "boolean":
        if not isinstance(value, bool):
            errors.append(_fail(path, value, "Member must be a boolean"))
        return
    if kind == "timestamp":
        if to_epoch(value) is None:
            errors.append(_fail(path, value, "Member must be a timestamp"))
        return


def _join(path: str, member: str) -> str:
    return f"{path}.{_camel(member)}" if path else _camel(member)


def _key_rule(shape: Shape) -> str:
    rules = []
    if "max" in shape.metadata:
        rules.append(f"Member must have length less than or equal to {shape.metadata['max']}")
    if "pattern" in shape.metadata:
        rules.append(f"Member must satisfy regular expression pattern: {shape.metadata['pattern']}")
    return "[" + ", ".join(rules) + "]"


def _check_length(meta: dict[str, Any], length: int, path: str, value: Any,
                  errors: list[str]) -> None:
    if "max" in meta and length > meta["max"]:
        errors.append(
            _fail(path, value, f"Member must have length less than or equal to {meta['max']}")
        )
    if "min" in meta and length < meta["min"]:
        errors.append(
            _fail(path, value, f"Member must have length greater than or equal to {meta['min']}")
        )


def _check_range(meta: dict[str, Any], value: float, path: str, errors: list[str]) -> None:
    if "max" in meta and value > meta["max"]:
        errors.append(
            _fail(path, value, f"Member must have value less than or equal to {meta['max']}")
        )
    if "min" in meta and value < meta["min"]:
        errors.append(
            _fail(path, value, f"Member must have value greater than or equal to {meta['min']}")
        )


def _check_semantics(operation: str, params: dict[str, Any], errors: list[str]) -> None:
    """Rules the service enforces beyond the shape constraints (stateless ones only)."""
    if operation == "CreateModel":
        primary, containers = params.get("PrimaryContainer"), params.get("Containers")
        if primary is None and not containers:
            errors.append("Either PrimaryContainer or Containers must be specified.")
        if primary is not None and containers:
            errors.append("Specify either PrimaryContainer or Containers, not both.")
        found = [primary] if isinstance(primary, dict) else []
        found += [c for c in containers or [] if isinstance(c, dict)]
        for container in found:
            if container.get("Mode") == "MultiModel" and not container.get("ModelDataUrl"):
                errors.append("ModelDataUrl is required when the container Mode is MultiModel.")
        _check_containers(params, found, errors)
    elif operation == "UpdateEndpointWeightsAndCapacities":
        changes = [c for c in params.get("DesiredWeightsAndCapacities") or []
                   if isinstance(c, dict)]
        names = [c.get("VariantName") for c in changes]
        if len(set(names)) != len(names):
            errors.append("Each VariantName may appear only once in DesiredWeightsAndCapacities.")
        for change in changes:
            if "DesiredWeight" not in change and "DesiredInstanceCount" not in change:
                errors.append(f"Specify DesiredWeight or DesiredInstanceCount for variant "
                              f"{change.get('VariantName')}.")
            if change.get("DesiredInstanceCount") == 0:
                # [U] scaling a variant to 0 instances is for inference-component endpoints.
                errors.append(f"DesiredInstanceCount for variant {change.get('VariantName')} "
                              "must be at least 1.")
    elif operation == "CreateEndpointConfig":
        variants = [v for v in params.get("ProductionVariants") or [] if isinstance(v, dict)]
        names = [v.get("VariantName") for v in variants]
        if len(set(names)) != len(names):
            errors.append("Production variant names must be unique within an endpoint config.")
        weights = [v.get("InitialVariantWeight", 1.0) for v in variants]
        if variants and all(isinstance(w, (int, float)) for w in weights) and sum(weights) <= 0:
            # [U] wording: a config whose variants all weigh 0 would receive no traffic at all.
            errors.append("The sum of InitialVariantWeight across production variants must be "
                          "greater than 0.")
        for variant in variants:
            if not variant.get("ModelName"):
                errors.append(
                    f"ModelName is required for production variant {variant.get('VariantName')}."
                )
            if not variant.get("InstanceType") and not variant.get("ServerlessConfig"):
                errors.append(
                    f"InstanceType or ServerlessConfig is required for production variant "
                    f"{variant.get('VariantName')}."
                )


def _check_containers(params: dict[str, Any], found: list[dict[str, Any]],
                      errors: list[str]) -> None:
    """Multi-container models: hostnames (required for Direct, unique) and no multi-model
    container among several (SageMaker's rule and message)."""
    execution = params.get("InferenceExecutionConfig") or {}
    direct = isinstance(execution, dict) and execution.get("Mode") == "Direct"
    if direct and any(not c.get("ContainerHostname") for c in found):
        errors.append(multi_container.hostname_required_for_direct())
    hostnames = [c["ContainerHostname"] for c in found if c.get("ContainerHostname")]
    for hostname in sorted({h for h in hostnames if hostnames.count(h) > 1}):
        errors.append(multi_container.duplicate_hostname(hostname))
    if len(found) > 1:
        multi_model = sum(1 for c in found if c.get("Mode") == "MultiModel")
        if multi_model > 1:
            errors.append(multi_container.multi_model_in_pipeline())
        elif multi_model == 1:
            errors.append(multi_container.multi_model_with_others())


# ---------------------------------------------------------------------------------------------
# Timestamps


# The instants a timestamp may name: those a datetime holds (years 1 to 9999, UTC). [U] AWS's
# services parse timestamps into such a type; NaN, Infinity and 1e300 are not instants.
_FIRST_INSTANT = datetime(1, 1, 1, tzinfo=timezone.utc).timestamp()
_LAST_INSTANT = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp()


def to_epoch(value: Any) -> float | None:
    """botocore's JSON protocol sends timestamps as epoch seconds; accept ISO 8601 as well.
    None for anything that is not an instant (NaN, Infinity, out of a datetime's range)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        epoch = float(value) if abs(value) < 1e300 else math.inf  # a huge int is no instant
    elif isinstance(value, str):
        try:
            epoch = float(value)
        except ValueError:
            try:
                epoch = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except (ValueError, OverflowError):
                return None
    else:
        return None
    return epoch if _FIRST_INSTANT <= epoch <= _LAST_INSTANT else None


# ---------------------------------------------------------------------------------------------
# Output shaping


def project(shape: Shape, value: Any) -> Any:
    """Keep only what ``shape`` models (recursively), so outputs never carry stray members."""
    if value is None:
        return None
    if isinstance(shape, StructureShape) and isinstance(value, dict):
        out = {}
        for name, member in shape.members.items():
            if value.get(name) is not None:
                out[name] = project(member, value[name])
        return out
    if isinstance(shape, ListShape) and isinstance(value, list):
        return [project(shape.member, item) for item in value]
    if isinstance(shape, MapShape) and isinstance(value, dict):
        return {key: project(shape.value, item) for key, item in value.items()}
    return value


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
    problems: list[str] = []
    if shape is not None:
        _check_out(shape, value, operation, problems)
    return problems


def _check_out(shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    kind = shape.type_name
    ok: bool
    if kind == "structure":
        assert isinstance(shape, StructureShape)
        if not isinstance(value, dict):
            problems.append(f"{path}: expected an object, got {type(value).__name__}")
            return
        for name in shape.required_members:
            if value.get(name) is None:
                problems.append(f"{path}.{name}: required member missing")
        for name, item in value.items():
            if name not in shape.members:
                problems.append(f"{path}.{name}: not a member of {shape.name}")
            elif item is not None:
                _check_out(shape.members[name], item, f"{path}.{name}", problems)
        return
    if kind == "list":
        assert isinstance(shape, ListShape)
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list")
            return
        for index, item in enumerate(value):
            _check_out(shape.member, item, f"{path}[{index}]", problems)
        return
    if kind == "map":
        assert isinstance(shape, MapShape)
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a map")
            return
        for key, item in value.items():
            _check_out(shape.value, item, f"{path}.{key}", problems)
        return
    if kind == "string":
        ok = isinstance(value, str) and (not shape.enum or value in shape.enum)
    elif kind in ("integer", "long"):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind in ("float", "double"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "timestamp":
        # The JSON protocol's timestamps are epoch seconds (numbers), e.g. 1529870369.986.
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = True
    if not ok:
        problems.append(f"{path}: {value!r} is not a valid {kind} ({shape.name})")
        return
    if kind == "string":
        errors = validate(shape, value, path)
        problems.extend(errors)


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
