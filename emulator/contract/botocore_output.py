"""Answers shaped by botocore's service models: what every AWS API the emulator speaks sends back
holds only what the operation's output shape models, and the tests check it holds all it must.
"""

from __future__ import annotations

from typing import Any

from botocore.model import ListShape, MapShape, Shape, StructureShape

from emulator.contract.botocore_validation import NO_PATTERN_OVERRIDES, PatternOverrides, validate


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


def output_problems(shape: Shape, value: Any, path: str, *,
                    pattern_overrides: PatternOverrides = NO_PATTERN_OVERRIDES) -> list[str]:
    """Problems of an output against its shape: missing required members, members the shape
    lacks, wrong types, strings that break their constraints. For the tests: the services'
    outputs must come back clean."""
    problems: list[str] = []
    _check_out(shape, value, path, problems, pattern_overrides)
    return problems


def _check_out(shape: Shape, value: Any, path: str, problems: list[str],
               overrides: PatternOverrides) -> None:
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
                _check_out(shape.members[name], item, f"{path}.{name}", problems, overrides)
        return
    if kind in ("list", "map"):
        if not isinstance(value, list if kind == "list" else dict):
            problems.append(f"{path}: expected a {kind}")
            return
        if isinstance(shape, ListShape):
            children = [(f"{path}[{index}]", shape.member, item)
                        for index, item in enumerate(value)]
        else:
            assert isinstance(shape, MapShape) and isinstance(value, dict)
            children = [(f"{path}.{key}", shape.value, item) for key, item in value.items()]
        for where, member, item in children:
            _check_out(member, item, where, problems, overrides)
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
        problems.extend(validate(shape, value, path, pattern_overrides=overrides))
