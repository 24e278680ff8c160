"""The image-classification ensemble on the embedded Triton against DALI + ONNX in-process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.ensemble_helpers import RunningTriton, built_repository, triton_session
from tests.ensemble_support import in_process_reference, seed_images
from tests.support import skip_module_unless_installed

skip_module_unless_installed("nvidia.dali", "onnxruntime", "PIL")

pytestmark = pytest.mark.slow

IMAGES = seed_images()


@pytest.fixture(scope="module")
def image_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_repository(tmp_path_factory, "image_classification")


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory, image_repo: Path) -> Iterator[RunningTriton]:
    for running in triton_session(tmp_path_factory.mktemp("image-triton")):
        running.install_repo(image_repo)
        response = running.load("ensemble_dali_inception")
        assert response.status_code == 200, response.text
        yield running


def test_reference_is_sensitive_to_the_image(image_repo: Path) -> None:
    # Guards the comparison below: different pictures must give clearly different outputs.
    want = in_process_reference(image_repo, IMAGES)
    assert want.shape == (len(IMAGES), 1001)
    np.testing.assert_allclose(want.sum(axis=1), 1.0, atol=1e-4)
    for i in range(1, len(IMAGES)):
        assert np.abs(want[0] - want[i]).max() > 1e-2


def test_each_image_matches_dali_plus_onnx(triton: RunningTriton, image_repo: Path) -> None:
    want = in_process_reference(image_repo, IMAGES)
    for image, expected in zip(IMAGES, want, strict=True):
        got = triton.infer("ensemble_dali_inception",
                           {"INPUT": np.frombuffer(image, np.uint8)[None]})["OUTPUT"]
        assert got.shape == (1, 1001)
        assert np.abs(got[0] - expected).max() <= 1e-4


def test_seeds_json_body(triton: RunningTriton, image_repo: Path) -> None:
    raw = np.frombuffer(IMAGES[1], np.uint8)[None]
    body = {"inputs": [{"name": "INPUT", "shape": list(raw.shape), "datatype": "UINT8",
                        "data": raw.tolist()}]}
    response = triton.infer_json("ensemble_dali_inception", body)
    assert response.status_code == 200, response.text
    got = np.array(response.json()["outputs"][0]["data"], dtype=np.float32)
    assert np.abs(got - in_process_reference(image_repo, [IMAGES[1]])[0]).max() <= 1e-4


def test_padded_batch_in_one_request(triton: RunningTriton, image_repo: Path) -> None:
    width = max(len(i) for i in IMAGES)
    batch = np.stack([np.pad(np.frombuffer(i, np.uint8), (0, width - len(i))) for i in IMAGES])
    got = triton.infer("ensemble_dali_inception", {"INPUT": batch})["OUTPUT"]
    assert np.abs(got - in_process_reference(image_repo, IMAGES)).max() <= 1e-4


def test_not_an_image_is_a_request_error(triton: RunningTriton) -> None:
    response = triton.infer_json("ensemble_dali_inception", {"inputs": [
        {"name": "INPUT", "shape": [1, 8], "datatype": "UINT8", "data": [1] * 8}]})
    assert response.status_code >= 400
    assert "dali" in response.json()["error"]
    ok = triton.infer("ensemble_dali_inception",
                      {"INPUT": np.frombuffer(IMAGES[0], np.uint8)[None]})["OUTPUT"]
    assert ok.shape == (1, 1001)
