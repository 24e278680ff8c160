"""Requests checked against botocore's service models, as AWS's front ends check them.

One validator for every AWS API the emulator speaks (SageMaker's control plane, Application Auto
Scaling, CloudWatch): the model's types, required members, lengths, patterns, enums, ranges and
list/map sizes, each violation phrased as AWS phrases it ("Value 'x' at 'modelName' failed to
satisfy constraint: ..."), all of them joined as "N validation errors detected: ...". What a
service enforces beyond its model (rules across members) stays with that service.

Entry points: ``validate_request`` (an operation's input), ``validate`` (any shape),
``format_errors`` (the message), ``constraint_failure`` (one violation found elsewhere).
Pure functions: no state, no I/O besides reading botocore's bundled models.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence, Sized
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from botocore.model import ListShape, MapShape, OperationModel, ServiceModel, Shape, StructureShape

from emulator.contract.json_errors import TOO_DEEP, UnreadableBody

# The largest finite IEEE 754 single-precision value: the bound of the models' "float" members.
FLOAT32_MAX = 3.4028234663852886e38

# A shape's pattern replaced by the caller's, by shape name (a service that accepts more than AWS
# does, e.g. SageMaker's ModelDataUrl naming a local folder).
PatternOverrides = Mapping[str, str]
NO_PATTERN_OVERRIDES: PatternOverrides = MappingProxyType({})


@functools.cache
def service_model(service: str) -> ServiceModel:
    """botocore's bundled model of ``service`` ("sagemaker", "cloudwatch", ...), loaded once."""
    import botocore.session

    return botocore.session.get_session().get_service_model(service)


# ---------------------------------------------------------------------------------------------
# Requests


def validate_request(operation: OperationModel, params: Mapping[str, Any], *,
                     pattern_overrides: PatternOverrides = NO_PATTERN_OVERRIDES) -> list[str]:
    """Violations of ``params`` against the operation's input shape, phrased as AWS does
    (``[]`` when valid). A body nested too deeply to walk is ``UnreadableBody`` (TOO_DEEP), which
    every service answers as a SerializationException, as it does an unparsable body."""
    shape = operation.input_shape
    if shape is None:
        return []
    try:
        return validate(shape, params, pattern_overrides=pattern_overrides)
    except RecursionError as exc:  # a recursive shape walked, or a deep value rendered
        raise UnreadableBody(TOO_DEEP) from exc


def validate(shape: Shape, value: Any, path: str = "", *,
             pattern_overrides: PatternOverrides = NO_PATTERN_OVERRIDES) -> list[str]:
    """Constraint violations of ``value`` against ``shape``, phrased as the service does.
    May raise RecursionError on a value nested as deep as Python's stack; prefer
    ``validate_request``, which turns that into the services' SerializationException."""
    errors: list[str] = []
    _validate(shape, value, path, errors, pattern_overrides)
    return errors


def format_errors(errors: Sequence[str]) -> str:
    """The one message of a refused request: "2 validation errors detected: <a>; <b>"."""
    noun = "error" if len(errors) == 1 else "errors"
    return f"{len(errors)} validation {noun} detected: " + "; ".join(errors)


def constraint_failure(path: str, value: Any, constraint: str) -> str:
    """One constraint violation, phrased as the service does (for checks made elsewhere)."""
    return f"Value {_render(value)} at '{path}' failed to satisfy constraint: {constraint}"


_fail = constraint_failure


def _validate(shape: Shape, value: Any, path: str, errors: list[str],
              overrides: PatternOverrides) -> None:
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
                _validate(member, value[name], _join(path, name), errors, overrides)
        return
    if kind == "list":
        assert isinstance(shape, ListShape)
        if not _sized(value, list, kind, meta, path, errors):
            return
        for index, item in enumerate(value, start=1):
            _validate(shape.member, item, f"{path}.{index}.member", errors, overrides)
        return
    if kind == "map":
        assert isinstance(shape, MapShape)
        if not _sized(value, dict, kind, meta, path, errors):
            return
        for key, item in value.items():
            before = len(errors)
            _validate(shape.key, key, path, errors, overrides)
            if len(errors) > before:
                # Report a bad key once, with the key itself, like the service does for maps.
                del errors[before:]
                errors.append(
                    _fail(path, key, "Map keys must satisfy constraint: " + _key_rule(shape.key))
                )
            _validate(shape.value, item, f"{path}.{key}", errors, overrides)
        return
    if kind == "string":
        if not _sized(value, str, kind, meta, path, errors):
            return
        enum = meta.get("enum")
        if enum and value not in enum:
            errors.append(
                _fail(path, value, f"Member must satisfy enum value set: [{', '.join(enum)}]")
            )
        pattern = overrides.get(shape.name, meta.get("pattern"))
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
        _check_bounds(meta, "value", value, path, value, errors)
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
        _check_bounds(meta, "value", value, path, value, errors)
        return
    if kind == "boolean":
        if not isinstance(value, bool):
            errors.append(_fail(path, value, "Member must be a boolean"))
        return
    if kind == "timestamp":
        if to_epoch(value) is None:
            errors.append(_fail(path, value, "Member must be a timestamp"))
        return


def _camel(member: str) -> str:
    return member[:1].lower() + member[1:]


def _join(path: str, member: str) -> str:
    return f"{path}.{_camel(member)}" if path else _camel(member)


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


def _key_rule(shape: Shape) -> str:
    rules = []
    if "max" in shape.metadata:
        rules.append(f"Member must have length less than or equal to {shape.metadata['max']}")
    if "pattern" in shape.metadata:
        rules.append(f"Member must satisfy regular expression pattern: {shape.metadata['pattern']}")
    return "[" + ", ".join(rules) + "]"


def _sized(value: Any, expected: type[Sized], kind: str, meta: dict[str, Any], path: str,
           errors: list[str]) -> bool:
    """A list, map or string of the right type and length; False when not of the type."""
    if not isinstance(value, expected):
        errors.append(_fail(path, value, f"Member must be a {kind}"))
        return False
    _check_bounds(meta, "length", len(value), path, value, errors)
    return True


def _check_bounds(meta: dict[str, Any], what: str, measured: float, path: str, value: Any,
                  errors: list[str]) -> None:
    """The shape's ``max`` and ``min`` on the member's ``what`` (its length, or its value)."""
    if "max" in meta and measured > meta["max"]:
        errors.append(
            _fail(path, value, f"Member must have {what} less than or equal to {meta['max']}")
        )
    if "min" in meta and measured < meta["min"]:
        errors.append(
            _fail(path, value, f"Member must have {what} greater than or equal to {meta['min']}")
        )


# ---------------------------------------------------------------------------------------------
# Patterns: the models carry the services' Java regular expressions

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
