"""Build the seeds' image-classification ensemble: DALI preprocessing -> Inception classifier.

Repository (model names and tensor names as in the seeds):
- ``dali`` (``backend: "dali"``, ``1/model.dali``): DALI_INPUT_0 UINT8 [-1] (encoded image
  bytes) -> DALI_OUTPUT_0 FP32 [299, 299, 3];
- ``inception_onnx`` (``platform: "onnxruntime_onnx"``, ``1/model.onnx``): ``input`` FP32
  [299, 299, 3] -> ``InceptionV3/Predictions/Softmax`` FP32 [1001] (the seeds use a TensorFlow
  graphdef; ONNX runs on CPU here and on SageMaker's Triton alike);
- ``ensemble_dali_inception``: INPUT UINT8 [-1] -> OUTPUT FP32 [1001].

The classifier has fixed, seeded weights unless ``weights`` names a state_dict (see network.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ensembles.image_classification import network, pipeline
from ensembles.packaging import (
    ensemble_steps_block,
    model_folder,
    parameters_block,
    scheduling_block,
    tensor_block,
)

VARIANTS = ("onnx",)
MAX_BATCH_SIZE = 256  # as the seeds
CLASSIFIER = "inception_onnx"
CLASSIFIER_INPUT = "input"
CLASSIFIER_OUTPUT = "InceptionV3/Predictions/Softmax"


def build(output_dir: Path, variant: str = "onnx", *, weights: Path | None = None,
          decode_device: str = "cpu", num_threads: int = 2, dynamic_batching: bool = False,
          instance_count: int = 1) -> Path:
    """Write the Triton model repository into ``output_dir`` and return it."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    repo = Path(output_dir)
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    kind = "KIND_GPU" if decode_device == "mixed" else "KIND_CPU"
    dali_version = model_folder(repo, "dali", (
        'name: "dali"\nbackend: "dali"\n'
        f"max_batch_size: {MAX_BATCH_SIZE}\n"
        + tensor_block("input", [(pipeline.INPUT_NAME, "TYPE_UINT8", [-1])])
        + tensor_block("output", [("DALI_OUTPUT_0", "TYPE_FP32", [299, 299, 3])])
        + scheduling_block(dynamic_batching, instance_count, kind)
        + parameters_block({"num_threads": str(num_threads)})
    ))
    pipeline.serialize(dali_version / "model.dali", MAX_BATCH_SIZE, num_threads, decode_device)

    version = model_folder(repo, CLASSIFIER, (
        f'name: "{CLASSIFIER}"\nplatform: "onnxruntime_onnx"\n'
        f"max_batch_size: {MAX_BATCH_SIZE}\n"
        + tensor_block("input", [(CLASSIFIER_INPUT, "TYPE_FP32", [299, 299, 3])])
        + tensor_block("output", [(CLASSIFIER_OUTPUT, "TYPE_FP32", [network.NUM_CLASSES])])
        + scheduling_block(dynamic_batching, instance_count)
    ))
    network.export_onnx(network.build_network(weights), version / "model.onnx",
                        CLASSIFIER_INPUT, CLASSIFIER_OUTPUT)

    model_folder(repo, "ensemble_dali_inception", ensemble_config())
    (repo / "ensemble_dali_inception" / "1" / ".keep").write_text("")
    return repo


def ensemble_config() -> str:
    return (
        'name: "ensemble_dali_inception"\nplatform: "ensemble"\n'
        f"max_batch_size: {MAX_BATCH_SIZE}\n"
        + tensor_block("input", [("INPUT", "TYPE_UINT8", [-1])])
        + tensor_block("output", [("OUTPUT", "TYPE_FP32", [network.NUM_CLASSES])])
        + ensemble_steps_block([
            ("dali", {pipeline.INPUT_NAME: "INPUT"}, {"DALI_OUTPUT_0": "preprocessed_image"}),
            (CLASSIFIER, {CLASSIFIER_INPUT: "preprocessed_image"},
             {CLASSIFIER_OUTPUT: "OUTPUT"}),
        ])
    )
