"""The error table and the InvokeEndpoint framing, checked against botocore's own service model."""

from __future__ import annotations

import botocore.session
import pytest

from emulator.contract import runtime, runtime_errors


@pytest.fixture(scope="module")
def service_model():  # type: ignore[no-untyped-def]
    return botocore.session.get_session().get_service_model("sagemaker-runtime")


@pytest.mark.parametrize("error_class", runtime_errors.ERROR_TABLE, ids=lambda c: c.shape)
def test_error_table_matches_botocore(service_model, error_class) -> None:  # type: ignore[no-untyped-def]
    shape = service_model.shape_for(error_class.shape)
    assert shape.metadata["exception"] is True
    assert shape.metadata["error"]["httpStatusCode"] == error_class.status
    instance = (error_class("m", 400, "body", "arn") if error_class is runtime_errors.ModelError
                else error_class("m"))
    assert set(instance.members()) <= set(shape.members), "a member botocore does not know"
    assert instance.headers() == {"x-amzn-ErrorType": error_class.shape}


def test_every_modeled_invoke_error_is_in_the_table(service_model) -> None:  # type: ignore[no-untyped-def]
    modeled = {s.name for s in service_model.operation_model("InvokeEndpoint").error_shapes}
    assert modeled == {c.shape for c in runtime_errors.ERROR_TABLE}


def test_model_error_members_are_typed_as_botocore_says(service_model) -> None:  # type: ignore[no-untyped-def]
    shape = service_model.shape_for("ModelError")
    error = runtime_errors.model_error(
        400, '{"error":"x"}', "ep", "us-east-1", "123456789012", "arn")
    members = error.members()
    assert shape.members["OriginalStatusCode"].type_name == "integer"
    assert isinstance(members["OriginalStatusCode"], int)
    assert members["OriginalMessage"] == '{"error":"x"}'
    assert members["Message"].startswith('Received client error (400) from primary with message')


def test_binary_json_header_size_becomes_kserve_header() -> None:
    headers = runtime.triton_request_headers(
        "application/vnd.sagemaker-triton.binary+json;json-header-size=12", 20)
    assert headers[runtime.KSERVE_HEADER_LENGTH] == "12"


@pytest.mark.parametrize("content_type,length", [
    ("application/vnd.sagemaker-triton.binary+json;json-header-size=abc", 20),
    ("application/vnd.sagemaker-triton.binary+json;json-header-size=21", 20),
    ("application/vnd.sagemaker-triton.binary+json;json-header-size=-1", 20),
    ("application/vnd.sagemaker-triton.binary+json", 20),
])
def test_bad_header_size_is_rejected_like_tritons_sagemaker_server(content_type, length) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(runtime.ContainerRejected) as caught:
        runtime.triton_request_headers(content_type, length)
    assert caught.value.status == 400


@pytest.mark.parametrize("content_type", [None, "application/json", "application/octet-stream",
                                          "text/csv"])
def test_other_content_types_mean_a_json_body(content_type) -> None:  # type: ignore[no-untyped-def]
    assert runtime.triton_request_headers(content_type, 10) == {"Content-Type": "application/json"}


def test_response_names_the_target_model_and_fixes_the_header_length() -> None:
    header = b'{"model_name":"m--abc","model_version":"1","outputs":[]}'
    body = header + b"\x01\x02\x03\x04"
    renamed, length = runtime.rename_model(body, len(header), "m--abc", "dir/m.tar.gz")
    assert renamed[:length] == header.replace(b"m--abc", b"dir/m.tar.gz")
    assert renamed[length:] == b"\x01\x02\x03\x04"
    assert runtime.sagemaker_content_type(length).endswith(f"json-header-size={length}")


@pytest.mark.parametrize("target,ok", [("a.tar.gz", True), ("dir/sub/a.tar.gz", True),
                                       (" leading-space", False), ("tab\tinside", False),
                                       ("x" * 1025, False)])
def test_target_model_validation(target, ok) -> None:  # type: ignore[no-untyped-def]
    headers = {runtime.H_TARGET_MODEL: target}
    if ok:
        assert runtime.parse_invoke("ep", headers, b"", 10, "rid").target_model == target
    else:
        with pytest.raises(runtime_errors.ValidationError):
            runtime.parse_invoke("ep", headers, b"", 10, "rid")


def test_oversize_body_and_bad_endpoint_name() -> None:
    with pytest.raises(runtime_errors.ValidationError, match="oversize"):
        runtime.parse_invoke("ep", {}, b"x" * 11, 10, "rid")
    with pytest.raises(runtime_errors.ValidationError, match="endpointName"):
        runtime.parse_invoke("bad_name", {}, b"", 10, "rid")


@pytest.mark.parametrize(("inference_id", "problem"), [
    ("a" * 64, None), ("req-1 from my laptop", None), ("a" * 65, "less than or equal to 64"),
    (" leading-space", "regular expression pattern"), ("tab\tinside", "regular expression")])
def test_inference_id_within_botocores_constraints(inference_id: str,
                                                   problem: str | None) -> None:
    headers = {runtime.H_INFERENCE_ID: inference_id}
    if problem is None:
        assert runtime.parse_invoke("ep", headers, b"", 10, "rid").inference_id == inference_id
    else:
        with pytest.raises(runtime_errors.ValidationError, match=problem) as caught:
            runtime.parse_invoke("ep", headers, b"", 10, "rid")
        assert "inferenceId" in str(caught.value)
