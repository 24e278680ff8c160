"""GPU-only paths: the TensorRT variant and DALI's GPU ("mixed") decoding, through the emulator.

Written against TensorRT's and DALI's documented APIs. They run where ``nvidia-smi`` lists a GPU
(a developer's GPU box, a self-hosted GPU runner) and are skipped, with the reason, elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emulator.triton.launcher import count_gpus
from tests.support import SUITE_ENV

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(count_gpus() == 0,
                       reason="needs an NVIDIA GPU: nvidia-smi lists none on this machine"),
]


def _serve(tmp_path: Path, tarballs: dict[str, Path]) -> Any:
    from emulator.server import EmulatorServer
    from emulator.settings import Settings

    store = tmp_path / "store"
    store.mkdir()
    for name, tarball in tarballs.items():
        (store / name).write_bytes(tarball.read_bytes())
    return EmulatorServer(Settings.from_env(env=SUITE_ENV, model_data=str(store), port=0,
                                            cache_dir=tmp_path / "cache")).start()


def _invoke(server: Any, target: str, body: dict[str, Any]) -> np.ndarray:
    from tests.client_support import runtime_client

    resp = runtime_client(server.url).invoke_endpoint(
        EndpointName="local", TargetModel=target, ContentType="application/octet-stream",
        Body=json.dumps(body))
    out = json.loads(resp["Body"].read())["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def test_tensorrt_variant_matches_sentence_transformers(tmp_path: Path) -> None:
    pytest.importorskip("tensorrt", reason="needs TensorRT: pip install '.[tensorrt]'")
    from test_ensembles_text import SENTENCES, assert_same_embeddings, reference

    from ensembles import catalogue

    built = catalogue.build("text_embedding", tmp_path / "repo", variant="tensorrt",
                           tarball=tmp_path / "text_trt.tar.gz")
    assert built.tarball is not None
    server = _serve(tmp_path, {"text_trt.tar.gz": built.tarball})
    try:
        got = _invoke(server, "text_trt.tar.gz", {"inputs": [{
            "name": "INPUT0", "shape": [len(SENTENCES), 1], "datatype": "BYTES",
            "data": SENTENCES}]})
    finally:
        server.stop()
    assert_same_embeddings(got, reference(SENTENCES))


def test_dali_gpu_decoding_matches_cpu_decoding(tmp_path: Path) -> None:
    pytest.importorskip("nvidia.dali", reason="needs DALI: pip install '.[ensembles]'")
    from test_ensembles_image import IMAGES

    from ensembles import catalogue

    cpu = catalogue.build("image_classification", tmp_path / "cpu",
                         tarball=tmp_path / "cpu.tar.gz")
    gpu = catalogue.build("image_classification", tmp_path / "gpu", decode_device="mixed",
                         tarball=tmp_path / "gpu.tar.gz")
    assert cpu.tarball is not None and gpu.tarball is not None
    server = _serve(tmp_path, {"cpu.tar.gz": cpu.tarball, "gpu.tar.gz": gpu.tarball})
    try:
        for image in IMAGES:
            body = {"inputs": [{"name": "INPUT", "shape": [1, len(image)], "datatype": "UINT8",
                                "data": list(image)}]}
            # nvJPEG and libjpeg may round differently: compare the class probabilities loosely.
            np.testing.assert_allclose(_invoke(server, "gpu.tar.gz", body),
                                       _invoke(server, "cpu.tar.gz", body), atol=2e-2)
    finally:
        server.stop()


def _serve_repos(tmp_path: Path, repos: dict[str, Any], **settings: Any) -> Any:
    """Serve each ``name -> write(repo)`` packaged as ``name.tar.gz`` on a GPU instance type."""
    from emulator.server import EmulatorServer
    from emulator.settings import Settings
    from ensembles.packaging import package

    store = tmp_path / "store"
    store.mkdir()
    for name, write in repos.items():
        write(tmp_path / "repos" / name)
        package(tmp_path / "repos" / name, store / f"{name}.tar.gz")
    return EmulatorServer(Settings.from_env(
        env=SUITE_ENV, model_data=str(store), port=0, cache_dir=tmp_path / "cache",
        instance_type="ml.g5.xlarge", **settings)).start()


def _models(server: Any) -> dict[str, dict[str, Any]]:
    import urllib.request

    with urllib.request.urlopen(f"{server.url}/_emulator/models", timeout=30) as resp:
        endpoint = json.loads(resp.read())["Endpoints"]["local"]
    return {model["TargetModel"]: model for model in endpoint["Models"]}


def test_a_kind_gpu_torchscript_model_runs_on_cuda_with_its_cpu_twins_answers(
        tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the pytorch shim needs torch")
    from mme.gpu_check import WIDTH, write_mlp

    server = _serve_repos(tmp_path, {
        "gpu": lambda repo: write_mlp(repo, "mlp", "KIND_GPU"),
        "cpu": lambda repo: write_mlp(repo, "mlp", "KIND_CPU")})
    try:
        x = np.random.default_rng(3).standard_normal((4, WIDTH)).astype(np.float32)
        body = {"inputs": [{"name": "INPUT__0", "shape": [4, WIDTH], "datatype": "FP32",
                            "data": x.ravel().tolist()}]}
        on_gpu, on_cpu = _invoke(server, "gpu.tar.gz", body), _invoke(server, "cpu.tar.gz", body)
        models = _models(server)
    finally:
        server.stop()
    assert np.linalg.norm(on_gpu - on_cpu) / np.linalg.norm(on_cpu) < 1e-3
    # Its stub holds the weights on the GPU (NVML); the KIND_CPU twin holds nothing there.
    assert models["gpu.tar.gz"]["GpuBytes"] >= 4 * WIDTH * WIDTH * 4
    assert models["cpu.tar.gz"]["GpuBytes"] < 4 * WIDTH * WIDTH * 4


def test_gpu_memory_evicts_by_measure_and_a_model_too_big_for_the_gpu_is_a_507(
        tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the GPU-holding test models need torch")
    from botocore.exceptions import ClientError

    from mme.gpu_check import GIB, write_gpu_holder
    from tests.support import wait_until

    server = _serve_repos(tmp_path, {
        "a": lambda repo: write_gpu_holder(repo, "holder", GIB),
        "b": lambda repo: write_gpu_holder(repo, "holder", GIB),
        "big": lambda repo: write_gpu_holder(repo, "holder", 3 * GIB)},
        gpu_memory_budget=2 * GIB)  # a and b (1 GiB each and a CUDA context) do not fit both
    body = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4}]}
    try:
        _invoke(server, "a.tar.gz", body)
        assert _models(server)["a.tar.gz"]["GpuBytes"] >= GIB
        _invoke(server, "b.tar.gz", body)
        assert wait_until(lambda: _models(server)["a.tar.gz"]["State"] == "on_disk", 30)
        _invoke(server, "a.tar.gz", body)  # its size known: b makes way before it loads
        models = _models(server)
        assert (models["a.tar.gz"]["State"], models["b.tar.gz"]["State"]) == ("loaded", "on_disk")
        with pytest.raises(ClientError) as refused:
            _invoke(server, "big.tar.gz", body)
    finally:
        server.stop()
    assert refused.value.response["Error"]["Code"] == "ModelError"
    assert refused.value.response["OriginalStatusCode"] == 507
    assert "GPU memory" in refused.value.response["Error"]["Message"]
