"""The checks that keep Triton 2.51 from crashing: exact at their limits, blind to strings."""

from __future__ import annotations

import json

import pytest

from emulator.contract import runtime, triton_guard
from emulator.contract.triton_guard import MAX_JSON_DEPTH, SHAPE_MISMATCH, refusal


def _body(shape: list[int], data: object = (1, 2, 3, 4)) -> bytes:
    return json.dumps({"inputs": [{"name": "X", "shape": shape, "datatype": "FP32",
                                   "data": list(data)}]}).encode()


def test_ordinary_bodies_pass() -> None:
    assert refusal(_body([1, 4]), binary=False) is None
    assert refusal(_body([0, 2**40], []), binary=False) is None  # no elements at all
    big = _body([300_000, 4], [[1.5, 2.5, 3.5, 4.5]] * 300_000)  # many brackets, shallow
    assert refusal(big, binary=False) is None


def test_more_elements_than_body_bytes_is_tritons_shape_mismatch() -> None:
    body = _body([2**40, 4])
    assert json.loads(refusal(body, binary=False) or "") == {"error": SHAPE_MISMATCH}
    # The threshold is the body's length: one element per byte still passes.
    template = b'{"inputs":[{"name":"X","shape":[N],"datatype":"FP32","data":[1]}]}'
    length = len(template) - 1 + 2  # N becomes a two-digit count
    assert refusal(template.replace(b"N", str(length).encode()), binary=False) is None
    assert refusal(template.replace(b"N", str(length + 1).encode()), binary=False) is not None
    # Dimensions Triton refuses itself (negative, not integers) are left to it.
    assert refusal(_body([-1, 2**40]), binary=False) is None


def test_depth_limit_is_exact_and_strings_do_not_nest() -> None:
    def nested(depth: int) -> bytes:  # depth levels in all, the outer object included
        inner = depth - 1
        return b'{"s":"[[[{{{\\"[[[","a":' + b"[" * inner + b"1" + b"]" * inner + b"}"

    assert refusal(nested(MAX_JSON_DEPTH), binary=False) is None
    refused = refusal(nested(MAX_JSON_DEPTH + 1), binary=False)
    assert refused is not None and "nested deeper than" in refused
    wide = b"[" + b",".join([b"[" * 9000 + b"]" * 9000] * 20) + b"]"
    assert refusal(wide, binary=False) is None  # many brackets, none deeper than 9001


def test_binary_header_checks_json_inputs_only() -> None:
    header = json.dumps({"inputs": [
        {"name": "B", "shape": [2**40], "datatype": "FP32",
         "parameters": {"binary_data_size": 16}},
    ]}).encode()
    assert refusal(header, binary=True) is None
    header = json.dumps({"inputs": [{"name": "J", "shape": [2**40], "datatype": "FP32",
                                     "data": [1]}]}).encode()
    assert refusal(header, binary=True) is not None


def test_screen_body_raises_what_triton_would_answer() -> None:
    with pytest.raises(runtime.ContainerRejected) as caught:
        runtime.screen_body(_body([2**40, 4]), None)
    assert caught.value.status == triton_guard.TRITON_STATUS == 500
    header = _body([2**40, 4])
    runtime.screen_body(_body([1, 4]), None)
    with pytest.raises(runtime.ContainerRejected):
        runtime.screen_body(header + bytes(64), len(header))  # the header is what counts
