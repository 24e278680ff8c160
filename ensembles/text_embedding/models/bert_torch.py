"""Triton Python model ``bert-torch``: the transformer run directly with PyTorch.

The pattern of the seeds' T5 example: a Python-backend model that loads the Hugging Face
weights shipped in ``1/hf_model/`` and runs them with torch. It needs torch and transformers in
the Python environment of the stub: on SageMaker, ship a conda-pack archive next to
config.pbtxt and point the ``EXECUTION_ENV_PATH`` parameter at it
(``$$TRITON_MODEL_DIRECTORY/torch_env.tar.gz``); locally the emulator's virtualenv has them.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

# pb_utils ships no types: its requests and responses are Any to the checker.


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        import torch
        from transformers import AutoModel

        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        gpu = args.get("model_instance_kind") == "GPU" and torch.cuda.is_available()
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}" if gpu else "cpu")
        threads = params.get("torch_threads")
        if threads:
            torch.set_num_threads(int(threads))
        folder = Path(args["model_repository"]) / args["model_version"] / "hf_model"
        self.model: torch.nn.Module | None = (
            AutoModel.from_pretrained(str(folder)).to(self.device).eval())

    def execute(self, requests: list[Any]) -> list[Any]:
        import torch  # already loaded by initialize()

        responses: list[Any] = []
        for request in requests:
            try:
                if self.model is None:  # finalize() released it
                    raise RuntimeError("the model is finalized")
                ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()
                mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy()
                with torch.inference_mode():
                    hidden = self.model(
                        input_ids=torch.from_numpy(ids).to(self.device),
                        attention_mask=torch.from_numpy(mask).to(self.device),
                    ).last_hidden_state
                out = hidden.float().cpu().numpy().astype(np.float32)
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("last_hidden_state", out)
                ]))
            except Exception as exc:  # noqa: BLE001 - answered as this request's error
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError(f"bert-torch: {exc}")))
        return responses

    def finalize(self) -> None:
        import torch

        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
