"""Triton Python model ``preprocess``: the model's own tokenizer (shipped in ``1/tokenizer/``).

INPUT0 (BYTES, [batch, 1]) -> input_ids, attention_mask (INT64, [batch, seq]); each request is
padded to its longest sentence and truncated at ``max_seq_length`` (the sentence-transformers
setting of the model), exactly as SentenceTransformer.encode tokenizes.
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

# pb_utils ships no types: its requests and responses are Any to the checker.

Encoded = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]  # input_ids, attention_mask


def fast_tokenizer(folder: Path, max_length: int) -> Callable[[list[str]], Encoded]:
    """texts -> (input_ids, attention_mask), INT64 [batch, longest], truncated at max_length.

    A folder with ``tokenizer.json`` (what the builder ships) is read by the ``tokenizers``
    library itself: the same Rust tokenizer transformers' fast tokenizer wraps, with the same
    padding and truncation, without importing transformers (about 2 s of every load of this
    model). A folder without one (the slow tokenizer's files only) goes through
    ``transformers.AutoTokenizer``, which converts it.
    """
    if not (folder / "tokenizer.json").is_file():
        from transformers import AutoTokenizer

        slow = AutoTokenizer.from_pretrained(str(folder))

        def encode_slow(texts: list[str]) -> Encoded:
            encoded = slow(texts, padding=True, truncation=True, max_length=max_length,
                           return_tensors="np")
            return (encoded["input_ids"].astype(np.int64),
                    encoded["attention_mask"].astype(np.int64))

        return encode_slow
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    settings = json.loads((folder / "tokenizer_config.json").read_text()) \
        if (folder / "tokenizer_config.json").is_file() else {}
    pad_token = str(settings.get("pad_token") or "[PAD]")
    pad_id = tokenizer.token_to_id(pad_token)
    # transformers' settings, in place of the ones saved in tokenizer.json: truncation at
    # max_length (longest first, from the right), padding to the batch's longest sentence
    tokenizer.enable_truncation(max_length, strategy="longest_first", direction="right")
    tokenizer.enable_padding(direction=str(settings.get("padding_side", "right")),
                             pad_id=0 if pad_id is None else pad_id, pad_token=pad_token)

    def encode(texts: list[str]) -> Encoded:
        encodings = tokenizer.encode_batch(texts, add_special_tokens=True)
        return (np.array([e.ids for e in encodings], dtype=np.int64),
                np.array([e.attention_mask for e in encodings], dtype=np.int64))

    return encode


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.max_length = int(params.get("max_seq_length", "256"))
        folder = Path(args["model_repository"]) / args["model_version"] / "tokenizer"
        self.tokenizer: Callable[[list[str]], Encoded] | None = (
            fast_tokenizer(folder, self.max_length))

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
                input_ids, attention_mask = self.tokenizer(texts)
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("input_ids", input_ids),
                    pb_utils.Tensor("attention_mask", attention_mask),
                ]))
            except Exception as exc:  # noqa: BLE001 - a bad sentence fails its request only
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError(f"preprocess: {exc}")))
        return responses

    def finalize(self) -> None:
        self.tokenizer = None
