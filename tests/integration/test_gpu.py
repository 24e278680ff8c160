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
    return EmulatorServer(Settings.from_env(env={}, model_data=str(store), port=0,
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
