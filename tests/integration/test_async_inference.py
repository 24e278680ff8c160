"""Asynchronous inference end to end: boto3 against a real emulator (embedded Triton, a
SingleModel endpoint), moto's server as S3, SNS and SQS. Inline and S3 inputs answered in S3
with the right bodies, SNS success and error messages received by an SQS queue, failures and
expiry written where AWS writes them, the backlog metrics in CloudWatch, and a ``kill -9`` of
``mme serve`` with requests queued losing none."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from harness.deployer import triton_image_uri
from harness.live_endpoint import EmulatorProcess
from tests.client_support import DUMMY_CREDENTIALS, S3, runtime_client
from tests.component_support import put_step_scale_out
from tests.support import SUITE_ENV, output_of, package, scale_request, wait_for, write_scale_model

pytestmark = pytest.mark.slow
ACCOUNT = "123456789012"
BUCKET = "async-inference"


@dataclass
class World:
    url: str
    s3: Any
    sm: Any
    rt: Any
    sqs: Any
    success_queue: str
    error_queue: str
    gate: Path
    model_data: str


def _sm(url: str) -> Any:
    return boto3.client("sagemaker", endpoint_url=url, **DUMMY_CREDENTIALS)


def _topic_with_queue(sns: Any, sqs: Any, name: str) -> tuple[str, str]:
    topic = sns.create_topic(Name=name)["TopicArn"]
    queue = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn,
                  Attributes={"RawMessageDelivery": "true"})
    return topic, queue


def _deploy(sm: Any, name: str, model_data: str, async_config: dict[str, Any] | None,
            mode: str = "SingleModel") -> None:
    sm.create_model(ModelName=name, PrimaryContainer={
        "Image": "triton", "Mode": mode, "ModelDataUrl": model_data})
    extra = {"AsyncInferenceConfig": async_config} if async_config else {}
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.m5.xlarge",
        "InitialInstanceCount": 1}], **extra)
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)


def _in_service(sm: Any, name: str) -> None:
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})


def _async_config(topics: tuple[str, str] | None = None, concurrency: int = 2,
                  prefix: str = "out") -> dict[str, Any]:
    output: dict[str, Any] = {"S3OutputPath": f"s3://{BUCKET}/{prefix}/",
                              "S3FailurePath": f"s3://{BUCKET}/{prefix}-failures/"}
    if topics is not None:
        output["NotificationConfig"] = {"SuccessTopic": topics[0], "ErrorTopic": topics[1],
                                        "IncludeInferenceResponseIn": ["ERROR_NOTIFICATION_TOPIC"]}
    return {"ClientConfig": {"MaxConcurrentInvocationsPerInstance": concurrency},
            "OutputConfig": output}


def _read(s3: Any, url: str) -> bytes | None:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    try:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body
    except ClientError:
        return None


def _messages(sqs: Any, queue: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []

    def enough() -> bool:
        for message in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get(
                "Messages", []):
            got.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
        return len(got) >= count

    wait_for(enough, timeout, f"{count} SNS messages on {queue}", interval_s=0.2)
    return got


@pytest.fixture(scope="module")
def world(s3_server: S3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("async")
    gate = root / "gate"
    gate.touch()  # calls run while it exists
    write_scale_model(root / "repo", "scale", scale=2.0, run_gate=str(gate))
    tarball = package(root / "repo", root / "scale.tar.gz")
    s3 = s3_server.client
    s3_server.bucket(BUCKET)
    s3.upload_file(str(tarball), BUCKET, "models/scale.tar.gz")
    sns = boto3.client("sns", endpoint_url=s3_server.endpoint_url, **DUMMY_CREDENTIALS)
    sqs = boto3.client("sqs", endpoint_url=s3_server.endpoint_url, **DUMMY_CREDENTIALS)
    success_topic, success_queue = _topic_with_queue(sns, sqs, "async-success")
    error_topic, error_queue = _topic_with_queue(sns, sqs, "async-error")
    server = EmulatorServer(Settings.from_env(
        env=SUITE_ENV, cache_dir=root / "cache", port=0, s3_endpoint_url=s3_server.endpoint_url,
        sns_endpoint_url=s3_server.endpoint_url)).start()
    sm = _sm(server.url)
    model_data = f"s3://{BUCKET}/models/scale.tar.gz"
    _deploy(sm, "async-ep", model_data, _async_config((success_topic, error_topic)))
    _in_service(sm, "async-ep")
    try:
        yield World(server.url, s3, sm, runtime_client(server.url), sqs, success_queue,
                    error_queue, gate, model_data)
    finally:
        gate.touch()
        server.stop()


def test_config_is_kept_and_described(world: World) -> None:
    config = world.sm.describe_endpoint_config(EndpointConfigName="async-ep")
    assert config["AsyncInferenceConfig"]["ClientConfig"] == {
        "MaxConcurrentInvocationsPerInstance": 2}
    endpoint = world.sm.describe_endpoint(EndpointName="async-ep")
    assert endpoint["AsyncInferenceConfig"] == config["AsyncInferenceConfig"]


def test_config_refused_on_a_multi_model_endpoint(world: World) -> None:
    world.sm.create_model(ModelName="async-mme", PrimaryContainer={
        "Image": "triton", "Mode": "MultiModel", "ModelDataUrl": f"s3://{BUCKET}/models/"})
    with pytest.raises(ClientError) as caught:
        world.sm.create_endpoint_config(EndpointConfigName="async-mme", ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": "async-mme",
            "InstanceType": "ml.m5.xlarge", "InitialInstanceCount": 1}],
            AsyncInferenceConfig=_async_config())
    error = caught.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert "not supported for multi-model endpoints" in error["Message"]
    assert "model/async-mme" in error["Message"]


def test_inline_and_s3_inputs_are_answered_in_s3_and_notified(world: World) -> None:
    locations: dict[str, tuple[str, float]] = {}
    for i in range(20):
        answer = world.rt.invoke_endpoint_async(
            EndpointName="async-ep", ContentType="application/json",
            Body=scale_request([float(i), 1.0, 2.0, 3.0]))
        assert answer["ResponseMetadata"]["HTTPStatusCode"] == 202
        assert answer["FailureLocation"].startswith(f"s3://{BUCKET}/out-failures/")
        locations[answer["InferenceId"]] = (answer["OutputLocation"], float(i))
    for i in range(20):
        key = f"inputs/{i}.json"
        world.s3.put_object(Bucket=BUCKET, Key=key, Body=scale_request([1.0, 1.0, 1.0, i]))
        answer = world.rt.invoke_endpoint_async(
            EndpointName="async-ep", ContentType="application/json",
            InputLocation=f"s3://{BUCKET}/{key}", InferenceId=f"s3-input-{i}")
        assert answer["InferenceId"] == f"s3-input-{i}"
        assert answer["OutputLocation"] == f"s3://{BUCKET}/out/s3-input-{i}.out"
        locations[answer["InferenceId"]] = (answer["OutputLocation"], float(i))
    for inference_id, (location, value) in locations.items():
        body = wait_for(lambda location=location: _read(world.s3, location), 60,
                        f"the result of {inference_id}", interval_s=0.1)
        expected = [value * 2, 2, 4, 6] if not inference_id.startswith("s3-input") \
            else [2, 2, 2, value * 2]
        assert output_of(body).tolist() == expected
    messages = _messages(world.sqs, world.success_queue, 40)
    by_id = {m["inferenceId"]: m for m in messages}
    assert set(by_id) == set(locations)
    message = by_id["s3-input-3"]
    assert message["invocationStatus"] == "Completed"
    assert message["eventSource"] == "aws:sagemaker"
    assert message["eventName"] == "InferenceResult"
    assert message["requestParameters"] == {
        "endpointName": "async-ep", "contentType": "application/json",
        "inputLocation": f"s3://{BUCKET}/inputs/3.json"}
    assert message["responseParameters"]["outputLocation"] == locations["s3-input-3"][0]
    assert "responseBody" not in message  # only the ErrorTopic asked for it


def test_failures_are_written_and_notified(world: World) -> None:
    bad = world.rt.invoke_endpoint_async(  # Triton refuses a tensor of the wrong name
        EndpointName="async-ep", ContentType="application/json",
        Body=scale_request([1.0, 2.0, 3.0, 4.0], input_name="NOPE"), InferenceId="bad-input")
    missing = world.rt.invoke_endpoint_async(
        EndpointName="async-ep", InputLocation=f"s3://{BUCKET}/inputs/none.json",
        InferenceId="missing-input")
    assert bad["FailureLocation"] == f"s3://{BUCKET}/out-failures/bad-input-error.out"
    text = wait_for(lambda: _read(world.s3, bad["FailureLocation"]), 60, "the failure")
    assert b"Received client error (400) from model" in text
    assert wait_for(lambda: _read(world.s3, missing["FailureLocation"]), 60, "the failure")
    assert _read(world.s3, bad["OutputLocation"]) is None
    messages = {m["inferenceId"]: m for m in _messages(world.sqs, world.error_queue, 2)}
    failed = messages["bad-input"]
    assert failed["invocationStatus"] == "Failed"
    assert failed["failureReason"].startswith("ClientError: Received client error (400)")
    assert failed["responseParameters"]["failureLocation"] == bad["FailureLocation"]
    assert "NOPE" in failed["responseBody"]["content"]  # IncludeInferenceResponseIn: ERROR
    assert "Failed to download" in messages["missing-input"]["failureReason"]


def _raw_async(url: str, endpoint: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(f"{url}/endpoints/{endpoint}/async-invocations",
                                     data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_bad_requests_get_sagemakers_errors(world: World) -> None:
    def code_and_message(**kwargs: Any) -> tuple[str, str]:
        with pytest.raises(ClientError) as caught:
            world.rt.invoke_endpoint_async(**kwargs)
        error = caught.value.response["Error"]
        return error["Code"], error["Message"]

    code, message = code_and_message(EndpointName="async-ep", Body=b"{}",
                                     InputLocation=f"s3://{BUCKET}/inputs/1.json")
    assert (code, "mutually exclusive" in message) == ("ValidationError", True)
    code, message = code_and_message(EndpointName="async-ep", Body=b"x" * 128_001)
    assert code == "ValidationError" and "oversize" in message
    code, message = code_and_message(EndpointName="nowhere", Body=b"{}")
    assert (code, message) == ("ValidationError",
                               f"Endpoint nowhere of account {ACCOUNT} not found.")
    # Past what botocore checks on the client: the server checks the model's bounds too.
    status, body = _raw_async(world.url, "async-ep", {
        "X-Amzn-SageMaker-RequestTTLSeconds": "30"}, b"{}")
    assert status == 400
    assert "requestTTLSeconds" in body["Message"] and "greater than or equal to 60" in \
        body["Message"]
    status, body = _raw_async(world.url, "async-ep", {
        "X-Amzn-SageMaker-InvocationTimeoutSeconds": "3601"}, b"{}")
    assert status == 400 and "less than or equal to 3600" in body["Message"]


def test_a_request_past_its_ttl_fails_as_expired(world: World) -> None:
    world.gate.unlink()  # the model holds its calls: two fill the concurrency, one waits
    try:
        held = [world.rt.invoke_endpoint_async(
            EndpointName="async-ep", ContentType="application/json",
            Body=scale_request([1.0, 1.0, 1.0, 1.0]), InferenceId=f"held-{i}") for i in range(2)]
        waiting = world.rt.invoke_endpoint_async(
            EndpointName="async-ep", ContentType="application/json",
            Body=scale_request([1.0, 1.0, 1.0, 1.0]), InferenceId="expires",
            RequestTTLSeconds=60)
        _advance(world.url, 120)
        text = wait_for(lambda: _read(world.s3, waiting["FailureLocation"]), 30, "the expiry")
        assert b"RequestTTLSeconds (60 seconds)" in text
    finally:
        world.gate.touch()
    for answer in held:
        assert wait_for(lambda a=answer: _read(world.s3, a["OutputLocation"]), 60, "held")
    assert _read(world.s3, waiting["OutputLocation"]) is None
    messages = {m["inferenceId"]: m for m in _messages(world.sqs, world.error_queue, 1)}
    assert "expired" in messages["expires"]["failureReason"]
    _messages(world.sqs, world.success_queue, 2)  # the held ones, answered


def test_delete_endpoint_fails_the_requests_still_queued(world: World) -> None:
    """DeleteEndpoint of an asynchronous endpoint: what still waits in its queue fails at once,
    written to S3FailurePath and told to the ErrorTopic; an endpoint created again under the
    name starts with an empty queue."""
    sns = boto3.client("sns", endpoint_url=world.sqs.meta.endpoint_url, **DUMMY_CREDENTIALS)
    topics = _topic_with_queue(sns, world.sqs, "doomed-success")[0], \
        _topic_with_queue(sns, world.sqs, "doomed-error")[0]
    error_queue = world.sqs.get_queue_url(QueueName="doomed-error")["QueueUrl"]
    _deploy(world.sm, "doomed", world.model_data,
            _async_config(topics, concurrency=1, prefix="doomed"))
    _in_service(world.sm, "doomed")
    world.gate.unlink()  # the model holds its calls: one in flight, three wait
    try:
        answers = [world.rt.invoke_endpoint_async(
            EndpointName="doomed", ContentType="application/json",
            Body=scale_request([1.0, 1.0, 1.0, 1.0]), InferenceId=f"doomed-{i}")
            for i in range(4)]
        wait_for(lambda: _queue_of(world.url, "doomed") == {"Waiting": 3, "InFlight": 1}, 10,
                 "one in flight, three waiting")
        world.sm.delete_endpoint(EndpointName="doomed")
        with pytest.raises(ClientError) as caught:  # Deleting: as if it were gone already
            world.rt.invoke_endpoint_async(EndpointName="doomed", Body=b"{}")
        assert caught.value.response["Error"]["Message"] == \
            f"Endpoint doomed of account {ACCOUNT} not found."
        for answer in answers[1:]:
            text = wait_for(lambda a=answer: _read(world.s3, a["FailureLocation"]), 30,
                            f"the failure of {answer['InferenceId']}")
            assert b"The endpoint doomed was deleted before the request was processed" in text
            assert _read(world.s3, answer["OutputLocation"]) is None
        messages = {m["inferenceId"]: m for m in _messages(world.sqs, error_queue, 3)}
        assert {f"doomed-{i}" for i in range(1, 4)} <= set(messages)
        assert messages["doomed-2"]["invocationStatus"] == "Failed"
        assert "was deleted" in messages["doomed-2"]["failureReason"]
        assert messages["doomed-2"]["responseParameters"]["failureLocation"] == \
            answers[2]["FailureLocation"]
    finally:
        world.gate.touch()
    wait_for(lambda: _gone(world.sm, "doomed"), 60, "doomed deleted")
    assert _queue_of(world.url, "doomed") is None


def test_a_snapshot_holds_the_requests_not_yet_answered(
        world: World, s3_server: S3, tmp_path: Path) -> None:
    """``GET /_emulator/snapshot`` (what ``mme snapshot save`` writes) carries each accepted
    request not yet answered, waiting or in flight, with its body; a server the snapshot is
    restored into queues them again and answers them."""
    world.gate.unlink()  # two in flight (the concurrency), one waiting
    restored: EmulatorServer | None = None
    try:
        answers = [world.rt.invoke_endpoint_async(
            EndpointName="async-ep", ContentType="application/json",
            Body=scale_request([float(i), 0.0, 0.0, 0.0]), InferenceId=f"saved-{i}")
            for i in range(3)]
        wait_for(lambda: _queue_of(world.url, "async-ep") == {"Waiting": 1, "InFlight": 2}, 10,
                 "two in flight, one waiting")
        with urllib.request.urlopen(f"{world.url}/_emulator/snapshot", timeout=30) as response:
            doc = json.loads(response.read())
        saved = doc["async_requests"]
        assert sorted(r["doc"]["inference_id"] for r in saved) == [
            f"saved-{i}" for i in range(3)]
        assert all(r["endpoint"] == "async-ep" and r["age_s"] >= 0 and r["body"]
                   for r in saved)
        # Into a server of its own: the async endpoint alone, and a request for an endpoint
        # the snapshot does not have.
        doc["control_plane"] = {table: [row for row in rows if row["name"] == "async-ep"]
                                for table, rows in doc["control_plane"].items()}
        doc["async_requests"].append({**saved[0], "endpoint": "gone",
                                      "doc": {**saved[0]["doc"], "inference_id": "orphan"}})
        restored = EmulatorServer(Settings.from_env(
            env=SUITE_ENV, cache_dir=tmp_path / "cache", port=0,
            s3_endpoint_url=s3_server.endpoint_url,
            sns_endpoint_url=s3_server.endpoint_url)).start()
        request = urllib.request.Request(
            f"{restored.url}/_emulator/snapshot", data=json.dumps(doc).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
        assert answer["restored"]["async_requests"] == 3
        assert answer["skipped_async_requests"] == ["orphan"]
        url = restored.url
        wait_for(lambda: _queue_of(url, "async-ep") == {"Waiting": 1, "InFlight": 2}, 10,
                 "the restored queue: two in flight (the model holds them), one waiting")
    except BaseException:
        if restored is not None:
            restored.stop()
        raise
    finally:
        world.gate.touch()
    assert restored is not None
    try:
        for answer in answers:
            assert wait_for(lambda a=answer: _read(world.s3, a["OutputLocation"]), 60,
                            "answered")
        wait_for(lambda: _queue_of(url, "async-ep") == {"Waiting": 0, "InFlight": 0}, 30,
                 "the restored queue answered")
    finally:
        restored.stop()
    _messages(world.sqs, world.success_queue, 6)  # each answered by both servers


def test_the_load_test_drives_an_asynchronous_endpoint(
        world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``mme loadtest --async`` for two seconds: every accepted request answered in S3, the
    time to result measured."""
    from mme.cli import main as mme

    body = tmp_path / "body.json"
    body.write_bytes(scale_request([1.0, 2.0, 3.0, 4.0]))
    code = mme(["loadtest", "--async", "--url", world.url, "--endpoint-name", "async-ep",
                "--s3-endpoint-url", world.s3.meta.endpoint_url, "--phase", "2:2",
                "--think-time", "0.2",
                "--body", str(body), "--content-type", "application/json",
                "--result-timeout", "30", "--out", str(tmp_path / "report")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    report = json.loads((tmp_path / "report" / "async-report.json").read_text())
    assert report["accepted"] >= 2 and report["refused"] == {}
    assert report["answered"] == report["accepted"]
    assert (report["failed"], report["unfinished"]) == (0, 0)
    assert report["time_to_result_ms"]["p50"] > 0
    assert report["time_to_result_ms"]["p99"] >= report["time_to_result_ms"]["p50"]
    assert "time to result in S3" in printed
    _messages(world.sqs, world.success_queue, report["accepted"])
    # Refusals are counted by their code (here: no such endpoint).
    code = mme(["loadtest", "--async", "--url", world.url, "--endpoint-name", "nowhere",
                "--phase", "1:1", "--body", str(body), "--content-type", "application/json",
                "--out", str(tmp_path / "refused")])
    assert code == 1
    refused = json.loads((tmp_path / "refused" / "async-report.json").read_text())
    assert refused["accepted"] == 0 and refused["refused"]["ValidationError"] >= 1


def _gone(sm: Any, name: str) -> bool:
    try:
        sm.describe_endpoint(EndpointName=name)
    except ClientError:
        return True
    return False


def _queue_of(url: str, endpoint: str) -> dict[str, Any] | None:
    """The endpoint's asynchronous queue as ``/_emulator/models`` shows it (None: no queue)."""
    with urllib.request.urlopen(f"{url}/_emulator/models", timeout=30) as response:
        doc = json.loads(response.read())
    queue = doc["Endpoints"].get(endpoint, {}).get("AsyncQueue")
    return None if queue is None else {k: queue[k] for k in ("Waiting", "InFlight")}


def test_backlog_and_invocation_metrics_reach_cloudwatch(world: World) -> None:
    cw = boto3.client("cloudwatch", endpoint_url=world.url, **DUMMY_CREDENTIALS)
    world.s3.put_object(Bucket=BUCKET, Key="inputs/metrics.json",
                        Body=scale_request([1.0, 2.0, 3.0, 4.0]))
    good = world.rt.invoke_endpoint_async(EndpointName="async-ep", ContentType="application/json",
                                          InputLocation=f"s3://{BUCKET}/inputs/metrics.json")
    bad = world.rt.invoke_endpoint_async(
        EndpointName="async-ep", ContentType="application/json",
        Body=scale_request([1.0, 2.0, 3.0, 4.0], input_name="NOPE"))
    assert wait_for(lambda: _read(world.s3, good["OutputLocation"]), 30, "the answer")
    assert wait_for(lambda: _read(world.s3, bad["FailureLocation"]), 30, "the failure")
    _messages(world.sqs, world.success_queue, 1)  # theirs: the next tests count their own
    _messages(world.sqs, world.error_queue, 1)

    def statistic(name: str, stat: str, variant: bool) -> float | None:
        dimensions = [{"Name": "EndpointName", "Value": "async-ep"}]
        if variant:
            dimensions.append({"Name": "VariantName", "Value": "AllTraffic"})
        points = cw.get_metric_statistics(
            Namespace="AWS/SageMaker", MetricName=name, Dimensions=dimensions,
            StartTime=time.time() - 3600, EndTime=time.time() + 3600, Period=60,
            Statistics=[stat])["Datapoints"]
        return sum(p[stat] for p in points) if points else None

    for name in ("ApproximateBacklogSize", "ApproximateBacklogSizePerInstance",
                 "ApproximateAgeOfOldestRequest", "HasBacklogWithoutCapacity"):
        assert wait_for(lambda n=name: statistic(n, "SampleCount", False), 10, name)
    assert statistic("HasBacklogWithoutCapacity", "Maximum", False) == 0
    assert wait_for(lambda: (statistic("InvocationsProcesssed", "Sum", True) or 0) >= 2, 10)
    assert wait_for(lambda: (statistic("InvocationFailures", "Sum", True) or 0) >= 1, 10)
    assert wait_for(lambda: statistic("TimeInBacklog", "SampleCount", True), 10)
    assert wait_for(lambda: statistic("RequestDownloadLatency", "SampleCount", True), 10)
    assert wait_for(lambda: statistic("TotalProcessingTime", "SampleCount", True), 10)


def test_real_time_endpoint_refuses_async_calls(world: World) -> None:
    _deploy(world.sm, "realtime-ep", world.model_data, None)
    _in_service(world.sm, "realtime-ep")
    with pytest.raises(ClientError) as caught:
        world.rt.invoke_endpoint_async(EndpointName="realtime-ep", Body=b"{}")
    assert caught.value.response["Error"]["Code"] == "ValidationError"
    assert "not configured for asynchronous inference" in \
        caught.value.response["Error"]["Message"]
    world.sm.delete_endpoint(EndpointName="realtime-ep")


def test_the_sagemaker_sdks_async_predictor_runs_unmodified(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """SageMaker Python SDK v2: ``Model.deploy(async_inference_config=...)`` returns an
    ``AsyncPredictor``; its ``predict`` uploads the input, calls InvokeEndpointAsync and waits
    for the output in S3; ``predict_async`` answers at once with an ``AsyncInferenceResponse``."""
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")  # the suite errs on warnings
    sagemaker = pytest.importorskip("sagemaker")
    from sagemaker.async_inference import AsyncInferenceConfig, WaiterConfig
    from sagemaker.deserializers import JSONDeserializer
    from sagemaker.model import Model
    from sagemaker.predictor import Predictor
    from sagemaker.predictor_async import AsyncPredictor
    from sagemaker.serializers import JSONSerializer

    boto_session = boto3.Session(**DUMMY_CREDENTIALS)
    session = sagemaker.Session(
        boto_session=boto_session,
        sagemaker_client=boto_session.client("sagemaker", endpoint_url=world.url),
        sagemaker_runtime_client=boto_session.client("sagemaker-runtime",
                                                     endpoint_url=world.url))
    session.s3_client = world.s3  # the SDK reads results with the session's S3 client
    model = Model(image_uri=triton_image_uri("us-east-1"), model_data=world.model_data,
                  role="arn:aws:iam::123456789012:role/sdk", name="sdk-async",
                  sagemaker_session=session, predictor_cls=Predictor)
    predictor = model.deploy(
        initial_instance_count=1, instance_type="ml.m5.xlarge", endpoint_name="sdk-async",
        wait=False, serializer=JSONSerializer(), deserializer=JSONDeserializer(),
        async_inference_config=AsyncInferenceConfig(
            output_path=f"s3://{BUCKET}/sdk-out", failure_path=f"s3://{BUCKET}/sdk-failed",
            max_concurrent_invocations_per_instance=2))
    assert isinstance(predictor, AsyncPredictor)
    assert session.wait_for_endpoint("sdk-async", poll=0.5)["EndpointStatus"] == "InService"
    request = json.loads(scale_request([1.0, 2.0, 3.0, 4.0]))
    # The SDK polls the failure path too, in a thread it waits for, until its attempts run out.
    fast = WaiterConfig(max_attempts=16, delay=0.25)  # type: ignore[arg-type]
    answer = predictor.predict(data=request, input_path=f"s3://{BUCKET}/sdk-in/1.json",
                               waiter_config=fast)
    assert answer["outputs"][0]["data"] == [2.0, 4.0, 6.0, 8.0]
    response = predictor.predict_async(data=request,
                                       input_path=f"s3://{BUCKET}/sdk-in/2.json")
    assert response.output_path.startswith(f"s3://{BUCKET}/sdk-out/")
    assert response.get_result(fast)["outputs"][0]["data"] == [2.0, 4.0, 6.0, 8.0]
    predictor.delete_endpoint()
    model.delete_model()


def _advance(url: str, seconds: float) -> bool:
    """The emulated clock moved ``seconds`` on; False (for ``wait_for``)."""
    urllib.request.urlopen(urllib.request.Request(
        f"{url}/_emulator/clock/advance", data=json.dumps({"seconds": seconds}).encode(),
        headers={"Content-Type": "application/json"}, method="POST"), timeout=60).close()
    return False


def _instances(sm: Any, name: str) -> int:
    variant = sm.describe_endpoint(EndpointName=name)["ProductionVariants"][0]
    return int(variant["CurrentInstanceCount"])


def test_scales_to_zero_and_back_on_its_backlog(world: World) -> None:
    """AWS's "Autoscale an asynchronous endpoint": target tracking on
    ApproximateBacklogSizePerInstance down to MinCapacity 0, and a step-scaling policy on
    HasBacklogWithoutCapacity back to one instance; the requests queued meanwhile answered."""
    asg = boto3.client("application-autoscaling", endpoint_url=world.url, **DUMMY_CREDENTIALS)
    cw = boto3.client("cloudwatch", endpoint_url=world.url, **DUMMY_CREDENTIALS)
    key = {"ServiceNamespace": "sagemaker", "ResourceId": "endpoint/async-ep/variant/AllTraffic",
           "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}
    asg.register_scalable_target(**key, MinCapacity=0, MaxCapacity=2)
    asg.put_scaling_policy(
        **key, PolicyName="backlog", PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 5.0, "ScaleInCooldown": 60, "ScaleOutCooldown": 60,
            "CustomizedMetricSpecification": {
                "MetricName": "ApproximateBacklogSizePerInstance", "Namespace": "AWS/SageMaker",
                "Dimensions": [{"Name": "EndpointName", "Value": "async-ep"}],
                "Statistic": "Average"}})
    step_arn = put_step_scale_out(asg, key, "HasBacklogWithoutCapacity-ScalingPolicy",
                                  "Average")
    cw.put_metric_alarm(
        AlarmName="async-ep-backlog-without-capacity", Namespace="AWS/SageMaker",
        MetricName="HasBacklogWithoutCapacity",
        Dimensions=[{"Name": "EndpointName", "Value": "async-ep"}],
        Statistic="Average", Period=60, EvaluationPeriods=2, DatapointsToAlarm=2,
        Threshold=1, ComparisonOperator="GreaterThanOrEqualToThreshold",
        TreatMissingData="missing", AlarmActions=[step_arn])

    def advanced_until(condition: Any, what: str) -> None:
        """``condition`` met, the emulated clock moved a minute on between two looks (the
        scaling's own steps take real seconds: starting or stopping a Triton)."""
        wait_for(lambda: condition() or _advance(world.url, 60), 60, what, interval_s=0.3)

    # An empty backlog for 15 minutes: target tracking's scale-in alarm takes the last instance.
    advanced_until(lambda: _instances(world.sm, "async-ep") == 0, "async-ep at 0 instances")
    answers = [world.rt.invoke_endpoint_async(
        EndpointName="async-ep", ContentType="application/json",
        Body=scale_request([float(i), 0.0, 0.0, 0.0])) for i in range(3)]
    # Queued with no instance: HasBacklogWithoutCapacity goes to 1, its alarm adds one.
    advanced_until(lambda: _instances(world.sm, "async-ep") == 1, "async-ep back at 1 instance")
    for i, answer in enumerate(answers):
        body = wait_for(lambda a=answer: _read(world.s3, a["OutputLocation"]), 60,
                        f"request {i} after the scale-out")
        assert output_of(body).tolist() == [2.0 * i, 0, 0, 0]
    causes = [a["Cause"] for a in asg.describe_scaling_activities(
        ServiceNamespace="sagemaker", ResourceId=key["ResourceId"])["ScalingActivities"]]
    assert any("async-ep-backlog-without-capacity" in c for c in causes)
    asg.deregister_scalable_target(**key)
    _messages(world.sqs, world.success_queue, 3)


def test_kill_9_with_requests_queued_loses_none(s3_server: S3, tmp_path: Path) -> None:
    """``mme serve`` killed with SIGKILL while its model holds every call: started again on
    the same state folder, it answers every request it had accepted."""
    gate = tmp_path / "gate"  # absent: the model holds its calls
    write_scale_model(tmp_path / "repo", "scale", scale=3.0, run_gate=str(gate))
    tarball = package(tmp_path / "repo", tmp_path / "scale.tar.gz")
    s3_server.client.upload_file(str(tarball), BUCKET, "models/scale3.tar.gz")
    settings = {"MME_CACHE_DIR": str(tmp_path / "cache"),
                "MME_S3_ENDPOINT_URL": s3_server.endpoint_url, **{
                    k.upper() if k != "region_name" else "AWS_DEFAULT_REGION": v
                    for k, v in DUMMY_CREDENTIALS.items()}}
    first = EmulatorProcess(settings, tmp_path / "first.log").start()
    try:
        sm = _sm(first.url)
        _deploy(sm, "restarted", f"s3://{BUCKET}/models/scale3.tar.gz",
                _async_config(prefix="restarted"))
        _in_service(sm, "restarted")
        rt = runtime_client(first.url)
        answers = [rt.invoke_endpoint_async(
            EndpointName="restarted", ContentType="application/json",
            Body=scale_request([float(i), 0.0, 0.0, 0.0])) for i in range(50)]
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        first.stop()
    finally:
        first.stop()
    gate.touch()
    second = EmulatorProcess(settings, tmp_path / "second.log").start()
    try:
        for i, answer in enumerate(answers):
            body = wait_for(lambda a=answer: _read(s3_server.client, a["OutputLocation"]), 120,
                            f"request {i} after the restart", interval_s=0.1)
            assert output_of(body).tolist() == [3.0 * i, 0, 0, 0]
    finally:
        second.stop()
