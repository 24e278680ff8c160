"""Python-based ``dali`` backend: runs the serialized ``<version>/model.dali`` pipeline.

Triton picks this folder for ``backend: "dali"``. The pipeline is deserialized with DALI's
Python API with ``max_batch_size`` as its batch size and the ``num_threads`` parameter of the
config (as the native DALI backend reads it). Inputs are fed by name to the pipeline's
``external_source`` nodes; outputs are mapped to the config's outputs in order, as the native
backend does. Each sample of a batched input (``[batch, ...]``) is one DALI sample, and requests
of different shapes are run together since DALI batches are lists of samples.

Runs on CPU; a pipeline that uses GPU operators (``device="mixed"`` decoding, ``.gpu()``) needs
a KIND_GPU instance on a machine with an NVIDIA GPU. A failing sample (say, bytes that are not
an image) invalidates a DALI pipeline, so the shim rebuilds it and answers only that request
with the error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

# The stub loads this file by path; its sibling helper needs the folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _triton_shim import DOCKER_HINT, ShimConfig, ShimError, ShimModel


def _gpu_available() -> bool:
    try:
        # backend_impl (compiled) exports it through a star import.
        from nvidia.dali.backend import GetCUDADeviceCount  # type: ignore[attr-defined]  # DALI's stubs omit it

        return int(GetCUDADeviceCount()) > 0
    except Exception:  # noqa: BLE001 - no driver, no device
        return False


class TritonPythonModel(ShimModel):
    default_filename = "model.dali"
    backend_name = "dali"

    def load(self, config: ShimConfig) -> None:
        self.path = config.require_artifact()
        self.batch_size = max(config.max_batch_size, 1)
        threads = config.parameter("num_threads") or str(min(4, os.cpu_count() or 1))
        self.num_threads = max(int(threads), 1)
        self.device_id = (
            config.device_id if config.instance_kind == "GPU" and _gpu_available() else None
        )
        if config.instance_kind == "GPU" and self.device_id is None:
            raise ShimError(
                f"model '{config.name}' asks for a KIND_GPU instance but there is no NVIDIA GPU "
                f"here; use KIND_CPU with a CPU pipeline, or {DOCKER_HINT}"
            )
        self.pipe: Any = None
        self._build()

    def _build(self) -> None:
        from nvidia.dali.pipeline import Pipeline

        self.pipe = None
        try:
            pipe = Pipeline.deserialize(
                filename=str(self.path), batch_size=self.batch_size,
                num_threads=self.num_threads, device_id=self.device_id,
                # Synchronous, one batch at a time: each execute feeds exactly one batch.
                exec_async=False, exec_pipelined=False, prefetch_queue_depth=1,
            )
            pipe.build()
        except Exception as exc:
            text = str(exc)
            hint = ""
            if self.device_id is None and ("GPU" in text or "mixed" in text or "CUDA" in text):
                hint = (" (the pipeline uses GPU operators such as device='mixed' decoding; "
                        f"build it with device='cpu' to run without a GPU, or {DOCKER_HINT})")
            raise ShimError(f"model '{self.config.name}': DALI cannot load {self.path}: "
                            f"{text.strip()}{hint}") from exc
        self.pipe = pipe

    def group_key(self, feed: dict[str, npt.NDArray[Any]]) -> Any:
        return None  # DALI batches are lists of samples: any shapes may share a batch

    def run_group(self, feeds: list[dict[str, npt.NDArray[Any]]],
                  wanted: list[str]) -> list[dict[str, npt.NDArray[Any]]]:
        config = self.config
        samples: dict[str, list[npt.NDArray[Any]]] = {spec.name: [] for spec in config.inputs}
        sizes = []
        for feed in feeds:
            size = 0
            for name, array in feed.items():
                # Batched: each row is one sample; unbatched: the whole tensor is one sample.
                rows = list(array) if config.batched else [array]
                samples[name].extend(np.ascontiguousarray(row) for row in rows)
                size = len(rows)
            sizes.append(size)
        if self.pipe is None:
            self._build()
        try:
            for name, batch in samples.items():
                if batch:
                    self.pipe.feed_input(name, batch)
            outputs = self.pipe.run()
        except Exception:
            self._build()  # a failed iteration leaves the pipeline unusable
            raise
        if len(outputs) < len(config.outputs):
            raise ShimError(
                f"the DALI pipeline returns {len(outputs)} outputs but config.pbtxt declares "
                f"{len(config.outputs)}"
            )
        arrays: dict[str, npt.NDArray[Any]] = {}
        for spec, tensor_list in zip(config.outputs, outputs[:len(config.outputs)], strict=True):
            if hasattr(tensor_list, "as_cpu"):
                tensor_list = tensor_list.as_cpu()
            if not tensor_list.is_dense_tensor():
                shapes = [tuple(s) for s in tensor_list.shape()]
                raise ShimError(f"output '{spec.name}': samples have different shapes {shapes}; "
                                "resize or pad them in the pipeline")
            arrays[spec.name] = tensor_list.as_array()
        results = []
        start = 0
        for size in sizes:
            part = {name: array[start:start + size] for name, array in arrays.items()}
            if not config.batched:
                part = {name: array[0] for name, array in part.items()}
            results.append(part)
            start += size
        return results

    def run(self, feed: dict[str, npt.NDArray[Any]],
            wanted: list[str]) -> dict[str, npt.NDArray[Any]]:
        return self.run_group([feed], wanted)[0]

    def unload(self) -> None:
        self.pipe = None
