"""Triton Python model ``preprocess``: the model's own tokenizer (shipped in ``1/tokenizer/``).

INPUT0 (BYTES, [batch, 1]) -> input_ids, attention_mask (INT64, [batch, seq]); each request is
padded to its longest sentence and truncated at ``max_seq_length`` (the sentence-transformers
setting of the model), exactly as SentenceTransformer.encode tokenizes.
"""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import triton_python_backend_utils as pb_utils

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# pb_utils ships no types: its requests and responses are Any to the checker.


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        from transformers import AutoTokenizer

        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.max_length = int(params.get("max_seq_length", "256"))
        folder = Path(args["model_repository"]) / args["model_version"] / "tokenizer"
        self.tokenizer: PreTrainedTokenizerBase | None = (
            AutoTokenizer.from_pretrained(str(folder)))

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = []
        for request in requests:
            try:
                if self.tokenizer is None:  # finalize() released it
                    raise RuntimeError("the model is finalized")
                raw = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                texts = [
                    item.decode("utf-8") if isinstance(item, bytes) else str(item)
                    for item in raw.reshape(-1)
                ]
                encoded = self.tokenizer(texts, padding=True, truncation=True,
                                         max_length=self.max_length, return_tensors="np")
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("input_ids", encoded["input_ids"].astype(np.int64)),
                    pb_utils.Tensor("attention_mask",
                                    encoded["attention_mask"].astype(np.int64)),
                ]))
            except Exception as exc:  # noqa: BLE001 - a bad sentence fails its request only
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError(f"preprocess: {exc}")))
        return responses

    def finalize(self) -> None:
        self.tokenizer = None
