"""Small real Triton models for the tests, and the tarballs SageMaker would get.

The ``scale`` model is a Python-backend model computing ``Y = X * scale``; its parameters make it
slow to load (wait for a gate file), slow to run, or fail to load, so lifecycle behaviour can be
observed through conditions rather than timings.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np

SCALE_MODEL_PY = '''
import json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"]
                  for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.scale = float(params.get("scale", "2"))
        self.run_seconds = float(params.get("run_seconds", "0"))
        self.run_gate = params.get("run_gate")
        if params.get("fail_load"):
            raise RuntimeError(params["fail_load"])
        gate = params.get("load_gate")
        if gate:
            # Loading blocks until the test creates the gate file (or 120 s pass).
            deadline = time.time() + 120
            while not os.path.exists(gate) and time.time() < deadline:
                time.sleep(0.02)
        time.sleep(float(params.get("load_seconds", "0")))

    def execute(self, requests):
        if self.run_gate:
            deadline = time.time() + 120
            while not os.path.exists(self.run_gate) and time.time() < deadline:
                time.sleep(0.02)
        time.sleep(self.run_seconds)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = (x * self.scale).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses
'''


def write_scale_model(repo: Path, name: str = "scale", scale: float = 2.0,
                      max_batch_size: int = 8, **params: str) -> Path:
    """A Python-backend model folder ``repo/name`` (X FP32 [4] -> Y FP32 [4])."""
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(SCALE_MODEL_PY)
    all_params = {"scale": str(scale), **params}
    param_text = "\n".join(
        f'parameters {{ key: "{k}" value {{ string_value: {json.dumps(v)} }} }}'
        for k, v in all_params.items()
    )
    (folder / "config.pbtxt").write_text(f'''name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{param_text}
''')
    return folder


def write_scale_ensemble(repo: Path, scale_a: float = 2.0, scale_b: float = 3.0,
                         pad_bytes: int = 0) -> Path:
    """``ensemble`` = ``preprocess`` (x*a) -> ``postprocess`` (x*b): same names in every repo."""
    write_scale_model(repo, "preprocess", scale_a)
    write_scale_model(repo, "postprocess", scale_b)
    if pad_bytes:  # gives the artifact a chosen size for memory-budget tests
        (repo / "postprocess" / "1" / "weights.bin").write_bytes(b"\0" * pad_bytes)
    folder = repo / "ensemble"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text('''name: "ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling {
  step [
    { model_name: "preprocess" model_version: -1
      input_map { key: "X" value: "INPUT" } output_map { key: "Y" value: "mid" } },
    { model_name: "postprocess" model_version: -1
      input_map { key: "X" value: "mid" } output_map { key: "Y" value: "OUTPUT" } }
  ]
}
''')
    return folder


def package(source: Path, tarball: Path, layout: str = "dot") -> Path:
    """``dot``: like ``tar -C source .``; ``folder``: a top-level folder named like ``source``."""
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball, "w:gz") as tar:
        if layout == "dot":
            tar.add(source, arcname=".")
        else:
            tar.add(source, arcname=source.name)
    return tarball


def scale_request(values: list[float], input_name: str = "X") -> bytes:
    return json.dumps({"inputs": [{"name": input_name, "shape": [1, len(values)],
                                   "datatype": "FP32", "data": values}]}).encode()


def output_of(body: bytes, name: str = "Y") -> np.ndarray:
    outputs = {o["name"]: o for o in json.loads(body)["outputs"]}
    return np.array(outputs[name]["data"], dtype=np.float32)


def tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()
