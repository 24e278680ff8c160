"""InvokeEndpoint through an unmodified boto3 client, against the emulator and a real Triton.

Every test runs on each launcher in turn (``triton_launcher``: embedded, then docker).
"""

from __future__ import annotations

import json
import re
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.launcher_support import TritonLauncher
from tests.prometheus_support import scrape, value
from tests.support import (
    SUITE_ENV,
    output_of,
    package,
    scale_request,
    write_scale_ensemble,
    write_scale_model,
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,  # type: ignore[no-untyped-def]
           triton_launcher: TritonLauncher):
    """One emulator for the module: a store with a single model, an ensemble and broken ones."""
    from emulator.server import EmulatorServer
    from emulator.settings import Settings

    root = tmp_path_factory.mktemp(f"contract-{triton_launcher.name}")
    store = root / "store"
    package(write_scale_model(root / "m", "scale", 2.0), store / "scale.tar.gz", "folder")
    write_scale_ensemble(root / "e")
    package(root / "e", store / "nested" / "dir" / "ensemble.tar.gz", "flat")
    package(write_scale_model(root / "bad", "broken", fail_load="weights are corrupt"),
            store / "broken.tar.gz", "folder")
    (store / "garbage.tar.gz").write_bytes(b"not a tarball")
    settings = Settings.from_env(env=SUITE_ENV, **triton_launcher.overrides(
        model_data=str(store), cache_dir=root / "cache", port=0))
    with EmulatorServer(settings) as server:
        triton_launcher.of(server)
        yield server, runtime_client(server.url)


def test_json_body_sent_as_octet_stream_like_the_seeds(served) -> None:  # type: ignore[no-untyped-def]
    _server, rt = served
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                              ContentType="application/octet-stream",
                              Body=scale_request([1, 2, 3, 4]))
    body = resp["Body"].read()
    assert resp["ContentType"] == "application/json"
    np.testing.assert_allclose(output_of(body), [2, 4, 6, 8])
    assert json.loads(body)["model_name"] == "scale.tar.gz"  # named after TargetModel, as on SM
    headers = resp["ResponseMetadata"]["HTTPHeaders"]
    assert resp["InvokedProductionVariant"] == "AllTraffic"
    assert re.fullmatch(r"[0-9a-f-]{36}", resp["ResponseMetadata"]["RequestId"])
    assert "x-amzn-requestid" in headers


def test_ensemble_in_a_subfolder_with_application_json(served) -> None:  # type: ignore[no-untyped-def]
    _server, rt = served
    body = json.dumps({"inputs": [{"name": "INPUT", "shape": [2, 4], "datatype": "FP32",
                                   "data": [1, 1, 1, 1, 2, 2, 2, 2]}]})
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel="nested/dir/ensemble.tar.gz",
                              ContentType="application/json", Body=body)
    out = json.loads(resp["Body"].read())["outputs"][0]
    assert out["shape"] == [2, 4]
    np.testing.assert_allclose(out["data"], [6] * 4 + [12] * 4)


def test_binary_json_round_trip_without_decoding(served) -> None:  # type: ignore[no-untyped-def]
    _server, rt = served
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    infer_input = httpclient.InferInput("X", list(x.shape), "FP32")
    infer_input.set_data_from_numpy(x, binary_data=True)
    output = httpclient.InferRequestedOutput("Y", binary_data=True)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        [infer_input], outputs=[output])
    resp = rt.invoke_endpoint(
        EndpointName="local", TargetModel="scale.tar.gz",
        ContentType=f"application/vnd.sagemaker-triton.binary+json;json-header-size={header_length}",
        Body=body)
    content_type = resp["ContentType"]
    match = re.fullmatch(r"application/vnd\.sagemaker-triton\.binary\+json;json-header-size=(\d+)",
                         content_type)
    assert match, content_type
    result = httpclient.InferenceServerClient.parse_response_body(
        resp["Body"].read(), header_length=int(match.group(1)))
    np.testing.assert_allclose(result.as_numpy("Y"), x * 2)
    assert result.get_response()["model_name"] == "scale.tar.gz"


def _error(call) -> dict:  # type: ignore[no-untyped-def, type-arg]
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response


def test_unknown_endpoint(served) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    err = _error(lambda: rt.invoke_endpoint(EndpointName="nope", TargetModel="scale.tar.gz",
                                            Body=scale_request([1, 2, 3, 4])))
    assert err["Error"]["Code"] == "ValidationError"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert err["Error"]["Message"] == "Endpoint nope of account 123456789012 not found."


def test_missing_target_model(served) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    err = _error(lambda: rt.invoke_endpoint(EndpointName="local", Body=scale_request([1] * 4)))
    assert err["Error"]["Code"] == "ValidationError"
    assert "is missing a target model header" in err["Error"]["Message"]


def test_malformed_target_model(served) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    err = _error(lambda: rt.invoke_endpoint(EndpointName="local", TargetModel="m" * 1025,
                                            Body=scale_request([1] * 4)))
    assert err["Error"]["Code"] == "ValidationError"
    assert "at 'targetModel' failed to satisfy constraint" in err["Error"]["Message"]


def test_target_model_not_in_store_and_no_escape(served) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    for target in ("absent.tar.gz", "../contract/store/scale.tar.gz"):
        err = _error(lambda t=target: rt.invoke_endpoint(EndpointName="local", TargetModel=t,
                                                         Body=scale_request([1] * 4)))
        assert err["Error"]["Code"] == "ValidationError", target
        assert "Failed to download model data" in err["Error"]["Message"]


def test_oversize_body(served) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    err = _error(lambda: rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                                            Body=b" " * (6 * 1024 * 1024 + 1)))
    assert err["Error"]["Code"] == "ValidationError"
    assert "oversize body" in err["Error"]["Message"]


def test_bad_json_header_size_is_a_model_error_400(served) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    body = scale_request([1, 2, 3, 4])
    content_type = f"application/vnd.sagemaker-triton.binary+json;json-header-size={len(body) + 5}"
    err = _error(lambda: rt.invoke_endpoint(
        EndpointName="local", TargetModel="scale.tar.gz", Body=body, ContentType=content_type))
    assert err["Error"]["Code"] == "ModelError"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert err["OriginalStatusCode"] == 400
    assert "inference header size" in err["OriginalMessage"]


# Statuses are Triton's own: it answers 500 to a body that is not JSON at all.
@pytest.mark.parametrize("body,status,fragment", [
    (scale_request([1, 2, 3, 4], input_name="WRONG"), 400, "unexpected inference input"),
    (json.dumps({"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32",
                             "data": [1, 2, 3]}]}).encode(), 400, "shape"),
    (json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "INT64",
                             "data": [1, 2, 3, 4]}]}).encode(), 400, "data-type"),
    (b"{not json", 500, "failed to parse"),
])
def test_container_rejections_are_model_errors(served, body, status, fragment) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    err = _error(lambda: rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                                            ContentType="application/json", Body=body))
    assert err["Error"]["Code"] == "ModelError"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert err["OriginalStatusCode"] == status
    assert fragment in err["OriginalMessage"].lower()
    kind = "client" if status < 500 else "server"
    assert err["Error"]["Message"].startswith(f"Received {kind} error ({status}) from primary")
    assert "LogStreamArn" in err


@pytest.mark.parametrize("target,fragment", [("broken.tar.gz", "weights are corrupt"),
                                             ("garbage.tar.gz", "not a readable")])
def test_model_that_fails_to_load_is_a_model_error(served, target, fragment) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    for _attempt in range(2):  # a failed load is not cached: the second request tries again
        err = _error(lambda: rt.invoke_endpoint(EndpointName="local", TargetModel=target,
                                                Body=scale_request([1] * 4)))
        assert err["Error"]["Code"] == "ModelError"
        assert err["OriginalStatusCode"] == 400
        assert fragment in err["OriginalMessage"]


def test_metrics_count_invocations_and_errors(served) -> None:  # type: ignore[no-untyped-def]
    server, rt = served
    before = json.loads(urllib.request.urlopen(f"{server.url}/_emulator/metrics").read())
    rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                       Body=scale_request([1] * 4))
    _error(lambda: rt.invoke_endpoint(EndpointName="local", TargetModel="absent.tar.gz",
                                      Body=scale_request([1] * 4)))
    after = json.loads(urllib.request.urlopen(f"{server.url}/_emulator/metrics").read())
    m0 = before["Endpoints"]["local"]["Metrics"]
    m1 = after["Endpoints"]["local"]["Metrics"]
    assert m1["Invocations"]["Sum"] - m0["Invocations"]["Sum"] == 2
    assert m1["Invocation4XXErrors"]["Sum"] - m0["Invocation4XXErrors"]["Sum"] == 1
    assert m1["ModelLatency"]["SampleCount"] - m0["ModelLatency"]["SampleCount"] == 1
    assert m1["ModelLatency"]["Unit"] == "Microseconds"
    assert m1["OverheadLatency"]["Minimum"] >= 0
    assert after["Endpoints"]["local"]["Dimensions"] == {"EndpointName": "local",
                                                         "VariantName": "AllTraffic"}
    types, samples = scrape(server.url)  # prometheus_client's parser
    variant = {"endpoint_name": "local", "variant_name": "AllTraffic"}
    assert value(samples, "sagemaker_invocations_total", **variant) == m1["Invocations"]["Sum"]
    assert types["sagemaker_model_loading_seconds"] == "histogram"


def test_ping(served) -> None:  # type: ignore[no-untyped-def]
    server, _rt = served
    with urllib.request.urlopen(f"{server.url}/ping") as resp:
        assert resp.status == 200



def test_streaming_and_async_invocations_cannot_target_a_model(served) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    err = _error(lambda: rt.invoke_endpoint_with_response_stream(
        EndpointName="local", Body=scale_request([1] * 4)))
    assert err["Error"]["Code"] == "ValidationError"
    assert "InvokeEndpointWithResponseStream is not supported" in err["Error"]["Message"]
    err = _error(lambda: rt.invoke_endpoint_async(EndpointName="local",
                                                  InputLocation="s3://b/in.json"))
    assert err["Error"]["Code"] == "ValidationError"
    err = _error(lambda: rt.invoke_endpoint_with_response_stream(
        EndpointName="missing", Body=b"{}"))
    assert "Endpoint missing of account" in err["Error"]["Message"]


def test_target_variant_must_name_the_endpoints_variant(served) -> None:  # type: ignore[no-untyped-def]
    _s, rt = served
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                              TargetVariant="AllTraffic", Body=scale_request([1] * 4))
    assert resp["InvokedProductionVariant"] == "AllTraffic"
    err = _error(lambda: rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                                            TargetVariant="Canary", Body=scale_request([1] * 4)))
    assert err["Error"]["Code"] == "ValidationError"
    assert "Variant Canary not found" in err["Error"]["Message"]
