"""Large binary bodies reach the embedded Triton through system shared memory, and the
client cannot tell: the same answers, the same errors, nothing left behind.

A real Triton behind the emulator, boto3 as the client, and Triton's own HTTP API (direct, as
the reference for what it answers and as the witness of the registered region).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests.client_support import runtime_client
from tests.fault_support import SHM, get_json, instance_of
from tests.launcher_support import TritonLauncher
from tests.support import SUITE_ENV, package, wait_until

BINARY_JSON = "application/vnd.sagemaker-triton.binary+json"
TARGET = "stats.tar.gz"

# Two binary inputs around a JSON one: each binary input must be read at its own offset.
STATS_MODEL_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            c = pb_utils.get_input_tensor_by_name(request, "C").as_numpy()
            y = np.array([a.astype(np.float64).sum(), b.sum(), c[0]], dtype=np.float64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses
'''
STATS_MODEL_CONFIG = '''name: "stats"
backend: "python"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "C" data_type: TYPE_INT32 dims: [ 1 ] },
        { name: "B" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP64 dims: [ 3 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


def stats_request(a_count: int, b_count: int, c: int, a_shape: int | None = None,
                  a_datatype: str = "FP32") -> tuple[bytes, str, list[float]]:
    """(body, content type, the expected Y); ``a_shape`` and ``a_datatype`` say what A's
    header claims, whatever its bytes are."""
    a = (np.arange(a_count) % 251 + c).astype(np.float32)
    b = (np.arange(b_count) % 97 * c).astype(np.int64)
    header = json.dumps({
        "inputs": [
            {"name": "A", "shape": [a_count if a_shape is None else a_shape],
             "datatype": a_datatype, "parameters": {"binary_data_size": a.nbytes}},
            {"name": "C", "shape": [1], "datatype": "INT32", "data": [c]},
            {"name": "B", "shape": [b_count], "datatype": "INT64",
             "parameters": {"binary_data_size": b.nbytes}}],
        "outputs": [{"name": "Y", "parameters": {"binary_data": False}}]}).encode()
    expected = [float(a.astype(np.float64).sum()), float(b.sum()), float(c)]
    return (header + a.tobytes() + b.tobytes(), f"{BINARY_JSON};json-header-size={len(header)}",
            expected)


LARGE = (80_000, 10_000)  # 320 KB + 80 KB of tensors: over the 64 KiB the region takes


def y_of(body: bytes) -> list[float]:
    return [float(v) for v in json.loads(body)["outputs"][0]["data"]]


def invoke(rt: Any, body: bytes, content_type: str) -> list[float]:
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel=TARGET, Body=body,
                              ContentType=content_type)
    return y_of(resp["Body"].read())


def shared_bodies(server: EmulatorServer) -> int:
    described = get_json(f"{server.url}/_emulator/models")["Endpoints"]["local"]
    return int(described["Variants"]["AllTraffic"]["Instances"][0]["SharedMemoryBodies"])


def direct(server: EmulatorServer, path: str, body: bytes | None = None,
           header_length: int | None = None) -> tuple[int, bytes]:
    """Triton's own answer, over its HTTP API."""
    headers = {} if header_length is None else {
        "Inference-Header-Content-Length": str(header_length),
        "Content-Type": "application/octet-stream"}
    request = urllib.request.Request(instance_of(server).launcher.http_url + path, data=body,
                                     headers=headers, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def triton_model_name(server: EmulatorServer) -> str:
    return instance_of(server).manager.records[TARGET].entry  # type: ignore[no-any-return]


def region_files(server: EmulatorServer) -> list[str]:
    """This process's region files left in Triton's /dev/shm or the machine's (where another
    test's emulator may be making its own)."""
    triton_shm = instance_of(server).launcher.shared_memory_dir
    return [p.name for folder in {triton_shm, SHM} if folder is not None
            for p in Path(folder).glob(f"mme-bodies-{os.getpid()}-*")]


def _store(root: Path) -> Path:
    folder = root / "repo" / "stats"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(STATS_MODEL_PY)
    (folder / "config.pbtxt").write_text(STATS_MODEL_CONFIG)
    store = root / "store"
    store.mkdir()
    package(folder, store / TARGET, "folder")
    return store


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One emulator with a region that holds two large bodies at once (1 MiB)."""
    root = tmp_path_factory.mktemp("shm")
    server = EmulatorServer(Settings.from_env(
        env=SUITE_ENV, model_data=str(_store(root)), cache_dir=root / "cache", port=0,
        triton_shared_memory="1MiB")).start()
    rt = runtime_client(server.url)
    try:
        small, content_type, expected = stats_request(4, 4, 1)
        assert invoke(rt, small, content_type) == expected  # loaded
        yield server, rt
    finally:
        server.stop()


def test_a_large_binary_body_goes_through_shared_memory_with_the_answer_triton_gives(
        served: Any) -> None:
    server, rt = served
    before = shared_bodies(server)
    small, content_type, expected = stats_request(100, 100, 3)
    assert invoke(rt, small, content_type) == expected
    assert shared_bodies(server) == before  # a small body goes over HTTP

    body, content_type, expected = stats_request(*LARGE, 5)
    assert invoke(rt, body, content_type) == expected
    assert shared_bodies(server) == before + 1
    header_length = int(content_type.rsplit("=", 1)[1])
    status, answer = direct(server, f"/v2/models/{triton_model_name(server)}/infer", body,
                            header_length)
    assert (status, y_of(answer)) == (200, expected)  # what Triton says over HTTP

    status, regions = direct(server, "/v2/systemsharedmemory/status")
    assert status == 200 and [r["name"] for r in json.loads(regions)] == ["mme-request-bodies"]
    assert region_files(server) == []  # unlinked once Triton mapped it: nothing to leave behind


def test_on_each_launcher_a_large_body_reaches_triton_through_its_shared_memory(
        start_emulator: Any, triton_launcher: TritonLauncher, tmp_path: Path) -> None:
    """Docker: the container's own /dev/shm, reached as root through its process."""
    server = start_emulator(model_data=str(_store(tmp_path)))
    rt = runtime_client(server.url)
    body, content_type, expected = stats_request(*LARGE, 4)

    assert invoke(rt, body, content_type) == expected

    through = triton_launcher.name == "embedded" or os.geteuid() == 0
    assert shared_bodies(server) == int(through)
    status, regions = direct(server, "/v2/systemsharedmemory/status")
    assert [r["name"] for r in json.loads(regions)] == (["mme-request-bodies"] if through else [])
    assert region_files(server) == []


@pytest.mark.parametrize("a_datatype, a_shape, through_shared_memory", [
    # Triton's error for a datatype the model does not take is the same either way.
    pytest.param("FP64", LARGE[0] // 2, True, id="wrong-datatype"),
    # Sizes are not checked against the shape the same way over HTTP and from shared memory:
    # such a body goes over HTTP. (A shape one element longer than the bytes would be read past
    # the input by Triton, from wherever its buffer lies: no answer to compare.)
    pytest.param("FP32", LARGE[0] - 1, False, id="shape-disagrees-with-bytes"),
])
def test_a_body_triton_answers_with_an_error_or_a_quirk_is_answered_as_over_http(
        served: Any, a_datatype: str, a_shape: int, through_shared_memory: bool) -> None:
    server, rt = served
    body, content_type, _ = stats_request(*LARGE, 2, a_shape=a_shape, a_datatype=a_datatype)
    header_length = int(content_type.rsplit("=", 1)[1])
    triton_status, triton_says = direct(
        server, f"/v2/models/{triton_model_name(server)}/infer", body, header_length)
    before = shared_bodies(server)

    try:
        emulator_says = (200, json.dumps(invoke(rt, body, content_type)).encode())
    except ClientError as exc:
        response = exc.response
        assert response["Error"]["Code"] == "ModelError"
        emulator_says = (response["OriginalStatusCode"], response["OriginalMessage"].encode())

    if triton_status == 200:
        assert emulator_says == (200, json.dumps(y_of(triton_says)).encode())
    else:  # Triton's words, with the model it names by its public name (the TargetModel)
        public = triton_says.replace(triton_model_name(server).encode(), TARGET.encode())
        assert emulator_says == (triton_status, public)
    assert shared_bodies(server) == before + through_shared_memory


def test_more_large_bodies_at_once_than_the_region_holds_all_go_through_it(
        served: Any) -> None:
    """The region holds two of them: the others wait for room instead of going over HTTP."""
    server, rt = served
    before = shared_bodies(server)
    requests = [stats_request(LARGE[0] + i, LARGE[1] - i, i) for i in range(1, 25)]
    answers: dict[int, Any] = {}

    def client(first: int) -> None:
        for index in range(first, len(requests), 6):
            body, content_type, _ = requests[index]
            try:
                answers[index] = invoke(rt, body, content_type)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                answers[index] = exc

    threads = [threading.Thread(target=client, args=(first,)) for first in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert answers == {i: expected for i, (_, _, expected) in enumerate(requests)}
    assert shared_bodies(server) == before + len(requests)


def test_after_triton_restarts_large_bodies_go_through_a_new_region(
        start_emulator: Any, tmp_path: Path) -> None:
    server = start_emulator(model_data=str(_store(tmp_path)))
    rt = runtime_client(server.url)
    body, content_type, expected = stats_request(*LARGE, 7)
    assert invoke(rt, body, content_type) == expected
    launcher = instance_of(server).launcher

    os.kill(launcher.pid, signal.SIGKILL)
    wait_until(lambda: launcher.restarts == 1 and launcher.is_running(),
               what="Triton to restart")
    wait_until(lambda: _answers(rt, body, content_type, expected), timeout=60,
               what="the model to come back")
    before = shared_bodies(server)

    assert invoke(rt, body, content_type) == expected
    assert shared_bodies(server) == before + 1
    status, regions = direct(server, "/v2/systemsharedmemory/status")
    assert [r["name"] for r in json.loads(regions)] == ["mme-request-bodies"]
    assert region_files(server) == []


def _answers(rt: Any, body: bytes, content_type: str, expected: list[float]) -> bool:
    try:
        return invoke(rt, body, content_type) == expected
    except ClientError:
        return False  # ModelNotReady while the model loads again


def test_without_shared_memory_every_body_goes_over_http(start_emulator: Any,
                                                         tmp_path: Path) -> None:
    server = start_emulator(model_data=str(_store(tmp_path)), triton_shared_memory="0")
    rt = runtime_client(server.url)
    body, content_type, expected = stats_request(*LARGE, 9)

    assert invoke(rt, body, content_type) == expected

    assert shared_bodies(server) == 0
    assert direct(server, "/v2/systemsharedmemory/status") == (200, b"[]")
