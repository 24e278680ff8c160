"""Stateful sessions against `mme serve`, an unmodified boto3 sagemaker-runtime client, and a
single-model variant on three instances (each its own embedded Triton): SessionId NEW_SESSION
opens a session on the instance that answered (NewSessionId: "<id>; Expires=<time>"), every
call in it lands there, CLOSE ends it (ClosedSessionId), and a call naming a closed, unknown or
orphaned session gets the ValidationError the emulator answers for it.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.component_support import ComponentServer, serving
from tests.page_support import CHROMIUM, chromium_cli
from tests.support import output_of, package, scale_request, wait_until

ENDPOINT = "stateful"
# A stateful Python model: answers the request parameters Triton gave it (the session id among
# them) as a JSON string.
ECHO_MODEL = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "P", np.array([r.parameters().encode()], dtype=np.object_))]) for r in requests]
'''
ECHO_CONFIG = '''name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "P" data_type: TYPE_STRING dims: [ 1 ] } ]
'''
NEW_SESSION_ID = re.compile(
    r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*;\sExpires=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
    r"[0-9]{2}Z$")


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentServer]:
    with serving(tmp_path_factory.mktemp("sessions"), scales={"double": 2.0}) as server:
        sm = server.client("sagemaker")
        sm.create_endpoint_config(EndpointConfigName=ENDPOINT, ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": "double", "InstanceType": "ml.m5.xlarge",
            "InitialInstanceCount": 3}])
        sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=ENDPOINT)
        wait_until(lambda: sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointStatus"]
                   == "InService", 60, "three instances InService")
        yield server


def _invoke(module: ComponentServer, body: bytes | None = None, **extra: Any) -> dict[str, Any]:
    answer = runtime_client(module.server.url).invoke_endpoint(
        EndpointName=ENDPOINT, ContentType="application/json",
        Body=scale_request([1, 2, 3, 4]) if body is None else body, **extra)
    answer["Payload"] = answer["Body"].read()
    answer["Headers"] = answer["ResponseMetadata"]["HTTPHeaders"]
    return answer


def _sessions(module: ComponentServer) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{module.server.url}/_emulator/models") as resp:
        models = json.loads(resp.read())
    return models["Endpoints"][ENDPOINT]["Variants"]["AllTraffic"]["Sessions"]


def _error(module: ComponentServer, **extra: Any) -> ClientError:
    with pytest.raises(ClientError) as raised:
        _invoke(module, **extra)
    return raised.value


def test_100_calls_in_one_session_land_on_one_instance_of_three_then_close_ends_it(
        module: ComponentServer) -> None:
    spread = Counter(_invoke(module)["Headers"]["x-mme-instance"] for _ in range(6))
    assert len(spread) == 3  # without a session, calls spread over the three instances

    opened = _invoke(module, SessionId="NEW_SESSION")
    assert output_of(opened["Payload"]).tolist() == [2, 4, 6, 8]  # the model answered it
    assert NEW_SESSION_ID.match(opened["NewSessionId"]), opened["NewSessionId"]
    session_id = opened["NewSessionId"].split(";")[0]
    home = opened["Headers"]["x-mme-instance"]
    assert [s["SessionId"] for s in _sessions(module)] == [session_id]
    assert _sessions(module)[0]["Instance"] == home.split("/")[1]

    calls = [_invoke(module, SessionId=session_id) for _ in range(100)]
    assert {c["Headers"]["x-mme-instance"] for c in calls} == {home}
    assert {c["Headers"]["x-mme-routed-by"] for c in calls} == {"SESSION"}
    assert all(output_of(c["Payload"]).tolist() == [2, 4, 6, 8] for c in calls)
    if Path(CHROMIUM).exists():  # the live page lists it, with the instance that holds it
        dom = chromium_cli("--dump-dom", f"{module.server.url}/_emulator/")
        assert f'data-session="{session_id}"' in dom

    closed = _invoke(module, body=json.dumps({"requestType": "CLOSE"}).encode(),
                     SessionId=session_id)
    assert closed["ClosedSessionId"] == session_id
    assert closed["Headers"]["x-mme-instance"] == home
    assert _sessions(module) == []
    error = _error(module, SessionId=session_id)
    assert error.response["Error"]["Code"] == "ValidationError"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert f"Session {session_id} is not an open session" in error.response["Error"]["Message"]


def test_the_documented_control_body_opens_a_session_without_reaching_the_model(
        module: ComponentServer) -> None:
    opened = _invoke(module, body=json.dumps({"requestType": "NEW_SESSION"}).encode(),
                     SessionId="NEW_SESSION")
    session_id = opened["NewSessionId"].split(";")[0]
    assert json.loads(opened["Payload"]) == {"result": f"Session {session_id} created"}
    assert output_of(_invoke(module, SessionId=session_id)["Payload"]).tolist() == [2, 4, 6, 8]
    _invoke(module, body=b'{"requestType": "CLOSE"}', SessionId=session_id)


def test_unknown_sessions_and_bad_ids_are_refused(module: ComponentServer) -> None:
    error = _error(module, SessionId="no-such-session")
    assert error.response["Error"]["Code"] == "ValidationError"
    assert "Start a new session with SessionId NEW_SESSION" in error.response["Error"]["Message"]
    # botocore sends what its model allows only; a raw request with a bad id is refused too.
    request = urllib.request.Request(
        f"{module.server.url}/endpoints/{ENDPOINT}/invocations", data=scale_request([1] * 4),
        headers={"Content-Type": "application/json", "X-Amzn-SageMaker-Session-Id": "bad_id"})
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request)
    assert raised.value.code == 400
    assert "sessionId" in json.loads(raised.value.read())["Message"]


def test_a_session_whose_instance_is_gone_gets_the_error(module: ComponentServer) -> None:
    """Scaled in from three instances to one (the newest go first): a session on i-3 is gone
    with it; one on i-1 lives on."""
    by_instance: dict[str, str] = {}
    while len(by_instance) < 3:
        opened = _invoke(module, SessionId="NEW_SESSION")
        by_instance.setdefault(opened["Headers"]["x-mme-instance"].split("/")[1],
                               opened["NewSessionId"].split(";")[0])
    sm = module.client("sagemaker")
    sm.update_endpoint_weights_and_capacities(EndpointName=ENDPOINT, DesiredWeightsAndCapacities=[
        {"VariantName": "AllTraffic", "DesiredInstanceCount": 1}])
    wait_until(lambda: sm.describe_endpoint(EndpointName=ENDPOINT)["ProductionVariants"][0][
        "CurrentInstanceCount"] == 1, 60, "scaled in to one instance")
    assert _invoke(module, SessionId=by_instance["i-1"])["Headers"]["x-mme-instance"] \
        == "AllTraffic/i-1"
    error = _error(module, SessionId=by_instance["i-3"])
    assert error.response["Error"]["Code"] == "ValidationError"
    assert {s["Instance"] for s in _sessions(module)} == {"i-1"}


def test_the_model_is_told_the_session_id_as_a_request_parameter(
        module: ComponentServer, tmp_path: Any) -> None:
    """A Triton model reads the session's id from its request's parameters
    (``X-Amzn-SageMaker-Session-Id``, the header Triton forwards as one), on every call of
    the session."""
    (tmp_path / "echo" / "1").mkdir(parents=True)
    (tmp_path / "echo" / "1" / "model.py").write_text(ECHO_MODEL)
    (tmp_path / "echo" / "config.pbtxt").write_text(ECHO_CONFIG)
    tarball = package(tmp_path / "echo", module.root / "store" / "echo.tar.gz", "folder")
    sm = module.client("sagemaker")
    sm.create_model(ModelName="echo", ExecutionRoleArn="arn:aws:iam::123456789012:role/x",
                    PrimaryContainer={"Image": "triton", "ModelDataUrl": tarball.as_uri()})
    sm.create_endpoint_config(EndpointConfigName="echo", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "echo", "InstanceType": "ml.m5.xlarge",
        "InitialInstanceCount": 1}])
    sm.create_endpoint(EndpointName="echo", EndpointConfigName="echo")
    wait_until(lambda: sm.describe_endpoint(EndpointName="echo")["EndpointStatus"]
               == "InService", 60, "echo InService")
    rt = runtime_client(module.server.url)
    body = json.dumps({"inputs": [{"name": "X", "shape": [4], "datatype": "FP32",
                                   "data": [1, 2, 3, 4]}]})

    def parameters(**extra: Any) -> dict[str, Any]:
        answer = rt.invoke_endpoint(EndpointName="echo", ContentType="application/json",
                                    Body=body, **extra)
        value = json.loads(answer["Body"].read())["outputs"][0]["data"][0]
        return {"answer": answer, "parameters": json.loads(value)}

    opened = parameters(SessionId="NEW_SESSION")
    session_id = opened["answer"]["NewSessionId"].split(";")[0]
    assert opened["parameters"]["X-Amzn-SageMaker-Session-Id"] == session_id
    assert parameters(SessionId=session_id)["parameters"][
        "X-Amzn-SageMaker-Session-Id"] == session_id
    assert "X-Amzn-SageMaker-Session-Id" not in parameters()["parameters"]
