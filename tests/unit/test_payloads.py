"""Request bodies and response parsing, checked against tritonclient's own decoder."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import tritonclient.http as httpclient

from harness.payloads import (
    BINARY_JSON,
    JSON,
    PayloadError,
    build_request,
    json_header_size,
    parse_response,
    random_inputs,
)


def _header(request) -> dict:  # type: ignore[no-untyped-def]
    size = json_header_size(request.content_type)
    return json.loads(request.body if size is None else request.body[:size])


def test_binary_request_announces_the_json_header_length() -> None:
    request = build_request({"A": np.arange(6, dtype=np.float32).reshape(2, 3)})
    size = json_header_size(request.content_type)
    assert request.content_type.startswith(BINARY_JSON)
    assert size is not None
    header = json.loads(request.body[:size])
    assert header["inputs"][0] == {
        "name": "A",
        "shape": [2, 3],
        "datatype": "FP32",
        "parameters": {"binary_data_size": 24},
    }
    assert header["parameters"]["binary_data_output"] is True
    assert np.frombuffer(request.body[size:], dtype=np.float32).tolist() == list(range(6))


def test_json_request_has_no_binary_part_and_asks_for_json_outputs() -> None:
    request = build_request({"A": np.array([1, 2], dtype=np.int64)}, binary=False)
    assert request.content_type == JSON
    header = json.loads(request.body)
    assert header["inputs"][0]["data"] == [1, 2]
    assert header["parameters"]["binary_data_output"] is False


def test_named_outputs_are_requested_individually() -> None:
    request = build_request(
        {"A": np.zeros(2, np.float32)}, outputs=["B", "C"], binary_outputs=False
    )
    header = _header(request)
    assert [o["name"] for o in header["outputs"]] == ["B", "C"]
    assert all(o["parameters"]["binary_data"] is False for o in header["outputs"])


def test_strings_become_bytes_tensors() -> None:
    request = build_request({"TEXT": np.array([["héllo", "x"]])})
    header = _header(request)
    assert header["inputs"][0]["datatype"] == "BYTES"
    assert "héllo".encode() in request.body


def _triton_response(outputs: dict[str, np.ndarray], binary: bool) -> tuple[bytes, str]:
    """A response body laid out as Triton writes it, for each output (JSON or binary)."""
    header: dict = {"model_name": "m", "model_version": "1", "outputs": []}
    blobs = b""
    for name, array in outputs.items():
        from tritonclient.utils import np_to_triton_dtype

        datatype = "BYTES" if array.dtype == object else np_to_triton_dtype(array.dtype)
        entry = {"name": name, "shape": list(array.shape), "datatype": datatype}
        if binary:
            raw = (
                b"".join(struct.pack("<I", len(x)) + x for x in array.ravel())
                if datatype == "BYTES"
                else array.tobytes()
            )
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs += raw
        else:
            entry["data"] = array.ravel().tolist()
        header["outputs"].append(entry)
    text = json.dumps(header).encode()
    if binary:
        return text + blobs, f"{BINARY_JSON};json-header-size={len(text)}"
    return text, JSON


@pytest.mark.parametrize("binary", [True, False])
def test_parse_response_returns_arrays_by_output_name(binary: bool) -> None:
    expected = {
        "SUM": np.array([[1.5, 2.5]], dtype=np.float32),
        "IDS": np.array([3, 4, 5], dtype=np.int64),
    }
    body, content_type = _triton_response(expected, binary)
    outputs = parse_response(body, content_type)
    assert set(outputs) == {"SUM", "IDS"}
    for name, array in expected.items():
        np.testing.assert_array_equal(outputs[name], array)
        assert outputs[name].dtype == array.dtype


def test_parse_response_bytes_output() -> None:
    body, content_type = _triton_response({"T": np.array([b"ab", b"c"], dtype=object)}, True)
    assert parse_response(body, content_type)["T"].tolist() == [b"ab", b"c"]


def test_header_size_outside_the_body_is_refused() -> None:
    body, _ = _triton_response({"A": np.zeros(2, np.float32)}, True)
    with pytest.raises(PayloadError, match="json-header-size"):
        parse_response(body, f"{BINARY_JSON};json-header-size={len(body) + 1}")


def test_binary_content_type_without_size_is_refused() -> None:
    with pytest.raises(PayloadError):
        json_header_size(BINARY_JSON)


def test_json_header_size_is_read_case_insensitively_and_with_spaces() -> None:
    assert json_header_size(f"{BINARY_JSON}; JSON-Header-Size = 42") == 42
    assert json_header_size("application/json") is None
    assert json_header_size(None) is None


def test_round_trip_through_tritonclient_request_parser() -> None:
    """What we build is what tritonclient itself would send (same tensor bytes)."""
    a = np.arange(4, dtype=np.float32)
    ours = build_request({"A": a}, outputs=["B"])
    item = httpclient.InferInput("A", [4], "FP32")
    item.set_data_from_numpy(a, binary_data=True)
    theirs, size = httpclient.InferenceServerClient.generate_request_body(
        [item], outputs=[httpclient.InferRequestedOutput("B", binary_data=True)]
    )
    assert ours.body == theirs
    assert ours.content_type == f"{BINARY_JSON};json-header-size={size}"


def test_random_inputs_follow_the_spec() -> None:
    arrays = random_inputs([("A", "FP32", [-1, 4]), ("B", "INT32", [2]), ("T", "BYTES", [3])])
    assert arrays["A"].shape == (1, 4) and arrays["A"].dtype == np.float32
    assert arrays["B"].dtype == np.int32
    assert arrays["T"].dtype == object and arrays["T"].shape == (3,)
