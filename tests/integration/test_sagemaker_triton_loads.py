"""Tarballs served as SageMaker's Triton serves them, on one server: the default endpoint is
an ml.m5.xlarge (no GPU), a second endpoint an ml.g5.xlarge.

- a KIND_GPU model on the CPU type fails its load with Triton's words; on the GPU type it
  serves (on CPU where this machine has no GPU, and /_emulator/models and the page say so);
- a decoupled model loads, and every request to it gets Triton's refusal, status 400;
- a model folder whose name Triton cannot take fails the load at once;
- ``--load-model`` in SAGEMAKER_TRITON_ADDITIONAL_ARGS fails a multi-model endpoint;
- the python_backend ``bls_sync`` shape (a Python model calling another by name, both in one
  tarball, no ensemble): the folder the listing gives last is loaded, the other is not, so a
  call by name fails as on SageMaker.

The decisions themselves: tests/unit/test_sagemaker_triton_loads.py.
"""

from __future__ import annotations

import json
import logging
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest

from emulator.manager import repository
from emulator.server import EmulatorServer
from emulator.settings import Settings
from emulator.triton.launcher import count_gpus
from tests.client_support import DUMMY_CREDENTIALS, create_mme_endpoint, runtime_client
from tests.fault_support import get_json
from tests.support import SUITE_ENV, output_of, package, scale_request, tar_bytes, write_scale_model

FAST = {"Delay": 1, "MaxAttempts": 120}

BLS_MODEL_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            call = pb_utils.InferenceRequest(model_name="scale", requested_output_names=["Y"],
                                             inputs=[x])
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            y = pb_utils.get_output_tensor_by_name(answer, "Y")
            responses.append(pb_utils.InferenceResponse([y]))
        return responses
'''


def _config_edit(folder: Path, old: str, new: str) -> None:
    text = (folder / "config.pbtxt").read_text()
    assert old in text
    (folder / "config.pbtxt").write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatorServer, Path]]:
    work = tmp_path_factory.mktemp("loads")
    store = work / "store"
    store.mkdir()
    gpu = write_scale_model(work / "gpu", "gpu")
    _config_edit(gpu, "kind: KIND_CPU", "kind: KIND_GPU")
    package(gpu, store / "gpu.tar.gz", "folder")
    decoupled = write_scale_model(work / "decoupled", "decoupled")
    _config_edit(decoupled, "instance_group", "model_transaction_policy { decoupled: true }\n"
                                              "instance_group")
    package(decoupled, store / "decoupled.tar.gz", "folder")
    bls = work / "bls"
    write_scale_model(bls, "scale")
    folder = write_scale_model(bls, "bls")
    (folder / "1" / "model.py").write_text(BLS_MODEL_PY)
    package(bls, store / "bls.tar.gz", "flat")
    newline = write_scale_model(work / "newline", "m")
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for path in sorted(newline.rglob("*")):
        info = tarfile.TarInfo("bad\nname/" + str(path.relative_to(newline)))
        if path.is_dir():
            info.type = tarfile.DIRTYPE
            members.append((info, None))
        else:
            data = path.read_bytes()
            info.size = len(data)
            members.append((info, data))
    (store / "newline.tar.gz").write_bytes(tar_bytes(members))
    server = EmulatorServer(Settings.from_env(
        env=SUITE_ENV, cache_dir=work / "cache", port=0, model_data=str(store),
        instance_type="ml.m5.xlarge")).start()
    try:
        yield server, store
    finally:
        server.stop()


def _error(rt: Any, target: str, endpoint: str = "local") -> dict[str, Any]:
    with pytest.raises(rt.exceptions.ModelError) as caught:
        rt.invoke_endpoint(EndpointName=endpoint, TargetModel=target,
                           ContentType="application/octet-stream",
                           Body=scale_request([1, 2, 3, 4]))
    return caught.value.response  # type: ignore[no-any-return]


def _rows(server: EmulatorServer, endpoint: str) -> dict[str, dict[str, Any]]:
    described = get_json(f"{server.url}/_emulator/models")["Endpoints"][endpoint]
    return {row["TargetModel"]: row for row in described["Models"]}


def test_kind_gpu_fails_on_a_cpu_type_and_serves_on_a_gpu_type(
        served: tuple[EmulatorServer, Path], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "emulator.manager")
    server, store = served
    rt = runtime_client(server.url)
    error = _error(rt, "gpu.tar.gz")
    assert error["OriginalStatusCode"] == 400
    assert json.loads(error["OriginalMessage"])["error"].endswith(
        "instance group gpu.tar.gz_0 of model gpu.tar.gz has kind KIND_GPU but no GPUs are "
        "available;\n")
    failed = [e for e in get_json(f"{server.url}/_emulator/page/state")["Events"]
              if e["step"] == "failed" and e["model"] == "gpu.tar.gz"]
    assert failed and "has kind KIND_GPU but no GPUs are available" in failed[-1]["details"][
        "error"]

    sm = boto3.client("sagemaker", endpoint_url=server.url, **DUMMY_CREDENTIALS)
    create_mme_endpoint(sm, "gpu", f"file://{store}", "ml.g5.xlarge")
    answer = rt.invoke_endpoint(EndpointName="gpu", TargetModel="gpu.tar.gz",
                                ContentType="application/octet-stream",
                                Body=scale_request([1, 2, 3, 4]))
    assert list(output_of(answer["Body"].read())) == [2, 4, 6, 8]
    on_cpu = count_gpus() == 0
    assert _rows(server, "gpu")["gpu.tar.gz"]["KindGpuOnCpu"] is on_cpu
    events = [e for e in get_json(f"{server.url}/_emulator/page/state")["Events"]
              if e["step"] == "loaded" and e["endpoint"] == "gpu"]
    assert events and events[-1]["details"].get("gpu_on_cpu", False) is on_cpu
    loaded = [r.getMessage() for r in caplog.records
              if "model=gpu.tar.gz step=load seconds=" in r.getMessage()]
    assert loaded and ("device=cpu" in loaded[-1]) is on_cpu


def test_load_model_at_start_fails_a_multi_model_endpoint(
        served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    sm = boto3.client("sagemaker", endpoint_url=server.url, **DUMMY_CREDENTIALS)
    sm.create_model(ModelName="load-at-start", PrimaryContainer={
        "Image": "triton", "Mode": "MultiModel", "ModelDataUrl": f"file://{store}",
        "Environment": {"SAGEMAKER_TRITON_ADDITIONAL_ARGS": "--load-model=gpu"}})
    sm.create_endpoint_config(EndpointConfigName="load-at-start", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "load-at-start",
        "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1}])
    sm.create_endpoint(EndpointName="load-at-start", EndpointConfigName="load-at-start")
    with pytest.raises(Exception, match="Failed"):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="load-at-start",
                                                  WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="load-at-start")
    assert described["EndpointStatus"] == "Failed"
    assert "Remove --load-model" in described["FailureReason"]


def test_a_decoupled_model_loads_and_every_request_is_refused(
        served: tuple[EmulatorServer, Path]) -> None:
    server, _ = served
    error = _error(runtime_client(server.url), "decoupled.tar.gz")
    assert error["OriginalStatusCode"] == 400
    assert json.loads(error["OriginalMessage"]) == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"}
    assert _rows(server, "local")["decoupled.tar.gz"]["Loaded"]


def test_a_folder_name_triton_cannot_take_fails_at_once(
        served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    from harness.lint import lint

    assert [f.rule.id for f in lint([store / "newline.tar.gz"]).findings] == ["MME009"]
    error = _error(runtime_client(server.url), "newline.tar.gz")
    assert error["OriginalStatusCode"] == 400
    assert "has a control character in its name" in error["OriginalMessage"]


def test_bls_shape_loads_the_folder_listed_last_and_not_its_callee(
        served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    rt = runtime_client(server.url)
    try:
        answer = rt.invoke_endpoint(EndpointName="local", TargetModel="bls.tar.gz",
                                    ContentType="application/octet-stream",
                                    Body=scale_request([1, 2, 3, 4]))
        served_model, body = "scale", answer["Body"].read()
    except rt.exceptions.ModelError as exc:
        served_model, body = "bls", exc.response["OriginalMessage"].encode()
    extracted = next(p.parent for p in (server.settings.cache_dir).rglob("bls")
                     if (p / "config.pbtxt").is_file())
    assert repository.listing_order(extracted)[-1] == served_model
    if served_model == "scale":  # the callee itself answers
        assert np.array_equal(output_of(body), [2, 4, 6, 8])
    else:  # the caller runs, and its call by name finds 'scale' not loaded
        assert b"Model 'scale' is not ready" in body
        assert b"model instance 'bls.tar.gz_0_0'" in body
    loaded = _rows(server, "local")["bls.tar.gz"]
    assert loaded["Loaded"] and loaded["TritonModel"].startswith(served_model + "--")
    from harness.lint import lint  # which says so before a deploy
    [several] = lint([store / "bls.tar.gz"]).findings
    assert several.rule.id == "MME006" and "'bls' calls 'scale' (BLS)" in several.message
