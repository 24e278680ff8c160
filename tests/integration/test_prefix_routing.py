"""PREFIX_AWARE routing against `mme serve` and unmodified boto3 clients: an inference
component's three copies (each its own embedded Triton) and a variant's three instances.

Calls whose bodies share their first PrefixLength (1,024) bytes land on one copy while it has
fewer than ConcurrencyThreshold calls in flight; past it they spill to the others, and come
back once it is free. The model holds its calls while a gate file is absent, so the in-flight
counts are exact (conditions, no sleeps).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.client_support import runtime_client
from tests.component_support import (
    RESOURCES,
    ROLE,
    ComponentServer,
    create_component,
    create_component_endpoint,
    serving,
)
from tests.support import output_of, package, wait_until, write_scale_model

PREFIX_AWARE = {"RoutingStrategy": "PREFIX_AWARE", "PrefixAwareRoutingConfig": {
    "PrefixLength": 1024, "ConcurrencyThreshold": 2}}


class Module:
    def __init__(self, server: ComponentServer, gate: Path) -> None:
        self.server = server
        self.gate = gate


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    root = tmp_path_factory.mktemp("prefix")
    gate = root / "gate"
    gate.touch()  # open: calls run at once
    with serving(root, scales={}) as server:
        work = root / "gated"
        tarball = package(write_scale_model(work, "gated", 2.0, run_gate=str(gate)),
                          root / "store" / "gated.tar.gz", "folder")
        sm = server.client("sagemaker")
        sm.create_model(ModelName="gated", ExecutionRoleArn=ROLE,
                        PrimaryContainer={"Image": "triton", "ModelDataUrl": tarball.as_uri()})
        yield Module(server, gate)


def _body(shared: str, tail: str) -> bytes:
    """A KServe request whose first 1,024 bytes are ``shared``'s (a request parameter the
    model ignores, as a system prompt), then ``tail``."""
    head = '{"parameters": {"prompt": "' + shared
    prompt = shared.ljust(1024 - len(head) + len(shared), "~") + tail
    return json.dumps({"parameters": {"prompt": prompt}, "inputs": [
        {"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode()


def _invoke(module: Module, endpoint: str, body: bytes, **extra: Any) -> dict[str, str]:
    answer = runtime_client(module.server.server.url).invoke_endpoint(
        EndpointName=endpoint, ContentType="application/json", Body=body, **extra)
    assert output_of(answer["Body"].read()).tolist() == [2, 4, 6, 8]
    headers: dict[str, str] = answer["ResponseMetadata"]["HTTPHeaders"]
    return headers


def _described(module: Module, endpoint: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{module.server.server.url}/_emulator/models") as resp:
        described: dict[str, Any] = json.loads(resp.read())["Endpoints"][endpoint]
    return described


@pytest.fixture(scope="module")
def component(module: Module) -> str:
    """Endpoint ``prefix-ic`` (PREFIX_AWARE, threshold 2) with component ``prefix-ic-llm`` on
    three copies of the gated model."""
    sm = module.server.client("sagemaker")
    create_component_endpoint(sm, "prefix-ic", RoutingConfig=PREFIX_AWARE)
    create_component(sm, "prefix-ic-llm", "prefix-ic", copies=3, ModelName="gated",
                     ComputeResourceRequirements=RESOURCES)
    return "prefix-ic-llm"


def test_a_shared_prefix_lands_on_one_copy_until_the_threshold_then_spills(
        module: Module, component: str) -> None:
    sm = module.server.client("sagemaker")
    assert sm.describe_endpoint(EndpointName="prefix-ic")["ProductionVariants"][0][
        "RoutingConfig"] == PREFIX_AWARE

    def invoke(body: bytes) -> dict[str, str]:
        return _invoke(module, "prefix-ic", body, InferenceComponentName="prefix-ic-llm")

    answers = [invoke(_body("You are a helpful assistant.", f"question {n}"))
               for n in range(12)]
    home = answers[0]["x-mme-instance"]
    assert {(a["x-mme-instance"], a["x-mme-routed-by"]) for a in answers} == {
        (home, "PREFIX_AWARE")}
    others = Counter(invoke(_body(f"Tenant {n} assistant.", "hello"))["x-mme-instance"]
                     for n in range(30))
    assert len(others) == 3  # other prefixes spread over the three copies

    module.gate.unlink()  # the model now holds its calls: they stay in flight
    held: list[dict[str, str]] = []
    threads = []
    try:
        for n in range(4):
            thread = threading.Thread(target=lambda n=n: held.append(
                invoke(_body("You are a helpful assistant.", f"held {n}"))))
            thread.start()
            threads.append(thread)
            wait_until(lambda n=n: _described(module, "prefix-ic")["InferenceComponents"][
                "prefix-ic-llm"]["InFlight"] == n + 1, 30, f"call {n + 1} in flight")
    finally:
        module.gate.touch()
        for thread in threads:
            thread.join()
    routed = Counter((a["x-mme-instance"] == home, a["x-mme-routed-by"]) for a in held)
    # Two on the prefix's copy (its threshold), the two others spilled, one to each other copy.
    assert routed == {(True, "PREFIX_AWARE"): 2, (False, "PREFIX_AWARE; spilled"): 2}
    assert len({a["x-mme-instance"] for a in held}) == 3
    assert invoke(_body("You are a helpful assistant.", "after"))["x-mme-instance"] == home
    assert _described(module, "prefix-ic")["InferenceComponents"]["prefix-ic-llm"][
        "RoutingStrategy"] == "PREFIX_AWARE"


def test_a_variants_instances_route_by_prefix_and_prefix_aware_id(module: Module) -> None:
    sm = module.server.client("sagemaker")
    sm.create_endpoint_config(EndpointConfigName="prefix-variant", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "gated", "InstanceType": "ml.m5.xlarge",
        "InitialInstanceCount": 3, "RoutingConfig": PREFIX_AWARE}])
    sm.create_endpoint(EndpointName="prefix-variant", EndpointConfigName="prefix-variant")
    wait_until(lambda: sm.describe_endpoint(EndpointName="prefix-variant")["EndpointStatus"]
               == "InService", 60, "three instances InService")
    body = _body("Summarize the following contract.", "")
    homes = {_invoke(module, "prefix-variant", body)["x-mme-instance"] for _ in range(10)}
    assert len(homes) == 1
    by_id = {_invoke(module, "prefix-variant", body, PrefixAwareId=f"app-{n}")[
        "x-mme-instance"] for n in range(12)}
    assert len(by_id) > 1  # the same prefix from different applications is told apart
    assert _described(module, "prefix-variant")["Variants"]["AllTraffic"][
        "RoutingStrategy"] == "PREFIX_AWARE"


def test_a_session_on_a_components_copies_outranks_the_prefix_and_holds_for_streams(
        module: Module, component: str) -> None:
    """A session opened on the component keeps its calls on its copy whatever their prefix,
    InvokeEndpointWithResponseStream's included; the component's sessions are listed."""
    rt = runtime_client(module.server.server.url)
    opened = rt.invoke_endpoint(EndpointName="prefix-ic", InferenceComponentName="prefix-ic-llm",
                                ContentType="application/json", SessionId="NEW_SESSION",
                                Body=_body("You are a helpful assistant.", "hi"))
    opened["Body"].read()
    session_id = opened["NewSessionId"].split(";")[0]
    copy = opened["ResponseMetadata"]["HTTPHeaders"]["x-mme-instance"]
    answers = [_invoke(module, "prefix-ic", _body(f"Tenant {n} assistant.", "hello"),
                       InferenceComponentName="prefix-ic-llm", SessionId=session_id)
               for n in range(12)]
    assert {(a["x-mme-instance"], a["x-mme-routed-by"]) for a in answers} == {(copy, "SESSION")}
    streamed = rt.invoke_endpoint_with_response_stream(
        EndpointName="prefix-ic", InferenceComponentName="prefix-ic-llm",
        ContentType="application/json", SessionId=session_id,
        Body=_body("Another prompt entirely.", ""))
    b"".join(e["PayloadPart"]["Bytes"] for e in streamed["Body"] if "PayloadPart" in e)
    assert streamed["ResponseMetadata"]["HTTPHeaders"]["x-mme-instance"] == copy
    listed = _described(module, "prefix-ic")["InferenceComponents"]["prefix-ic-llm"]["Sessions"]
    assert [(s["SessionId"], s["Instance"]) for s in listed] == [
        (session_id, copy.split("/", 1)[1])]
