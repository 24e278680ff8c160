"""Bodies that crash Triton 2.51 get the answer Triton gives their milder forms.

A real Triton behind the emulator and a boto3 client. Each pathological body is sent after its
mild form (which Triton itself answers), and the test checks that Triton is still the same
process with the model still loaded: without the checks in ``emulator.contract.triton_guard``
Triton dies on them and the model is dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.fault_support import instance_of, models_of
from tests.support import package, scale_request, write_scale_model

BINARY_JSON = "application/vnd.sagemaker-triton.binary+json"


def _json_input(shape: list[int], data: bytes) -> bytes:
    return (b'{"inputs":[{"name":"X","shape":' + json.dumps(shape).encode()
            + b',"datatype":"FP32","data":' + data + b"}]}")


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"1,2,3,4" + b"]" * depth


@pytest.fixture
def served(start_emulator, store: Path, tmp_path: Path) -> tuple[Any, Any]:  # type: ignore[no-untyped-def]
    package(write_scale_model(tmp_path / "m", "scale"), store / "scale.tar.gz", "folder")
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                       Body=scale_request([1, 2, 3, 4]))  # loaded
    return server, rt


def _model_error(rt: Any, body: bytes, content_type: str = "application/json") -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz", Body=body,
                           ContentType=content_type)
    response = caught.value.response
    assert response["Error"]["Code"] == "ModelError"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424
    return response


def _still_up_and_loaded(server: Any, rt: Any, triton_pid: int) -> None:
    assert instance_of(server).launcher.pid == triton_pid  # Triton never restarted
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                              Body=scale_request([1, 2, 3, 4]))
    assert resp["ResponseMetadata"]["HTTPHeaders"]["x-mme-model-cache-hit"] == "1"
    assert models_of(server)["scale.tar.gz"]["Loaded"]


def test_a_shape_larger_than_the_body_gets_tritons_shape_mismatch(served) -> None:  # type: ignore[no-untyped-def]
    server, rt = served
    pid = instance_of(server).launcher.pid
    mild = _model_error(rt, _json_input([9, 4], b"[1,2,3,4]"))  # Triton's own answer
    for shape in ([2**40, 4], [4, 2**32], [2**20, 2**20, 2**20]):
        refused = _model_error(rt, _json_input(shape, b"[1,2,3,4]"))
        assert refused["OriginalStatusCode"] == mild["OriginalStatusCode"] == 500
        assert refused["OriginalMessage"] == mild["OriginalMessage"]
        assert refused["Error"]["Message"] == mild["Error"]["Message"]
    assert "Shape does not match" in mild["OriginalMessage"]
    _still_up_and_loaded(server, rt, pid)


def test_json_nested_a_million_deep_is_a_parse_error(served) -> None:  # type: ignore[no-untyped-def]
    server, rt = served
    pid = instance_of(server).launcher.pid
    # Triton flattens nested data itself, and answers at a depth of 1,000.
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                              Body=_json_input([1, 4], _nested(1000)),
                              ContentType="application/json")
    assert json.loads(resp["Body"].read())["outputs"][0]["data"] == [2, 4, 6, 8]
    for body in (_json_input([1, 4], _nested(1_000_000)),
                 b'{"inputs":[],"parameters":{"x":' + _nested(200_000) + b"}}"):
        refused = _model_error(rt, body)
        assert refused["OriginalStatusCode"] == 500
        assert refused["OriginalMessage"].startswith(
            '{"error":"failed to parse the request JSON buffer: JSON nested deeper than')
    _still_up_and_loaded(server, rt, pid)


def test_binary_json_header_inputs_are_checked_and_binary_ones_left_to_triton(served) -> None:  # type: ignore[no-untyped-def]
    server, rt = served
    pid = instance_of(server).launcher.pid
    header = json.dumps({"inputs": [{"name": "X", "shape": [2**40, 4], "datatype": "FP32",
                                     "data": [1, 2, 3, 4]}]}).encode()
    refused = _model_error(rt, header, f"{BINARY_JSON};json-header-size={len(header)}")
    assert "Shape does not match" in refused["OriginalMessage"]
    # A binary input's size is checked by Triton itself, against binary_data_size.
    header = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 32}}]}).encode()
    answered = _model_error(rt, header + bytes(16),
                            f"{BINARY_JSON};json-header-size={len(header)}")
    assert answered["OriginalStatusCode"] == 400
    assert "expecting 16 additional bytes" in answered["OriginalMessage"]
    _still_up_and_loaded(server, rt, pid)
