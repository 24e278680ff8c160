"""Write a Triton model repository as the ``.tar.gz`` that SageMaker expects, and small helpers
shared by the ensemble builders (config.pbtxt text, model folders).

Two tar layouts are in use; both work on SageMaker's Triton container, which unpacks a
TargetModel to ``/opt/ml/models/<hash>/model/``:

``flat`` (default, what ``tar -C repo -czf model.tar.gz .`` makes):
    entries ``./ensemble/config.pbtxt``, ``./preprocess/1/model.py``, ... so every model folder
    of the repository sits directly under ``model/``. Required for ensembles: Triton's
    SageMaker server picks the folder whose config says ``platform: "ensemble"`` and loads the
    others as its steps.
``folder`` (what ``tar -czf model.tar.gz resnet/`` makes):
    one top-level folder holding a single model (``resnet/config.pbtxt``,
    ``resnet/1/model.onnx``). Fine for one model; for an ensemble it would hide the step models
    one level too deep.
"""

from __future__ import annotations

import gzip
import os
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path

LAYOUTS = ("flat", "folder")


def _entries(repo_dir: Path) -> list[Path]:
    # Sorted so the same repository always gives the same archive (stable digests, caching);
    # Python's byte-code caches are not part of a model.
    return sorted((p for p in repo_dir.rglob("*")
                   if "__pycache__" not in p.relative_to(repo_dir).parts and p.suffix != ".pyc"),
                  key=lambda p: p.relative_to(repo_dir).as_posix())


def package(repo_dir: Path, tarball: Path, layout: str = "flat") -> Path:
    """Archive ``repo_dir`` into ``tarball`` (gzip) with the given layout; returns ``tarball``.

    The project's one packager (the ensembles, the harness's stores and deployer, the test
    models). Deterministic: sorted entries, zero times and owners (in the gzip header too), so
    a tarball's digest changes only when its content does. Written next to ``tarball`` and
    renamed into place, so a failure leaves no half-written archive.
    """
    repo_dir = Path(repo_dir)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    if not repo_dir.is_dir():
        raise FileNotFoundError(f"{repo_dir} is not a folder")
    models = [p for p in repo_dir.iterdir() if (p / "config.pbtxt").is_file()]
    if layout == "flat" and not models and not (repo_dir / "config.pbtxt").is_file():
        raise ValueError(f"{repo_dir} holds no model folder (no */config.pbtxt)")
    prefix = "." if layout == "flat" else repo_dir.name
    tarball = Path(tarball)
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_name(tarball.name + ".part")
    try:
        # Level 1: a model's weights barely compress at any level (the text ensemble's 87 MiB
        # are 0.5 % larger than at level 9), and it takes a third less time than level 9.
        with partial.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                      filename="", compresslevel=1) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            root = tarfile.TarInfo(prefix)
            root.type = tarfile.DIRTYPE
            root.mode = 0o755
            tar.addfile(root)
            for path in _entries(repo_dir):
                # Symlinks are stored as the files they point to: extraction on the serving side
                # refuses links, and the archive must be self-contained.
                info = tarfile.TarInfo(f"{prefix}/{path.relative_to(repo_dir).as_posix()}")
                info.mtime = 0  # archives do not depend on when, or by whom, they were built
                if path.is_dir():
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
                elif path.is_file():
                    info.size = path.stat().st_size
                    info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
                    with path.open("rb") as handle:
                        tar.addfile(info, handle)
        os.replace(partial, tarball)
    finally:
        partial.unlink(missing_ok=True)
    return tarball


def dims(values: Iterable[int]) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


def tensor_block(kind: str, tensors: Iterable[tuple[str, str, Iterable[int]]]) -> str:
    parts = [
        f'  {{ name: "{name}" data_type: {dtype} dims: {dims(shape)} }}'
        for name, dtype, shape in tensors
    ]
    return f"{kind} [\n" + ",\n".join(parts) + "\n]\n"


def parameters_block(params: Mapping[str, str]) -> str:
    return "".join(
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
        for key, value in params.items()
    )


def ensemble_steps_block(
    steps: Iterable[tuple[str, Mapping[str, str], Mapping[str, str]]],
) -> str:
    """An ensemble's ``ensemble_scheduling``: each step is (model, its inputs, its outputs), the
    maps from the model's tensor names to the ensemble's."""
    parts = []
    for model, inputs, outputs in steps:
        maps = [f'      input_map {{ key: "{k}" value: "{v}" }}\n' for k, v in inputs.items()]
        maps += [f'      output_map {{ key: "{k}" value: "{v}" }}\n' for k, v in outputs.items()]
        parts.append(f'    {{\n      model_name: "{model}"\n      model_version: -1\n'
                     + "".join(maps) + "    }")
    return "ensemble_scheduling {\n  step [\n" + ",\n".join(parts) + "\n  ]\n}\n"


def scheduling_block(dynamic_batching: bool, instance_count: int, kind: str = "KIND_CPU") -> str:
    text = f"instance_group [ {{ kind: {kind} count: {instance_count} }} ]\n"
    if dynamic_batching:
        text += "dynamic_batching { }\n"
    return text


def model_folder(repo: Path, name: str, config: str) -> Path:
    """Create ``repo/name/1/`` and write ``repo/name/config.pbtxt``; returns the version dir."""
    version = repo / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(config)
    return version


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
