"""The image-classification ensemble on the embedded Triton against DALI + ONNX in-process."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.ensemble_helpers import RunningTriton, built_repository, triton_session

pytest.importorskip("nvidia.dali")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("PIL")

pytestmark = pytest.mark.slow


def scene(width: int, height: int, seed: int, fmt: str) -> bytes:
    """A real picture: a coloured background with ellipses, saved as JPEG or PNG."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)

    def colour() -> tuple[int, int, int]:
        r, g, b = (int(v) for v in rng.integers(0, 256, 3))
        return r, g, b

    image = Image.new("RGB", (width, height), colour())
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        draw.ellipse([x0, y0, x0 + int(rng.integers(10, width)),
                      y0 + int(rng.integers(10, height))], fill=colour())
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


IMAGES = [
    scene(640, 480, 1, "JPEG"),   # landscape 4:3
    scene(300, 500, 2, "PNG"),    # portrait
    scene(1024, 256, 3, "JPEG"),  # wide 4:1
    scene(299, 299, 4, "PNG"),    # already the network's size
    scene(64, 48, 5, "JPEG"),     # tiny: upscaled
]


def in_process_reference(repo: Path, images: list[bytes]) -> np.ndarray:
    from ensembles.image_classification import pipeline

    session = ort.InferenceSession(str(repo / "inception_onnx" / "1" / "model.onnx"))
    return session.run(None, {"input": pipeline.run_reference(images)})[0]


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
