"""Python-based ``tensorrt`` backend: runs ``<version>/model.plan`` with TensorRT's Python API.

Triton picks this folder for ``backend: "tensorrt"`` and ``platform: "tensorrt_plan"``. A plan
is a GPU engine: without an NVIDIA GPU (the embedded launcher here) loading fails with a
message that names the way out. With a GPU it deserializes the engine (TensorRT 10 API:
named I/O tensors, ``set_input_shape``, ``set_tensor_address``, ``execute_async_v3``), keeps
device buffers in torch CUDA tensors and checks the config against the engine's tensors.
The ``tensorrt`` package is imported only here, when such a model loads.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

# The stub loads this file by path; its sibling helper needs the folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _triton_shim import DOCKER_HINT, ShimConfig, ShimError, ShimModel


def _gpu_count() -> int:
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # noqa: BLE001 - no torch, or no working CUDA: no GPU
        return 0


class TritonPythonModel(ShimModel):
    default_filename = "model.plan"
    backend_name = "tensorrt"

    def load(self, config: ShimConfig) -> None:
        path = config.require_artifact()
        if _gpu_count() == 0:
            raise ShimError(
                f"model '{config.name}' is a TensorRT plan ({path.name}), which needs an NVIDIA "
                f"GPU; this machine has none. To serve it, {DOCKER_HINT}; or build the ONNX "
                "variant of the model to run on CPU here"
            )
        try:
            import tensorrt as trt
        except ImportError as exc:
            raise ShimError(
                f"model '{config.name}' needs the TensorRT Python package: pip install "
                f"'sagemaker-mme-emulator[tensorrt]' (same TensorRT version that built the "
                f"plan), or {DOCKER_HINT}"
            ) from exc
        import torch

        self.torch = torch
        self.trt = trt
        self.device = torch.device(f"cuda:{config.device_id}")
        torch.cuda.set_device(self.device)
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(path.read_bytes())
        if self.engine is None:
            raise ShimError(f"model '{config.name}': TensorRT cannot deserialize {path} (built "
                            "with another TensorRT version or for another GPU?)")
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.engine_inputs = [n for n in names
                              if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.engine_outputs = [n for n in names if n not in self.engine_inputs]
        for kind, specs, available in (("input", config.inputs, self.engine_inputs),
                                       ("output", config.outputs, self.engine_outputs)):
            for spec in specs:
                if spec.name not in available:
                    raise ShimError(f"model '{config.name}': {kind} '{spec.name}' is not in the "
                                    f"engine, whose {kind}s are {available}")
        self.stream = torch.cuda.Stream(self.device)

    def run(self, feed: dict[str, npt.NDArray[Any]],
            wanted: list[str]) -> dict[str, npt.NDArray[Any]]:
        torch, trt = self.torch, self.trt
        keep: list[Any] = []
        for name in self.engine_inputs:
            if name not in feed:
                raise ShimError(f"engine input '{name}' has no value")
            tensor = torch.from_numpy(np.ascontiguousarray(feed[name])).to(self.device)
            keep.append(tensor)
            self.context.set_input_shape(name, tuple(tensor.shape))
            self.context.set_tensor_address(name, tensor.data_ptr())
        outputs: dict[str, Any] = {}
        for name in self.engine_outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            dtype = trt.nptype(self.engine.get_tensor_dtype(name))
            buffer = torch.empty(shape, dtype=getattr(torch, np.dtype(dtype).name),
                                 device=self.device)
            outputs[name] = buffer
            self.context.set_tensor_address(name, buffer.data_ptr())
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise ShimError("TensorRT execution failed")
        self.stream.synchronize()
        return {name: outputs[name].cpu().numpy() for name in wanted if name in outputs}

    def unload(self) -> None:
        self.context = None
        self.engine = None
        self.runtime = None
        torch = getattr(self, "torch", None)
        if torch is not None:
            torch.cuda.empty_cache()
