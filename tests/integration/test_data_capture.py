"""Data capture end to end: an endpoint config's DataCaptureConfig makes the emulator write the
calls it answers to S3 (moto's server over HTTP) as SageMaker writes them, through boto3 and
through the SageMaker Python SDK v2 as the Model Monitor notebooks turn it on and off; the files
replay with ``mme loadtest --trace``'s reader.
"""

from __future__ import annotations

import base64
import calendar
import functools
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from harness.loadtest.trace import read_trace
from tests.client_support import DUMMY_CREDENTIALS, S3, runtime_client
from tests.support import output_of, package, scale_request, wait_until, write_scale_model

pytestmark = pytest.mark.slow

ROLE = "arn:aws:iam::123456789012:role/sagemaker"
IMAGE = "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
FAST = {"Delay": 0.2, "MaxAttempts": 300}
KEY = re.compile(r"capture/(?P<endpoint>[^/]+)/(?P<variant>[^/]+)/(?P<hour>\d{4}/\d\d/\d\d/\d\d)/"
                 r"\d\d-\d\d-\d{3}-[0-9a-f-]{36}\.jsonl")


def captured(s3: S3, bucket: str, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    """(key, record) of every line of every file under ``prefix``."""
    listed = s3.client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return [(item["Key"], json.loads(text)) for item in listed
            for text in s3.client.get_object(Bucket=bucket, Key=item["Key"])["Body"]
            .read().decode().splitlines()]


def records_when(s3: S3, bucket: str, prefix: str,
                 count: int) -> list[tuple[str, dict[str, Any]]]:
    """The records under ``prefix`` once there are ``count`` of them (the files come within a
    second of the calls)."""
    found: list[tuple[str, dict[str, Any]]] = []

    def enough() -> bool:
        found[:] = captured(s3, bucket, prefix)
        return len(found) >= count

    wait_until(enough, 30, f"{count} captured calls under {prefix}")
    return found


def test_every_answered_call_is_captured_as_sagemaker_writes_it(
        start_emulator: Callable[..., EmulatorServer], s3_server: S3, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = s3_server.bucket("capture-boto3")
    tarball = package(write_scale_model(tmp_path / "double", "double", scale=2.0),
                      tmp_path / "double.tar.gz")
    s3_server.client.upload_file(str(tarball), bucket, "mme/double.tar.gz")
    server = start_emulator(s3_endpoint_url=s3_server.endpoint_url)
    sm = boto3.client("sagemaker", endpoint_url=server.url, **DUMMY_CREDENTIALS)
    sm.create_model(ModelName="m", ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": IMAGE, "Mode": "MultiModel", "ModelDataUrl": f"s3://{bucket}/mme/"})
    sm.create_endpoint_config(
        EndpointConfigName="c", ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.m5.xlarge",
            "InitialInstanceCount": 1}],
        # Only CSV is kept as text: the JSON calls below are captured as base64.
        DataCaptureConfig={"EnableCapture": True, "InitialSamplingPercentage": 100,
                           "DestinationS3Uri": f"s3://{bucket}/capture",
                           "KmsKeyId": "alias/capture",
                           "CaptureOptions": [{"CaptureMode": "Input"},
                                              {"CaptureMode": "Output"}],
                           "CaptureContentTypeHeader": {"CsvContentTypes": ["text/csv"]}})
    sm.create_endpoint(EndpointName="scored", EndpointConfigName="c")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="scored", WaiterConfig=FAST)
    assert sm.describe_endpoint(EndpointName="scored")["DataCaptureConfig"] == {
        "EnableCapture": True, "CaptureStatus": "Started", "CurrentSamplingPercentage": 100,
        "DestinationS3Uri": f"s3://{bucket}/capture", "KmsKeyId": "alias/capture"}

    rt = runtime_client(server.url)
    sent = {f"order-{i}": scale_request([1.0, 2.0, 3.0, float(i)]) for i in range(3)}
    for inference_id, body in sent.items():
        rt.invoke_endpoint(EndpointName="scored", TargetModel="double.tar.gz",
                           ContentType="application/json", Body=body, InferenceId=inference_id)
    with pytest.raises(ClientError):  # an error: there is no output to capture
        rt.invoke_endpoint(EndpointName="scored", TargetModel="missing.tar.gz",
                           ContentType="application/json", Body=sent["order-0"])
    before = time.time()
    records = records_when(s3_server, bucket, "capture/", len(sent))

    assert len(records) == len(sent)
    for key, line in records:
        where = KEY.fullmatch(key)
        assert where is not None, key
        assert (where["endpoint"], where["variant"]) == ("scored", "AllTraffic")
        metadata = line["eventMetadata"]
        arrived = calendar.timegm(time.strptime(metadata["inferenceTime"],
                                                "%Y-%m-%dT%H:%M:%SZ"))
        assert arrived <= before and where["hour"] == time.strftime("%Y/%m/%d/%H",
                                                                    time.gmtime(arrived))
        assert line["eventVersion"] == "0" and metadata["targetModel"] == "double.tar.gz"
        given = line["captureData"]["endpointInput"]
        assert (given["observedContentType"], given["mode"], given["encoding"]) == \
            ("application/json", "INPUT", "BASE64")
        assert base64.b64decode(given["data"]) == sent[metadata["inferenceId"]]
        answer = line["captureData"]["endpointOutput"]
        assert (answer["mode"], answer["encoding"]) == ("OUTPUT", "BASE64")
        values = output_of(base64.b64decode(answer["data"])).tolist()
        assert values == [2.0, 4.0, 6.0, 2.0 * int(metadata["inferenceId"][-1])]
    assert len({line["eventMetadata"]["eventId"] for _, line in records}) == len(sent)
    head = s3_server.client.head_object(Bucket=bucket, Key=records[0][0])
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", "alias/capture")

    # What was captured replays: ``mme loadtest --trace s3://...`` reads the same files.
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    trace = read_trace([f"s3://{bucket}/capture/"])
    assert trace.kind == "data-capture"
    assert sorted(call.body or b"" for call in trace.calls) == sorted(sent.values())
    assert {call.target_model for call in trace.calls} == {"double.tar.gz"}


def test_the_sdk_turns_capture_on_and_off_as_the_model_monitor_notebooks_do(
        start_emulator: Callable[..., EmulatorServer], s3_server: S3, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = s3_server.bucket("capture-sdk")
    tarball = package(write_scale_model(tmp_path / "triple", "triple", scale=3.0),
                      tmp_path / "triple.tar.gz", "folder")
    s3_server.client.upload_file(str(tarball), bucket, "model/model.tar.gz")
    server = start_emulator(s3_endpoint_url=s3_server.endpoint_url)
    for service in ("SAGEMAKER", "SAGEMAKER_RUNTIME"):
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", server.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")  # before the SDK's import
    sagemaker = pytest.importorskip("sagemaker")
    from sagemaker.deserializers import JSONDeserializer
    from sagemaker.model import Model
    from sagemaker.model_monitor import DataCaptureConfig
    from sagemaker.predictor import Predictor
    from sagemaker.serializers import JSONSerializer

    # A default bucket named: the SDK would ask STS (at AWS's own address) for the account to
    # name one, and disable_data_capture() asks for it.
    session = sagemaker.Session(boto_session=boto3.Session(**DUMMY_CREDENTIALS),
                                default_bucket=bucket)
    # deploy() and the capture switches wait with wait_for_endpoint, 30 s between looks.
    session.wait_for_endpoint = functools.partial(session.wait_for_endpoint, poll=0.2)
    destination = f"s3://{bucket}/datacapture"
    model = Model(image_uri=IMAGE, model_data=f"s3://{bucket}/model/model.tar.gz", role=ROLE,
                  sagemaker_session=session, predictor_cls=Predictor)
    predictor = model.deploy(
        initial_instance_count=1, instance_type="ml.m5.xlarge", endpoint_name="monitored",
        serializer=JSONSerializer(), deserializer=JSONDeserializer(),
        data_capture_config=DataCaptureConfig(enable_capture=True, sampling_percentage=100,
                                              destination_s3_uri=destination))

    def predict(value: float) -> list[float]:
        request = json.loads(scale_request([value, 0.0, 0.0, 0.0]))
        data: list[float] = predictor.predict(request)["outputs"][0]["data"]
        return data

    assert predict(1.0) == [3.0, 0.0, 0.0, 0.0]
    first = records_when(s3_server, bucket, "datacapture/", 1)
    captured_call = first[0][1]["captureData"]
    # The SDK's defaults keep JSON as text.
    assert captured_call["endpointInput"]["encoding"] == "JSON"
    assert json.loads(captured_call["endpointInput"]["data"])["inputs"][0]["data"] == \
        [1.0, 0.0, 0.0, 0.0]
    assert json.loads(captured_call["endpointOutput"]["data"])["outputs"][0]["data"] == \
        [3.0, 0.0, 0.0, 0.0]

    predictor.disable_data_capture()  # a new endpoint config, then UpdateEndpoint
    summary = session.sagemaker_client.describe_endpoint(
        EndpointName="monitored")["DataCaptureConfig"]
    assert (summary["EnableCapture"], summary["CaptureStatus"]) == (False, "Stopped")
    assert predict(2.0) == [6.0, 0.0, 0.0, 0.0]  # served, not captured
    predictor.update_data_capture_config(DataCaptureConfig(
        enable_capture=True, sampling_percentage=100, destination_s3_uri=destination))
    assert predict(4.0) == [12.0, 0.0, 0.0, 0.0]
    # The call made while capture was off never shows: once the next one is in, there are two.
    records = records_when(s3_server, bucket, "datacapture/", 2)
    inputs = sorted(json.loads(line["captureData"]["endpointInput"]["data"])["inputs"][0]
                    ["data"][0] for _, line in records)
    assert inputs == [1.0, 4.0]
    predictor.delete_endpoint()
