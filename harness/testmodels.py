"""Tiny real Triton models (Python backend) for benchmarks and self-checks: ``Y = X * scale``,
and a one-vector model whose model.py the caller writes.

Its parameters make it slow to load (wait for a gate file), slow to run, hold memory
(``ballast_mib``: float64 ones, written, so resident once loaded), or fail to load, so the test
suite can observe lifecycle behaviour through conditions rather than timings.
"""

from __future__ import annotations

import json
from pathlib import Path

# Re-exported for the benchmarks and tests that package these models: the project's one packager.

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
        self.ballast = np.ones(int(params.get("ballast_mib", "0")) * 2**17)

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


VECTOR_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""


def write_vector_model(repo: Path, name: str, model_py: str) -> Path:
    """A Python-backend model folder ``repo/name``: one FP32 vector in (INPUT0), one out
    (OUTPUT0), ``model_py`` its model.py."""
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(VECTOR_CONFIG.format(name=name))
    (folder / "1" / "model.py").write_text(model_py)
    return folder


def write_two_step_ensemble(folder: Path) -> Path:
    """An ensemble ``ensemble`` of two steps, ``preprocess`` then ``postprocess`` (each a scale
    model with input X and output Y), FP32 [4] in and out."""
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
