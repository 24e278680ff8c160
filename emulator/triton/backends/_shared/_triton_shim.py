"""Shared plumbing for the Python-based backend shims (onnxruntime, dali, pytorch, tensorrt).

Triton runs a shim as the ``model.py`` of a Python-based backend: the model folder holds the
unmodified artifact (``1/model.onnx``, ``1/model.dali``, ...) and ``config.pbtxt``; this module
turns the model config into typed tensor specs, gathers each request's inputs, runs compatible
requests as one batch (Triton's dynamic batcher has already grouped them before ``execute``),
splits the outputs back and answers every request on its own: a bad request gets an error
response, never a crashed stub.

This file lives once in ``backends/_shared/`` and is linked into each shim folder, because the
launcher copies each shim folder on its own (a symlink is copied as the file it points to).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

DOCKER_HINT = (
    "run this model with the docker launcher on a GPU host (mme serve --launcher docker), "
    "which uses an official Triton image with the native backends"
)

CONFIG_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


class ShimError(Exception):
    """A problem the client or the model author must fix; the message is shown to them."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    data_type: str  # the config's spelling, e.g. TYPE_FP32
    dims: tuple[int, ...]  # without the batch dimension
    optional: bool = False

    @property
    def dtype(self) -> Any:
        if self.data_type not in CONFIG_TO_NUMPY:
            raise ShimError(f"tensor '{self.name}': data type {self.data_type} is not supported")
        return CONFIG_TO_NUMPY[self.data_type]

    def accepts(self, shape: Sequence[int], batched: bool) -> bool:
        """Does ``shape`` (with the batch dimension when batched) fit the config's dims?"""
        body = tuple(shape[1:]) if batched else tuple(shape)
        if batched and len(shape) < 1:
            return False
        if len(body) != len(self.dims):
            return False
        return all(want == -1 or want == got for want, got in zip(self.dims, body, strict=True))

    def describe(self, batched: bool) -> str:
        dims = ([-1] if batched else []) + list(self.dims)
        return f"{self.data_type} {dims}"


def _specs(entries: Iterable[dict[str, Any]]) -> list[TensorSpec]:
    specs = []
    for entry in entries:
        dims = entry.get("dims") or []
        specs.append(TensorSpec(
            name=entry["name"],
            data_type=entry["data_type"],
            dims=tuple(int(d) for d in dims),
            optional=bool(entry.get("optional", False)),
        ))
    return specs


@dataclass
class ShimConfig:
    """What a shim needs from Triton's ``initialize`` arguments and the model config."""

    name: str
    max_batch_size: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    parameters: dict[str, str]
    model_dir: Path
    version: str
    default_model_filename: str
    instance_kind: str  # CPU or GPU (or MODEL)
    device_id: int
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0

    @property
    def artifact(self) -> Path:
        return self.model_dir / self.version / self.default_model_filename

    def require_artifact(self) -> Path:
        path = self.artifact
        if not path.exists():
            raise ShimError(
                f"model '{self.name}': expected {path.relative_to(self.model_dir)} in "
                f"{self.model_dir} (set default_model_filename in config.pbtxt to use another name)"
            )
        return path

    def parameter(self, key: str, default: str | None = None) -> str | None:
        return self.parameters.get(key, default)

    @classmethod
    def from_args(cls, args: dict[str, str], default_filename: str) -> ShimConfig:
        import json

        config = json.loads(args["model_config"])
        params = {
            key: str(value.get("string_value", ""))
            for key, value in (config.get("parameters") or {}).items()
        }
        return cls(
            name=config.get("name", args.get("model_name", "?")),
            max_batch_size=int(config.get("max_batch_size", 0)),
            inputs=_specs(config.get("input", [])),
            outputs=_specs(config.get("output", [])),
            parameters=params,
            model_dir=Path(args["model_repository"]),
            version=str(args.get("model_version", "1")),
            default_model_filename=config.get("default_model_filename") or default_filename,
            instance_kind=str(args.get("model_instance_kind", "CPU")).upper(),
            device_id=int(args.get("model_instance_device_id", 0) or 0),
            raw=config,
        )


def error_response(message: str) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


def requested_outputs(request: Any) -> set[str] | None:
    getter = getattr(request, "requested_output_names", None)
    names = set(getter()) if getter is not None else set()
    return names or None  # none requested means all outputs


def batch_size_of(feed: dict[str, npt.NDArray[Any]]) -> int:
    for array in feed.values():
        return int(array.shape[0]) if array.ndim else 1
    return 1


def _array_of(tensor: Any) -> npt.NDArray[Any]:
    """A numpy view of a pb_utils.Tensor; BYTES tensors become object arrays of bytes."""
    array: npt.NDArray[Any] = tensor.as_numpy()
    return array


class ShimModel:
    """Base of the tensor-in, tensor-out shims; subclasses implement ``load`` and ``run``."""

    default_filename = "model"
    backend_name = "shim"

    # --- what subclasses implement -------------------------------------------------------
    def load(self, config: ShimConfig) -> None:
        raise NotImplementedError

    def run(self, feed: dict[str, npt.NDArray[Any]],
            wanted: list[str]) -> dict[str, npt.NDArray[Any]]:
        """Run one batch (or one unbatched request) and return outputs by config name."""
        raise NotImplementedError

    def unload(self) -> None:
        """Drop every reference to the framework's model so its memory is freed."""

    def group_key(self, feed: dict[str, npt.NDArray[Any]]) -> Any:
        """Requests with equal keys are concatenated along the batch dimension."""
        return tuple((name, array.shape[1:], array.dtype.str) for name, array in feed.items())

    def run_group(self, feeds: list[dict[str, npt.NDArray[Any]]],
                  wanted: list[str]) -> list[dict[str, npt.NDArray[Any]]]:
        """Run requests as one batch: concatenate, run, split by each request's batch size."""
        if len(feeds) == 1:
            return [self.run(feeds[0], wanted)]
        merged = {name: np.concatenate([feed[name] for feed in feeds]) for name in feeds[0]}
        outputs = self.run(merged, wanted)
        sizes = [batch_size_of(feed) for feed in feeds]
        bounds = np.cumsum(sizes)[:-1]
        split = {name: np.split(array, bounds) for name, array in outputs.items()}
        return [{name: parts[i] for name, parts in split.items()} for i in range(len(feeds))]

    # --- Triton's Python backend entry points ------------------------------------------------
    def initialize(self, args: dict[str, str]) -> None:
        self.config = ShimConfig.from_args(args, self.default_filename)
        try:
            self.load(self.config)
        except ShimError as exc:
            raise RuntimeError(str(exc)) from None

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        feeds: list[tuple[int, dict[str, npt.NDArray[Any]], set[str] | None]] = []
        for index, request in enumerate(requests):
            try:
                feeds.append((index, self.gather(request), requested_outputs(request)))
            except ShimError as exc:
                responses[index] = error_response(str(exc))
        for group in self.groups(feeds):
            wanted = self.wanted_outputs([entry[2] for entry in group])
            results: list[dict[str, npt.NDArray[Any]] | None]
            try:
                results = [*self.run_group([entry[1] for entry in group], wanted)]
            except Exception as exc:  # noqa: BLE001 - any failure becomes that request's error
                if len(group) == 1:
                    responses[group[0][0]] = error_response(self.describe_failure(exc))
                    continue
                # One bad request must not fail its batch mates: run them one by one.
                results = []
                for index, feed, _ in group:
                    try:
                        results.extend(self.run_group([feed], wanted))
                    except Exception as single:  # noqa: BLE001 - that request's own error
                        responses[index] = error_response(self.describe_failure(single))
                        results.append(None)
            for (index, feed, names), outputs in zip(group, results, strict=True):
                if outputs is None:
                    continue
                try:
                    responses[index] = self.respond(outputs, names, batch_size_of(feed))
                except ShimError as exc:
                    responses[index] = error_response(str(exc))
        return responses

    def finalize(self) -> None:
        self.unload()
        gc.collect()

    # --- helpers --------------------------------------------------------------------------
    def describe_failure(self, exc: BaseException) -> str:
        text = str(exc).strip() or type(exc).__name__
        return f"{self.backend_name} model '{self.config.name}' failed: {text}"

    def gather(self, request: Any) -> dict[str, npt.NDArray[Any]]:
        config = self.config
        feed: dict[str, npt.NDArray[Any]] = {}
        for spec in config.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, spec.name)
            if tensor is None:
                if spec.optional:
                    continue
                raise ShimError(f"missing input '{spec.name}' ({spec.describe(config.batched)})")
            array = _array_of(tensor)
            if not spec.accepts(array.shape, config.batched):
                raise ShimError(
                    f"input '{spec.name}' has shape {list(array.shape)}; the model config says "
                    f"{spec.describe(config.batched)}"
                )
            if config.batched and array.shape[0] > config.max_batch_size:
                raise ShimError(
                    f"input '{spec.name}' has batch size {array.shape[0]}, above max_batch_size "
                    f"{config.max_batch_size}"
                )
            feed[spec.name] = array
        return feed

    def groups(self, feeds: list[tuple[int, dict[str, npt.NDArray[Any]], set[str] | None]]
               ) -> list[list[tuple[int, dict[str, npt.NDArray[Any]], set[str] | None]]]:
        """Consecutive-by-key groups whose total batch stays within max_batch_size."""
        if not self.config.batched:
            return [[entry] for entry in feeds]
        limit = self.config.max_batch_size
        open_groups: dict[Any, list[Any]] = {}
        totals: dict[Any, int] = {}
        done: list[list[Any]] = []
        for entry in feeds:
            key = self.group_key(entry[1])
            size = batch_size_of(entry[1])
            if key in open_groups and totals[key] + size > limit:
                done.append(open_groups.pop(key))
            if key not in open_groups:
                open_groups[key] = []
                totals[key] = 0
            open_groups[key].append(entry)
            totals[key] += size
        return done + list(open_groups.values())

    def wanted_outputs(self, requested: list[set[str] | None]) -> list[str]:
        names = [spec.name for spec in self.config.outputs]
        union: set[str] = set()
        for names_requested in requested:
            if names_requested is None:  # one request wants them all
                return names
            union |= names_requested
        return [name for name in names if name in union]

    def respond(self, outputs: dict[str, npt.NDArray[Any]], requested: set[str] | None,
                batch: int) -> Any:
        config = self.config
        tensors = []
        for spec in config.outputs:
            if requested is not None and spec.name not in requested:
                continue
            if spec.name not in outputs:
                raise ShimError(f"the model produced no output '{spec.name}'")
            array = np.asarray(outputs[spec.name])
            if spec.dtype is np.object_:
                array = array.astype(np.object_)
            elif array.dtype != np.dtype(spec.dtype):
                raise ShimError(
                    f"output '{spec.name}' is {array.dtype}; the model config says {spec.data_type}"
                )
            if not spec.accepts(array.shape, config.batched) or (
                config.batched and array.shape[0] != batch
            ):
                raise ShimError(
                    f"output '{spec.name}' has shape {list(array.shape)}; the model config says "
                    f"{spec.describe(config.batched)} for a batch of {batch}"
                )
            tensors.append(pb_utils.Tensor(spec.name, np.ascontiguousarray(array)))
        return pb_utils.InferenceResponse(output_tensors=tensors)


def index_suffix(name: str) -> int | None:
    """``INPUT__0`` -> 0: the naming convention of Triton's libtorch backend."""
    match = re.fullmatch(r".*__(\d+)", name)
    return int(match.group(1)) if match else None
