"""Each class of tarball ``mme lint`` names, served: what the client gets is what SageMaker's
Triton does for it (docs/lint.md, "SageMaker's Triton"). The tarballs are built as the lint's
unit tests build them (tests/lint_support.py); each is linted here too, so a test fails when
the lint and the served behaviour part.

One emulator (an ml.g5.xlarge: one GPU, the image `mme deploy` targets) serves them all. Already
served elsewhere: KIND_GPU on a type without GPU, a decoupled model, a folder name Triton cannot
take, a BLS callee packed but not loaded (tests/integration/test_sagemaker_triton_loads.py).
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.manager import repository
from emulator.server import EmulatorServer
from emulator.settings import Settings
from harness.lint import lint
from tests.client_support import runtime_client
from tests.fault_support import get_json
from tests.integration.test_sagemaker_triton_loads import BLS_MODEL_PY
from tests.lint_support import env_tarball, model_files, tar, with_env
from tests.support import (
    SUITE_ENV,
    output_of,
    scale_request,
    write_scale_model,
    write_two_step_ensemble,
)

INSTANCE_TYPE = "ml.g5.xlarge"
# A conda-pack environment holds an activate script; the Python backend sources it.
ACTIVATE = {"bin/activate": b""}
TIMES_100 = b"(x * 100)"


def _scale(work: Path, tag: str, config_extra: str = "", scale: float = 2.0,
           name: str = "m") -> dict[str, bytes]:
    folder = write_scale_model(work / "src" / tag, name, scale=scale)
    (folder / "config.pbtxt").write_text((folder / "config.pbtxt").read_text() + config_extra)
    return model_files(folder)


def _other_version(files: dict[str, bytes], folder: str) -> None:
    """A version folder whose model answers X * 100 (version 1 answers X * 2)."""
    code = files["m/1/model.py"]
    assert b"(x * self.scale)" in code
    files[f"m/{folder}/model.py"] = code.replace(b"(x * self.scale)", TIMES_100)


def _build(work: Path, store: Path) -> None:
    gpus = _scale(work, "gpus")
    gpus["m/config.pbtxt"] = gpus["m/config.pbtxt"].replace(
        b"kind: KIND_CPU count: 1", b"kind: KIND_GPU gpus: [ 1 ]")
    tar(store / "gpus.tar.gz", gpus)
    tar(store / "two.tar.gz", {**_scale(work, "two-a", name="a"),
                               **_scale(work, "two-b", name="b", scale=3.0)})
    ensembles = work / "ensembles"
    write_scale_model(ensembles, "preprocess")
    write_scale_model(ensembles, "postprocess")
    write_two_step_ensemble(ensembles / "ensemble")
    (ensembles / "ensemble" / "1" / ".keep").write_bytes(b"")  # tar() packs files only
    shutil.copytree(ensembles / "ensemble", ensembles / "ensemble2")
    config = ensembles / "ensemble2" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "ensemble"', 'name: "ensemble2"'))
    tar(store / "ensembles.tar.gz",
        {k: v for f in sorted(ensembles.iterdir()) for k, v in model_files(f).items()})
    caller = _scale(work, "caller", name="caller")
    caller["caller/1/model.py"] = BLS_MODEL_PY.replace('"scale"', '"callee"').encode()
    tar(store / "caller.tar.gz", caller)
    for tag, folder in (("zero", "01"), ("negative", "-1")):
        files = _scale(work, tag)
        _other_version(files, folder)
        tar(store / f"{tag}.tar.gz", files)
    alone = _scale(work, "alone")
    alone["m/-1/model.py"] = alone.pop("m/1/model.py")
    tar(store / "alone.tar.gz", alone)
    every = _scale(work, "every", "version_policy: { all { } }\n")
    _other_version(every, "2")
    tar(store / "every.tar.gz", every)
    for tag, env in {"ok": {}, "py38": {"python": "3.8"}, "glibcxx": {"so": b"GLIBCXX_3.4.32\0"},
                     "glibc": {"so": b"GLIBC_2.38\0"}, "numpy2": {"numpy": "2.1.0"}}.items():
        built = env_tarball(work / f"env-{tag}.tar.gz", extra=ACTIVATE, **env)  # type: ignore
        with_env(store / f"env-{tag}.tar.gz", built, _scale(work, f"env-{tag}"))
    plan = {"m/config.pbtxt": b'name: "m"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n'
            b'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            b'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
            "m/1/model.plan": b"a plan serialized by another TensorRT"}
    tar(store / "plan.tar.gz", plan)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatorServer, Path]]:
    work = tmp_path_factory.mktemp("classes")
    store = work / "store"
    store.mkdir()
    _build(work, store)
    server = EmulatorServer(Settings.from_env(
        env=SUITE_ENV, cache_dir=work / "cache", port=0, model_data=str(store),
        instance_type=INSTANCE_TYPE)).start()
    try:
        yield server, store
    finally:
        server.stop()


def _lint(store: Path, target: str) -> list[tuple[str, str]]:
    report = lint([store / target], instance_type=INSTANCE_TYPE)
    return [(f.rule.id, f.level) for f in report.findings]


def _invoke(server: EmulatorServer, target: str) -> Any:
    return runtime_client(server.url).invoke_endpoint(
        EndpointName="local", TargetModel=target, ContentType="application/octet-stream",
        Body=scale_request([1, 2, 3, 4]))


def _error(server: EmulatorServer, target: str) -> tuple[int, str]:
    rt = runtime_client(server.url)
    with pytest.raises(rt.exceptions.ModelError) as caught:
        _invoke(server, target)
    response = caught.value.response
    assert response["Error"]["Code"] == "ModelError"
    return response["OriginalStatusCode"], json.loads(response["OriginalMessage"])["error"]


def _answer(server: EmulatorServer, target: str) -> tuple[str, list[float]]:
    body = json.loads(_invoke(server, target)["Body"].read())
    return body["model_version"], list(output_of(json.dumps(body).encode()))


def _row(server: EmulatorServer, target: str) -> dict[str, Any]:
    described = get_json(f"{server.url}/_emulator/models")["Endpoints"]["local"]
    return next(r for r in described["Models"] if r["TargetModel"] == target)


def test_gpus_the_instance_type_lacks_fail_the_load(served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    assert _lint(store, "gpus.tar.gz") == [("MME102", "error")]
    status, message = _error(server, "gpus.tar.gz")
    assert status == 400
    assert message == (
        "load failed for model 'gpus.tar.gz': version 1 is at UNAVAILABLE state: Invalid "
        "argument: instance group gpus.tar.gz_0 of model gpus.tar.gz specifies invalid or "
        "unsupported gpu id 1. GPUs with at least the minimum required CUDA compute "
        "compatibility of 6.000000 are: 0;\n")


def test_several_entry_models_serve_one_and_several_ensembles_are_refused(
        served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    assert _lint(store, "two.tar.gz") == [("MME006", "error")]
    version, output = _answer(server, "two.tar.gz")
    extracted = next(p.parent for p in server.settings.cache_dir.rglob("a")
                     if (p / "config.pbtxt").is_file())
    last = repository.listing_order(extracted)[-1]  # the one SageMaker's Triton picks
    assert output == [x * {"a": 2, "b": 3}[last] for x in (1, 2, 3, 4)]
    assert _row(server, "two.tar.gz")["TritonModel"].startswith(last + "--")
    assert _lint(store, "ensembles.tar.gz") == [("MME006", "error")]
    status, message = _error(server, "ensembles.tar.gz")
    assert status == 400
    assert "several top-level ensembles (ensemble, ensemble2)" in message
    assert "Package one ensemble per tarball" in message


def test_a_bls_call_to_a_model_the_tarball_lacks_fails_at_inference(
        served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    assert _lint(store, "caller.tar.gz") == [("MME201", "error")]
    status, message = _error(server, "caller.tar.gz")
    assert status == 500
    assert "Model 'callee' is not ready" in message
    assert "model instance 'caller.tar.gz_0_0'" in message
    assert _row(server, "caller.tar.gz")["Loaded"]  # the load itself succeeded


def test_odd_version_folders_are_not_served_and_a_loaded_negative_one_fails(
        served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    # 01 is ignored, and -1 beside 1 is never the latest: version 1 (X * 2) answers.
    for target in ("zero.tar.gz", "negative.tar.gz"):
        assert _lint(store, target) == [("MME004", "warning")]
        assert _answer(server, target) == ("1", [2, 4, 6, 8])
    # -1 alone is loaded: the stub exits importing it; the answer names the folder and the fix.
    assert _lint(store, "alone.tar.gz") == [("MME004", "error")]
    status, message = _error(server, "alone.tar.gz")
    assert status == 400
    assert message.startswith("load failed for model 'alone.tar.gz': version -1 is at "
                              "UNAVAILABLE state: Internal: the Python backend's stub exits "
                              "importing the model from its version folder '-1'")
    assert "Name version folders 1, 2, 3" in message


def test_version_policy_all_loads_every_version(served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    assert _lint(store, "every.tar.gz") == [("MME203", "warning")]
    assert _answer(server, "every.tar.gz") == ("2", [100, 200, 300, 400])  # the latest answers
    name = _row(server, "every.tar.gz")["TritonModel"]
    url = server.registry.get("local").instances[0].launcher.http_url
    request = urllib.request.Request(f"{url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        index = json.loads(answer.read())
    assert sorted((m["version"], m["state"]) for m in index if m["name"] == name) == [
        ("1", "READY"), ("2", "READY")]


def test_an_environment_the_image_cannot_run_fails_the_load(
        served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    assert _lint(store, "env-ok.tar.gz") == []
    assert _answer(server, "env-ok.tar.gz") == ("1", [2, 4, 6, 8])
    expected = {
        "env-py38.tar.gz": ("MME302", "Failed to initialize Python stub: the environment is "
                            "packed for Python 3.8, the stub runs Python 3.10",
                            "pack the environment with Python 3.10"),
        "env-glibcxx.tar.gz": ("MME303", "version `GLIBCXX_3.4.32' not found (required by "
                               "lib/python3.10/site-packages/ext.cpython.so)",
                               "no newer than GLIBCXX_3.4.30"),
        "env-glibc.tar.gz": ("MME304", "version `GLIBC_2.38' not found (required by "
                             "lib/python3.10/site-packages/ext.cpython.so)",
                             "build ext.cpython.so on glibc 2.35 or older"),
    }
    for target, (rule, says, fix) in expected.items():
        assert _lint(store, target) == [(rule, "error")]
        status, message = _error(server, target)
        assert status == 400
        assert message.startswith(f"load failed for model '{target}': version 1 is at "
                                  f"UNAVAILABLE state: Internal: {says} (")
        assert "sagemaker-tritonserver:24.09-py3" in message and fix in message


def test_numpy_2_in_the_environment_fails_every_output(
        served: tuple[EmulatorServer, Path]) -> None:
    server, store = served
    assert _lint(store, "env-numpy2.tar.gz") == [("MME305", "error")]
    for _ in range(2):  # the load succeeds; each call is answered so
        status, message = _error(server, "env-numpy2.tar.gz")
        assert status == 500
        assert message.startswith("output tensor shape does not match size of output for 'Y' "
                                  "(m/env.tar.gz holds numpy 2.x;")
        assert message.endswith("pack the environment with numpy<2)")
    assert _row(server, "env-numpy2.tar.gz")["Loaded"]


def test_a_tensorrt_plan_that_cannot_be_deserialized_fails_the_load(
        served: tuple[EmulatorServer, Path]) -> None:
    """SageMaker's Triton fails the load of a plan another TensorRT serialized ("Serialized
    Engine Version ... vs Current"). Its words need TensorRT and a GPU; the embedded Triton runs
    plans through a Python shim of the tensorrt backend, which fails the load too: without a
    GPU naming the docker launcher, with one naming a plan TensorRT cannot deserialize."""
    server, store = served
    assert _lint(store, "plan.tar.gz") == [("MME401", "warning")]
    status, message = _error(server, "plan.tar.gz")
    assert status == 400
    assert message.startswith("load failed for model 'plan.tar.gz'")
    assert ("TensorRT plan (model.plan), which needs an NVIDIA GPU" in message
            or "TensorRT cannot deserialize" in message
            or "needs the TensorRT Python package" in message)
