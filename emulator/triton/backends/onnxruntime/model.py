"""Python-based ``onnxruntime`` backend: runs ``<version>/model.onnx`` with onnxruntime.

Triton picks this folder for ``backend: "onnxruntime"`` and for ``platform: "onnxruntime_onnx"``.
Like the native backend it checks the config against the graph when loading (names, data types,
ranks), honours ``default_model_filename``, the ``intra_op_thread_count`` /
``inter_op_thread_count`` parameters, and uses the CUDA execution provider for KIND_GPU
instances when onnxruntime has it (CPU otherwise).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy.typing as npt

# The stub loads this file by path; its sibling helper needs the folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _triton_shim import ShimConfig, ShimError, ShimModel

ORT_TO_CONFIG = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
}


def _check_io(kind: str, specs: list[Any], graph: dict[str, Any], batched: bool,
              model: str) -> None:
    for spec in specs:
        node = graph.get(spec.name)
        if node is None:
            raise ShimError(
                f"model '{model}': {kind} '{spec.name}' is in config.pbtxt but not in the ONNX "
                f"graph, whose {kind}s are {sorted(graph)}"
            )
        graph_type = ORT_TO_CONFIG.get(node.type, node.type)
        if graph_type != spec.data_type:
            raise ShimError(
                f"model '{model}': {kind} '{spec.name}' is {graph_type} in the ONNX graph but "
                f"{spec.data_type} in config.pbtxt"
            )
        want_rank = len(spec.dims) + (1 if batched else 0)
        if node.shape is not None and len(node.shape) != want_rank:
            raise ShimError(
                f"model '{model}': {kind} '{spec.name}' has rank {len(node.shape)} in the ONNX "
                f"graph ({node.shape}) but config.pbtxt gives rank {want_rank}"
                + (" (max_batch_size > 0 adds the batch dimension)" if batched else "")
            )


class TritonPythonModel(ShimModel):
    default_filename = "model.onnx"
    backend_name = "onnxruntime"

    def load(self, config: ShimConfig) -> None:
        import onnxruntime as ort

        path: Path = config.require_artifact()
        if path.is_dir():  # Triton also accepts a folder holding model.onnx and external data
            path = path / "model.onnx"
        options = ort.SessionOptions()
        intra = config.parameter("intra_op_thread_count")
        inter = config.parameter("inter_op_thread_count")
        if intra:
            options.intra_op_num_threads = int(intra)
        if inter:
            options.inter_op_num_threads = int(inter)
        # onnxruntime's threads spin after each operator, waiting for the next. On SageMaker an
        # instance's cores are its own; here every model instance of every endpoint shares this
        # machine's, and the spinning took as much CPU as the inference itself. Answers do not
        # change.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        providers: list[Any] = ["CPUExecutionProvider"]
        if config.instance_kind == "GPU":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise ShimError(
                    f"model '{config.name}' asks for KIND_GPU but onnxruntime here has no CUDA "
                    "provider; use instance_group kind KIND_CPU, install onnxruntime-gpu on a GPU "
                    "host, or run with the docker launcher"
                )
            providers = [("CUDAExecutionProvider", {"device_id": config.device_id}),
                         "CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as exc:  # a corrupt graph is the author's to fix
            raise ShimError(
                f"model '{config.name}': onnxruntime cannot load {path}: {exc}"
            ) from exc
        graph_inputs = {node.name: node for node in self.session.get_inputs()}
        graph_outputs = {node.name: node for node in self.session.get_outputs()}
        _check_io("input", config.inputs, graph_inputs, config.batched, config.name)
        _check_io("output", config.outputs, graph_outputs, config.batched, config.name)
        configured = {spec.name for spec in config.inputs}
        missing = [name for name in graph_inputs if name not in configured]
        if missing:
            raise ShimError(
                f"model '{config.name}': the ONNX graph needs inputs {missing} that config.pbtxt "
                "does not declare"
            )

    def run(self, feed: dict[str, npt.NDArray[Any]],
            wanted: list[str]) -> dict[str, npt.NDArray[Any]]:
        values = self.session.run(wanted, feed)
        return dict(zip(wanted, values, strict=True))

    def unload(self) -> None:
        self.session = None
