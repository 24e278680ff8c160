"""Request bodies for a SageMaker Triton endpoint, and responses back into numpy arrays.

SageMaker passes the body and its ``ContentType`` to Triton untouched, so a client speaks KServe
v2 either as plain JSON (``application/json``) or as JSON header + binary tensors, announced by
``application/vnd.sagemaker-triton.binary+json;json-header-size=N``. The tensor encoding itself
is delegated to ``tritonclient`` (the same code Triton's own clients use), so what the harness
sends is what a production client sends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

BINARY_JSON = "application/vnd.sagemaker-triton.binary+json"
JSON = "application/json"

_HEADER_SIZE = re.compile(r"json-header-size\s*=\s*(\d+)", re.IGNORECASE)


class PayloadError(ValueError):
    """A body or a response that cannot be encoded or decoded."""


@dataclass(frozen=True)
class Request:
    body: bytes
    content_type: str


def binary_content_type(json_header_size: int) -> str:
    return f"{BINARY_JSON};json-header-size={json_header_size}"


def json_header_size(content_type: str | None) -> int | None:
    """The N of ``…binary+json;json-header-size=N``; None for a plain JSON body."""
    if not content_type or not content_type.strip().lower().startswith(BINARY_JSON):
        return None
    match = _HEADER_SIZE.search(content_type)
    if match is None:
        raise PayloadError(f"content type {content_type!r} has no json-header-size parameter")
    return int(match.group(1))


def triton_dtype(array: npt.NDArray[Any]) -> str:
    from tritonclient.utils import np_to_triton_dtype

    if array.dtype.kind in ("U", "S", "O"):
        return "BYTES"
    dtype = np_to_triton_dtype(array.dtype)
    if dtype is None:
        raise PayloadError(f"numpy dtype {array.dtype} has no Triton equivalent")
    return str(dtype)


def _as_array(value: object) -> npt.NDArray[Any]:
    array = np.asarray(value)
    if array.dtype.kind == "U":
        # Triton BYTES travel as bytes; numpy unicode arrays are encoded as UTF-8.
        array = np.vectorize(lambda s: s.encode("utf-8"), otypes=[object])(array)
    elif array.dtype.kind == "S":
        array = array.astype(object)
    return array


def build_request(
    inputs: Mapping[str, object],
    outputs: Iterable[str] | None = None,
    *,
    binary: bool = True,
    binary_outputs: bool | None = None,
    parameters: Mapping[str, object] | None = None,
) -> Request:
    """Encode ``inputs`` (name -> array-like) as a SageMaker Triton request body.

    ``binary`` sends tensors as raw bytes after the JSON header (smaller and exact for floats);
    ``binary_outputs`` asks Triton to answer the same way (defaults to ``binary``).
    """
    import tritonclient.http as httpclient

    if binary_outputs is None:
        binary_outputs = binary
    infer_inputs = []
    for name, value in inputs.items():
        array = _as_array(value)
        item = httpclient.InferInput(name, list(array.shape), triton_dtype(array))
        item.set_data_from_numpy(array, binary_data=binary)
        infer_inputs.append(item)
    requested = None
    if outputs is not None:
        requested = [
            httpclient.InferRequestedOutput(name, binary_data=binary_outputs) for name in outputs
        ]
    body, header_size = httpclient.InferenceServerClient.generate_request_body(
        infer_inputs, outputs=requested, parameters=dict(parameters) if parameters else None
    )
    if outputs is None:
        # Without named outputs tritonclient always asks for binary outputs; honour the caller.
        body, header_size = _set_binary_data_output(body, header_size, binary_outputs)
    if header_size is None:
        return Request(body=body, content_type=JSON)
    return Request(body=body, content_type=binary_content_type(header_size))


def _set_binary_data_output(
    body: bytes, header_size: int | None, value: bool
) -> tuple[bytes, int | None]:
    """Set the request-level ``binary_data_output`` parameter (the default for all outputs)."""
    size = len(body) if header_size is None else header_size
    header = json.loads(body[:size])
    header.setdefault("parameters", {})["binary_data_output"] = value
    new_header = json.dumps(header, separators=(",", ":")).encode()
    if header_size is None:
        return new_header, None
    return new_header + body[size:], len(new_header)


def parse_response(body: bytes, content_type: str | None) -> dict[str, npt.NDArray[Any]]:
    """Decode a Triton response (JSON or binary+json) into ``{output name: array}``.

    BYTES outputs come back as numpy object arrays of ``bytes``.
    """
    import tritonclient.http as httpclient

    header_size = json_header_size(content_type)
    if header_size is not None and not 0 <= header_size <= len(body):
        raise PayloadError(f"json-header-size={header_size} but the body has {len(body)} bytes")
    try:
        result = httpclient.InferenceServerClient.parse_response_body(
            body, header_length=header_size
        )
    except Exception as exc:  # tritonclient raises bare exceptions on malformed JSON
        raise PayloadError(f"cannot parse the response as KServe v2: {exc}") from exc
    response = result.get_response()
    if "error" in response:
        raise PayloadError(f"the response is an error: {response['error']}")
    arrays: dict[str, npt.NDArray[Any]] = {}
    for output in response.get("outputs", []):
        array = result.as_numpy(output["name"])
        if array is None:
            raise PayloadError(f"output {output['name']!r} has no data")
        arrays[output["name"]] = array
    return arrays


def random_inputs(
    specs: Iterable[tuple[str, str, list[int]]], seed: int = 0
) -> dict[str, npt.NDArray[Any]]:
    """Random tensors for ``(name, triton datatype, shape)`` specs, for load tests and sweeps.

    ``-1`` dimensions become 1; BYTES inputs get short ASCII strings.
    """
    from tritonclient.utils import triton_to_np_dtype

    rng = np.random.default_rng(seed)
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, datatype, shape in specs:
        dims = [1 if d < 0 else d for d in shape]
        if datatype == "BYTES":
            flat = [f"text {i}".encode() for i in range(int(np.prod(dims)))]
            arrays[name] = np.array(flat, dtype=object).reshape(dims)
            continue
        dtype = np.dtype(triton_to_np_dtype(datatype))
        if dtype.kind == "f":
            arrays[name] = rng.random(dims).astype(dtype)
        elif dtype.kind == "b":
            arrays[name] = rng.random(dims) > 0.5
        else:
            arrays[name] = rng.integers(0, 100, size=dims).astype(dtype)
    return arrays
