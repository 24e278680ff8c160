"""The ensembles this project ships, with what they take and give (``mme build --list``)."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ensembles.packaging import folder_size, package


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str  # KServe spelling: BYTES, UINT8, FP32
    shape: tuple[int, ...]  # with the batch dimension (-1)
    meaning: str


@dataclass(frozen=True)
class EnsembleInfo:
    name: str
    summary: str
    entry_model: str
    variants: tuple[str, ...]
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    module: str  # holds build(output_dir, variant, **options)
    notes: tuple[str, ...] = field(default=())

    @property
    def default_variant(self) -> str:
        return self.variants[0]

    def builder(self) -> Callable[..., Path]:
        build: Callable[..., Path] = importlib.import_module(self.module).build
        return build


ENSEMBLES: dict[str, EnsembleInfo] = {
    "text_embedding": EnsembleInfo(
        name="text_embedding",
        summary="preprocess (tokenizer) -> BERT (all-MiniLM-L6-v2) -> postprocess (mean pooling "
                "+ L2 norm): sentence embeddings",
        entry_model="ensemble",
        variants=("onnx", "tensorrt", "python-torch"),
        inputs=(Tensor("INPUT0", "BYTES", (-1, 1), "UTF-8 sentences, one per row (max 16)"),),
        outputs=(Tensor("finaloutput", "FP32", (-1, 384), "unit-length sentence embeddings"),),
        module="ensembles.text_embedding.builder",
        notes=("tensorrt: NVIDIA GPU + `pip install tensorrt` needed to build and to serve",
               "python-torch: a Python-backend step running PyTorch (EXECUTION_ENV_PATH)"),
    ),
    "image_classification": EnsembleInfo(
        name="image_classification",
        summary="DALI (decode, resize 299x299, normalize, HWC) -> Inception-style classifier "
                "(ONNX, fixed seeded weights): 1001 class probabilities",
        entry_model="ensemble_dali_inception",
        variants=("onnx",),
        inputs=(Tensor("INPUT", "UINT8", (-1, -1), "encoded JPEG/PNG bytes, one image per row"),),
        outputs=(Tensor("OUTPUT", "FP32", (-1, 1001), "softmax probabilities"),),
        module="ensembles.image_classification.builder",
        notes=("weights are seeded, not ImageNet-trained; pass weights=<state_dict> for yours",),
    ),
}


def get(name: str) -> EnsembleInfo:
    try:
        return ENSEMBLES[name.replace("-", "_")]
    except KeyError:
        raise KeyError(f"no ensemble {name!r}; known: {', '.join(ENSEMBLES)}") from None


@dataclass
class BuildResult:
    ensemble: str
    variant: str
    repository: Path
    tarball: Path | None
    seconds: float
    repository_bytes: int
    tarball_bytes: int | None


def build(name: str, output_dir: Path, variant: str | None = None, tarball: Path | None = None,
          layout: str = "flat", **options: Any) -> BuildResult:
    """Build ``name`` into ``output_dir``; also package it when ``tarball`` is given."""
    info = get(name)
    variant = variant or info.default_variant
    if variant not in info.variants:
        raise ValueError(f"{name} has no variant {variant!r}; choose one of "
                         f"{', '.join(info.variants)}")
    started = time.perf_counter()
    repo = info.builder()(Path(output_dir), variant, **options)
    packed = package(repo, tarball, layout) if tarball is not None else None
    return BuildResult(
        ensemble=info.name, variant=variant, repository=repo, tarball=packed,
        seconds=time.perf_counter() - started, repository_bytes=folder_size(repo),
        tarball_bytes=packed.stat().st_size if packed else None,
    )


def describe() -> str:
    lines = []
    for info in ENSEMBLES.values():
        lines.append(f"{info.name}  (entry model: {info.entry_model})")
        lines.append(f"  {info.summary}")
        lines.append(f"  variants: {', '.join(info.variants)} (default {info.default_variant})")
        for label, tensors in (("input ", info.inputs), ("output", info.outputs)):
            for t in tensors:
                lines.append(f"  {label} {t.name:<12} {t.datatype:<6} {list(t.shape)}  {t.meaning}")
        for note in info.notes:
            lines.append(f"  note: {note}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
