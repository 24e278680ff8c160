"""Golden cases: each model x golden is its own test, with no test code to write.

A folder (``--mme-goldens DIR`` or the ini option ``mme_goldens``) holds one ``.npz`` per case
at ``DIR/<TargetModel>/<case>.npz`` (the TargetModel may have subfolders:
``DIR/team/ranker.tar.gz/top-k.npz``). A case holds the request's inputs (``input:<NAME>``), the
recorded outputs (``output:<NAME>``) and a ``__meta__`` entry (the tarball digest that produced
them, the tolerance). The plugin collects each file as one test,
``golden[<TargetModel>/<case>]``: it invokes the endpoint with the inputs and compares every
output (``harness.golden.compare``), so ``pytest --junitxml`` has one test case per model x
golden, and a mismatch's message names the output, shape, dtype, max abs and rel error,
cosine similarity, the worst element with expected and got, and the tolerance.

``write_case(DIR, "model.tar.gz", "case", {"INPUT0": array})`` writes a case with inputs only;
``pytest --mme-update-goldens`` records (or re-records) its outputs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from harness.golden import META_KEY, compare

INPUT_PREFIX = "input:"
OUTPUT_PREFIX = "output:"
CASE_FORMAT = 1
DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-6


@dataclass
class GoldenCase:
    path: Path
    model: str  # the TargetModel
    name: str
    inputs: dict[str, npt.NDArray[Any]]
    outputs: dict[str, npt.NDArray[Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def rtol(self) -> float:
        return float(self.meta.get("rtol", DEFAULT_RTOL))

    @property
    def atol(self) -> float:
        return float(self.meta.get("atol", DEFAULT_ATOL))

    @property
    def label(self) -> str:
        return f"{self.model}/{self.name}"


def case_identity(root: Path, path: Path) -> tuple[str, str]:
    """``(TargetModel, case name)`` of ``root/<TargetModel>/<case>.npz``."""
    relative = path.relative_to(root)
    if len(relative.parts) < 2:
        raise ValueError(f"{path}: a golden case goes in a folder named after its TargetModel "
                         f"({root}/<TargetModel>/<case>.npz)")
    return relative.parent.as_posix(), path.stem


def load_case(root: Path, path: Path) -> GoldenCase:
    model, name = case_identity(root, path)
    with np.load(path, allow_pickle=False) as data:
        inputs = {k[len(INPUT_PREFIX):]: data[k] for k in data.files if k.startswith(INPUT_PREFIX)}
        outputs = {k[len(OUTPUT_PREFIX):]: data[k] for k in data.files
                   if k.startswith(OUTPUT_PREFIX)}
        meta = json.loads(str(data[META_KEY])) if META_KEY in data.files else {}
    if not inputs:
        raise ValueError(f"{path}: no inputs (entries named {INPUT_PREFIX}<NAME>); write the "
                         "case with harness.golden_cases.write_case")
    return GoldenCase(path, model, name, inputs, outputs, meta)


def _save(path: Path, inputs: Mapping[str, Any], outputs: Mapping[str, Any],
          meta: Mapping[str, Any]) -> None:
    from harness.golden import _storable

    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"{INPUT_PREFIX}{k}": np.asarray(v) for k, v in inputs.items()}
    arrays.update({f"{OUTPUT_PREFIX}{k}": _storable(np.asarray(v)) for k, v in outputs.items()})
    arrays[META_KEY] = np.array(json.dumps({"format": CASE_FORMAT, **meta}, sort_keys=True))
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def write_case(root: Path, model: str, name: str, inputs: Mapping[str, Any], *,
               outputs: Mapping[str, Any] | None = None, rtol: float = DEFAULT_RTOL,
               atol: float = DEFAULT_ATOL) -> Path:
    """A case: its inputs and, when known, the outputs expected (otherwise
    ``pytest --mme-update-goldens`` records what the model answers)."""
    path = Path(root) / model / f"{name}.npz"
    _save(path, inputs, outputs or {}, {"model": model, "rtol": rtol, "atol": atol})
    return path


@dataclass
class CaseResult:
    outcome: str  # matched | recorded | updated | mismatch | stale
    message: str = ""


def check_case(case: GoldenCase, outputs: Mapping[str, Any], *, update: bool,
               digest: str | None) -> CaseResult:
    """Compare the endpoint's ``outputs`` with the case (or record them when ``update``)."""
    if update:
        meta = {k: v for k, v in case.meta.items() if k != "format"}
        meta.update({"model": case.model, "rtol": case.rtol, "atol": case.atol})
        if digest is not None:
            meta["model_digest"] = digest
        _save(case.path, case.inputs, outputs, meta)
        return CaseResult("updated" if case.outputs else "recorded")
    if not case.outputs:
        return CaseResult("mismatch", f"golden {case.label}: {case.path} has no recorded "
                          "outputs yet; run pytest with --mme-update-goldens to record them")
    result = compare(outputs, case.outputs, case.rtol, case.atol)
    recorded = case.meta.get("model_digest")
    stale = digest is not None and recorded is not None and recorded != digest
    if result.ok:
        return CaseResult("matched", f"(the tarball changed from {recorded} to {digest}; "
                          "outputs still match)" if stale else "")
    if stale:
        head = (f"golden {case.label} is STALE: {case.path} was recorded for digest {recorded}, "
                f"the tarball is now {digest}. If the model changed on purpose, re-record with "
                f"--mme-update-goldens. Differences (rtol={case.rtol:g}, atol={case.atol:g}):")
    else:
        head = (f"golden {case.label}: outputs differ from {case.path} "
                f"(tolerance rtol={case.rtol:g}, atol={case.atol:g}):")
    lines = [head, *(d.describe() for d in result.diffs)]
    return CaseResult("stale" if stale else "mismatch", "\n".join(lines))
