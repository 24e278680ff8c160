"""InvokeEndpointWithResponseStream with InferenceComponentName, boto3's
``invoke_endpoint_with_response_stream`` against `mme serve`.

One emulator and one endpoint for the module, with one component of one copy (a real embedded
Triton serving a one-line scale model). SageMaker's Triton container does not stream: its whole
answer arrives as the stream's PayloadPart. Each test only reads, so they run in any order.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.component_support import ComponentServer, deploy_component, serving
from tests.support import output_of, scale_request, wait_until

ENDPOINT, COMPONENT = "streamed", "streamed-ic"


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentServer]:
    with serving(tmp_path_factory.mktemp("streaming"), scales={"double": 2.0}) as module:
        deploy_component(module.client("sagemaker"), ENDPOINT, COMPONENT, "double", copies=1)
        yield module


def _stream(module: ComponentServer, **call: Any) -> dict[str, Any]:
    return runtime_client(module.server.url).invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT, ContentType="application/json", **call)


def _error(call: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as raised:
        call()
    return raised.value.response


def test_the_components_answer_arrives_as_payload_parts(module: ComponentServer) -> None:
    answer = _stream(module, InferenceComponentName=COMPONENT,
                     Body=scale_request([1, 2, 3, 4]), Accept="application/json")
    headers = answer["ResponseMetadata"]["HTTPHeaders"]
    assert headers["content-type"] == "application/vnd.amazon.eventstream"
    assert answer["ContentType"] == "application/json"  # the model's: X-Amzn-SageMaker-...
    assert answer["InvokedProductionVariant"] == "AllTraffic"
    events = list(answer["Body"])
    assert events and all(set(e) == {"PayloadPart"} for e in events)
    body = b"".join(e["PayloadPart"]["Bytes"] for e in events)
    assert output_of(body).tolist() == [2, 4, 6, 8]


def test_no_component_header_is_invoke_endpoints_error(module: ComponentServer) -> None:
    rt = runtime_client(module.server.url)
    streamed = _error(lambda: _stream(module, Body=scale_request([1, 2, 3, 4])))
    plain = _error(lambda: rt.invoke_endpoint(EndpointName=ENDPOINT, Body=b"{}",
                                              ContentType="application/json"))
    assert streamed["Error"] == plain["Error"]
    assert streamed["Error"]["Code"] == "ValidationError"
    assert "Inference Component Name header is required" in streamed["Error"]["Message"]


def test_an_unknown_component_is_invoke_endpoints_error(module: ComponentServer) -> None:
    rt = runtime_client(module.server.url)
    streamed = _error(lambda: _stream(module, InferenceComponentName="nope", Body=b"{}"))
    plain = _error(lambda: rt.invoke_endpoint(EndpointName=ENDPOINT, Body=b"{}",
                                              InferenceComponentName="nope",
                                              ContentType="application/json"))
    assert streamed["Error"] == plain["Error"]


def test_a_model_error_before_the_first_byte_is_a_plain_model_error(
        module: ComponentServer) -> None:
    """The model refuses the input (no tensor X): nothing was streamed, so the answer is the
    ModelError (424) InvokeEndpoint gives, not an event."""
    wrong = scale_request([1, 2, 3, 4], input_name="NOT_X")
    err = _error(lambda: _stream(module, InferenceComponentName=COMPONENT, Body=wrong))
    assert err["Error"]["Code"] == "ModelError"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert err["OriginalStatusCode"] == 400


def test_streamed_calls_count_in_the_components_metrics(module: ComponentServer) -> None:
    cloudwatch = module.client("cloudwatch")

    def total(metric: str) -> float:
        now = datetime.now(timezone.utc)
        points = cloudwatch.get_metric_statistics(
            Namespace="AWS/SageMaker", MetricName=metric,
            Dimensions=[{"Name": "InferenceComponentName", "Value": COMPONENT}],
            StartTime=now - timedelta(hours=1), EndTime=now + timedelta(hours=1),
            Period=3600, Statistics=["Sum"])["Datapoints"]
        return sum(p["Sum"] for p in points)

    before = total("Invocations")
    for _ in range(2):
        list(_stream(module, InferenceComponentName=COMPONENT,
                     Body=scale_request([1, 2, 3, 4]))["Body"])
    wait_until(lambda: total("Invocations") >= before + 2, 10, "streamed calls counted")
    assert total("ModelLatency") > 0
