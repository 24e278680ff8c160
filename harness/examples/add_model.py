"""A tiny Triton Python-backend model, ``add``: OUTPUT0 = INPUT0 + INPUT1 (+ offset),
OUTPUT1 = INPUT0 - INPUT1. Used by the harness's own tests and as a template.

``write_add_repository(path)`` writes a model repository (``path/add/config.pbtxt`` and
``path/add/1/model.py``); package it with ``harness.model_store.package_repository``.
``python -m harness.examples.add_model models/`` does the same from a shell: with
``mme_model_store = models/`` the plugin then serves it as the TargetModel ``add.tar.gz``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack  # in typing from 3.11; mypy checks as 3.10

MODEL_PY = """\
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        self.offset = float(params.get("offset", {}).get("string_value", "0"))
        # A fixed cost per execute() call, whatever the batch size: it makes batching pay off
        # the way it does for a GPU kernel launch.
        self.delay_s = float(params.get("exec_delay_ms", {}).get("string_value", "0")) / 1000

    def execute(self, requests):
        if self.delay_s:
            time.sleep(self.delay_s)
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = pb_utils.Tensor("OUTPUT0", (a + b + self.offset).astype(np.float32))
            out1 = pb_utils.Tensor("OUTPUT1", (a - b).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses
"""


def config_pbtxt(
    name: str = "add",
    *,
    dims: int = 4,
    max_batch_size: int = 8,
    offset: float = 0.0,
    exec_delay_ms: float = 0.0,
    dynamic_batching: bool = False,
    instances: int = 1,
) -> str:
    batching = "dynamic_batching { }\n" if dynamic_batching else ""
    return f'''name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ {dims} ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ {dims} ] }}
]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
{batching}parameters {{ key: "offset" value {{ string_value: "{offset:g}" }} }}
parameters {{ key: "exec_delay_ms" value {{ string_value: "{exec_delay_ms:g}" }} }}
'''


class AddConfig(TypedDict, total=False):
    """The keyword arguments of ``config_pbtxt``."""

    dims: int
    max_batch_size: int
    offset: float
    exec_delay_ms: float
    dynamic_batching: bool
    instances: int


def write_add_repository(repository: Path, name: str = "add",
                         **config: Unpack[AddConfig]) -> Path:
    """Write the model into ``repository/<name>/``; returns the repository folder."""
    model_dir = Path(repository) / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config_pbtxt(name, **config))
    (model_dir / "1" / "model.py").write_text(MODEL_PY)
    return Path(repository)


def main(argv: list[str]) -> None:
    """``python -m harness.examples.add_model FOLDER [--offset N]``: writes FOLDER/add/."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.examples.add_model",
                                     description="write the add model into FOLDER/add/")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--offset", type=float, default=0.0,
                        help="added to OUTPUT0 (another version of the model; default 0)")
    args = parser.parse_args(argv)
    written = write_add_repository(args.folder, offset=args.offset) / "add"
    print(f"wrote {written}/config.pbtxt and {written}/1/model.py (TargetModel add.tar.gz)")


if __name__ == "__main__":
    main(sys.argv[1:])
