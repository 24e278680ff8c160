"""Triton Python model ``postprocess``: mean pooling over the attention mask, then L2 norm.

TOKEN_EMBEDS_POST (FP32 [batch, seq, 384]) and ATTENTION_POST (INT64 [batch, seq]) ->
SENT_EMBED (FP32 [batch, 384]); the same arithmetic as sentence-transformers' Pooling and
Normalize modules, in numpy so this step needs no deep-learning framework.
"""

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

# pb_utils ships no types: its requests and responses are Any to the checker.


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        pass

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = []
        for request in requests:
            try:
                tokens = pb_utils.get_input_tensor_by_name(request, "TOKEN_EMBEDS_POST").as_numpy()
                mask = pb_utils.get_input_tensor_by_name(request, "ATTENTION_POST").as_numpy()
                weights = mask.astype(np.float32)[..., None]
                summed = (tokens.astype(np.float32) * weights).sum(axis=1)
                counts = np.clip(weights.sum(axis=1), 1e-9, None)
                pooled = summed / counts
                norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
                embeddings = (pooled / norms).astype(np.float32)
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("SENT_EMBED", embeddings)
                ]))
            except Exception as exc:  # noqa: BLE001 - answered as this request's error
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError(f"postprocess: {exc}")))
        return responses
