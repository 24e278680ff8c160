"""Python-based ``pytorch`` backend: runs the TorchScript ``<version>/model.pt``.

Triton picks this folder for ``backend: "pytorch"`` and ``platform: "pytorch_libtorch"``.
Inputs reach ``forward`` as the native libtorch backend passes them: by the index in names
like ``INPUT__0`` when every input is named so, otherwise by matching ``forward``'s argument
names, otherwise in config order. Outputs are taken by ``OUTPUT__<i>`` index, by key when
``forward`` returns a dict, otherwise in config order. KIND_GPU instances run on CUDA when torch
sees a GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

# The stub loads this file by path; its sibling helper needs the folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _triton_shim import (
    DOCKER_HINT,
    ShimConfig,
    ShimError,
    ShimModel,
    index_suffix,
)


class TritonPythonModel(ShimModel):
    default_filename = "model.pt"
    backend_name = "pytorch"

    def load(self, config: ShimConfig) -> None:
        import torch

        self.torch = torch
        path = config.require_artifact()
        if config.instance_kind == "GPU":
            if not torch.cuda.is_available():
                raise ShimError(f"model '{config.name}' asks for a KIND_GPU instance but torch "
                                f"sees no GPU here; use KIND_CPU, or {DOCKER_HINT}")
            self.device = torch.device(f"cuda:{config.device_id}")
        else:
            self.device = torch.device("cpu")
        threads = config.parameter("INTRA_OP_THREAD_COUNT")
        if threads:
            torch.set_num_threads(int(threads))
        try:
            self.module = torch.jit.load(str(path), map_location=self.device).eval()
        except Exception as exc:
            raise ShimError(f"model '{config.name}': torch.jit.load cannot read {path} (a "
                            f"TorchScript file from torch.jit.trace/script and .save): {exc}"
                            ) from exc
        self.input_order = self._input_order(config)
        where = (f"{self.device} ({torch.cuda.get_device_name(self.device)})"
                 if self.device.type == "cuda" else "cpu")
        pb_utils.Logger.log_info(f"model '{config.name}': TorchScript on {where}")

    def _input_order(self, config: ShimConfig) -> list[str]:
        names = [spec.name for spec in config.inputs]
        indices = [index_suffix(name) for name in names]
        if names and all(i is not None for i in indices):
            return [name for _, name in sorted(zip(indices, names, strict=True))]
        try:
            arguments = [a.name for a in self.module.forward.schema.arguments[1:]]
        except Exception:  # noqa: BLE001 - no schema: keep config order
            arguments = []
        if arguments and set(names) <= set(arguments):
            return [a for a in arguments if a in names]
        return names

    def run(self, feed: dict[str, npt.NDArray[Any]],
            wanted: list[str]) -> dict[str, npt.NDArray[Any]]:
        torch = self.torch
        args = [torch.from_numpy(np.ascontiguousarray(feed[name])).to(self.device)
                for name in self.input_order if name in feed]
        with torch.inference_mode():
            result: Any = self.module(*args)
        return self._outputs(result)

    def _outputs(self, result: Any) -> dict[str, npt.NDArray[Any]]:
        specs = self.config.outputs

        def to_numpy(value: Any) -> npt.NDArray[Any]:
            array: npt.NDArray[Any] = value.detach().cpu().numpy()
            return array

        if isinstance(result, dict):
            return {spec.name: to_numpy(result[spec.name]) for spec in specs
                    if spec.name in result}
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        out = {}
        for position, spec in enumerate(specs):
            index = index_suffix(spec.name)
            pick = index if index is not None else position
            if pick >= len(values):
                raise ShimError(f"output '{spec.name}': forward returned {len(values)} values")
            out[spec.name] = to_numpy(values[pick])
        return out

    def unload(self) -> None:
        self.module = None
        if getattr(self, "device", None) is not None and self.device.type == "cuda":
            self.torch.cuda.empty_cache()
