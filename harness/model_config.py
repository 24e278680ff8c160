"""What a Triton model repository's configs say: its models, the one requests go to, and the
inputs a request must carry. Read by the sweep (which varies a config) and by the load test
(which builds a request for a repository it was only given as a tarball).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.model_store import is_model_dir


class ModelRepositoryError(ValueError):
    """A repository whose configs do not say what the caller needs (which model, which inputs)."""


def protobuf() -> tuple[Any, Any]:
    """(text_format, model_config_pb2): imported on use, as tritonclient's gRPC stubs are heavy."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format, model_config_pb2


def model_dirs(repository: Path) -> list[Path]:
    return sorted(p for p in Path(repository).iterdir() if is_model_dir(p))


def platform(config_text: str) -> str:
    text_format, pb = protobuf()
    return str(text_format.Parse(config_text, pb.ModelConfig()).platform)


def entry_model(repository: Path) -> Path:
    """The model requests go to: the ensemble if there is one, else the single model."""
    dirs = model_dirs(repository)
    ensembles = [d for d in dirs if platform((d / "config.pbtxt").read_text()) == "ensemble"]
    if len(ensembles) == 1:
        return ensembles[0]
    if len(dirs) == 1:
        return dirs[0]
    raise ModelRepositoryError(
        f"{repository}: cannot tell the entry model among {[d.name for d in dirs]}")


def input_specs(config_text: str, batch_size: int = 1) -> list[tuple[str, str, list[int]]]:
    """``(name, KServe datatype, shape)`` of a config's inputs, batch dimension included."""
    text_format, pb = protobuf()
    return config_input_specs(text_format.Parse(config_text, pb.ModelConfig()), batch_size)


def config_input_specs(config: Any, batch_size: int = 1) -> list[tuple[str, str, list[int]]]:
    """``input_specs`` of a parsed ``ModelConfig``."""
    _, pb = protobuf()
    specs = []
    for item in config.input:
        datatype = pb.DataType.Name(item.data_type).removeprefix("TYPE_")
        datatype = "BYTES" if datatype == "STRING" else datatype
        dims = list(item.dims)
        if config.max_batch_size > 0:
            dims = [batch_size, *dims]
        specs.append((item.name, datatype, dims))
    return specs
