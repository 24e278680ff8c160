"""Bodies that crash Triton 2.51 instead of being answered, and the answer Triton would give.

Triton's HTTP frontend parses a JSON body with a recursive parser and sizes each JSON input's
buffer from its ``shape`` before it reads ``data``: JSON nested some tens of thousands of levels
deep, or a shape such as ``[2**40, 4]``, kills the process (every model loaded on it is gone)
where a smaller mistake gets an error. Two checks here answer those bodies the way Triton answers
their milder forms, without decoding tensors:

- a JSON input whose shape has more elements than the body has bytes cannot match its ``data``
  (every element takes at least one byte of JSON text), so Triton's answer is its shape-mismatch
  error, measured on Triton 2.51 with ``[9, 4]`` against 4 values;
- JSON nested deeper than ``MAX_JSON_DEPTH`` levels gets Triton's parse-failure error [U]:
  Triton answered normally at 10,000 levels and crashed at 50,000; the wording after the colon is
  ours, since Triton itself never answers.

Binary inputs (``binary_data_size``) are not sized from the shape by the frontend and did not
crash Triton, so their shapes are left to Triton. Both checks cost a few passes of C-speed
searching over the JSON text; a body with more than ``MAX_JSON_DEPTH`` brackets takes a few more
(stripped to its brackets, innermost pairs peeled off), and only what stays deep is walked.
"""

from __future__ import annotations

import json
import re

# Triton's status and messages for the milder forms (Triton 2.51, KServe v2 HTTP).
TRITON_STATUS = 500
SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"
MAX_JSON_DEPTH = 10_000  # [U] a limit below the depth that crashed Triton 2.51 (50,000)

_SHAPE = re.compile(rb'"shape"\s*:\s*\[([^\]]*)\]')
_DIM = re.compile(rb"\s*(\d+)\s*")
# A JSON string: brackets inside it do not nest.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENING = b"[{"
_PEEL_PASSES = 64  # real tensors nest a few levels: peeling usually empties the brackets


def refusal(json_text: bytes, binary: bool) -> str | None:
    """Triton's error body for a body that would crash it, or None to let Triton answer.

    ``json_text`` is the whole body for JSON, the JSON header for binary+json.
    """
    if _too_deep(json_text):
        return _error(f"failed to parse the request JSON buffer: JSON nested deeper than "
                      f"{MAX_JSON_DEPTH} levels.")
    # Each element of JSON data takes at least one byte of the JSON text.
    limit = len(json_text)
    shapes = _binary_json_shapes(json_text) if binary else _json_shapes(json_text)
    if any(_elements_exceed(dims, limit) for dims in shapes):
        return _error(SHAPE_MISMATCH)
    return None


def _error(message: str) -> str:
    return json.dumps({"error": message}, separators=(",", ":"))


def _too_deep(text: bytes) -> bool:
    if text.count(b"[") + text.count(b"{") <= MAX_JSON_DEPTH:
        return False  # cannot nest deeper than it has brackets
    # Many brackets (a large nested tensor, or an attack): keep only the brackets outside
    # strings, then peel off innermost pairs, each pass one level, at C speed.
    brackets = _STRING.sub(b"", text).translate(None, _NOT_BRACKETS)
    peeled = 0
    while brackets and peeled < _PEEL_PASSES:
        shorter = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if len(brackets) - len(shorter) < len(brackets) // 64:
            break  # few pairs peeled (a deep, thin nest): walking it is quicker
        brackets, peeled = shorter, peeled + 1
    depth, limit = 0, MAX_JSON_DEPTH - peeled  # what is left is deep and thin: walk it
    for byte in brackets:
        depth += 1 if byte in _OPENING else -1
        if depth > limit:
            return True
    return False


def _json_shapes(text: bytes) -> list[list[int]]:
    """Every ``"shape": [d, ...]`` of non-negative integers (others are Triton's to refuse)."""
    shapes = []
    for match in _SHAPE.finditer(text):
        parts = match.group(1).split(b",")
        dims = [_DIM.fullmatch(p) for p in parts]
        if all(dims):
            shapes.append([int(d.group(1)) for d in dims if d])
    return shapes


def _binary_json_shapes(header: bytes) -> list[list[int]]:
    """The shapes of the JSON-data inputs of a binary+json header (the header is small)."""
    try:
        document = json.loads(header)
    except (ValueError, RecursionError):
        return []  # Triton answers a header it cannot parse
    inputs = document.get("inputs") if isinstance(document, dict) else None
    shapes = []
    for tensor in inputs if isinstance(inputs, list) else []:
        if not isinstance(tensor, dict):
            continue
        parameters = tensor.get("parameters")
        if isinstance(parameters, dict) and "binary_data_size" in parameters:
            continue
        dims = tensor.get("shape")
        if (isinstance(dims, list)
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                        for d in dims)):
            shapes.append(dims)
    return shapes


def _elements_exceed(dims: list[int], limit: int) -> bool:
    if 0 in dims:
        return False  # no elements, whatever the other dimensions say
    count = 1
    for dim in dims:
        count *= dim
        if count > limit:
            return True
    return False
