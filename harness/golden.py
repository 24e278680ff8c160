"""Golden-output regression checks: ``.npz`` snapshots of a model's outputs, kept beside tests.

A snapshot records every output tensor and, in a ``__meta__`` entry, the digest of the model
tarball that produced it. When outputs drift, the failure says per tensor how far (max absolute
and relative error), where (the index of the worst element) and how many elements are out of
tolerance; when the tarball digest differs from the recorded one, the snapshot is named *stale*
(the model changed on purpose: re-record with ``--mme-update-goldens``) rather than a regression.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

META_KEY = "__meta__"
FORMAT_VERSION = 1


class GoldenMismatch(AssertionError):
    """Outputs differ from the snapshot (or the snapshot is missing)."""


class GoldenWarning(UserWarning):
    """The outputs match but the snapshot was recorded for another model tarball."""


@dataclass
class TensorDiff:
    name: str
    problem: str  # "missing", "unexpected", "shape", "dtype", "values"
    detail: str = ""
    mismatched: int = 0
    total: int = 0
    max_abs: float = 0.0
    max_abs_at: tuple[int, ...] = ()
    max_rel: float = 0.0
    max_rel_at: tuple[int, ...] = ()
    # What a reviewer needs to judge a numeric drift (set for problem == "values" on numbers):
    shape: tuple[int, ...] = ()
    dtype: str = ""
    cosine: float | None = None  # cosine similarity of got and expected (None: a zero vector)
    worst_at: tuple[int, ...] = ()  # the element furthest outside its tolerance
    worst_expected: float = 0.0
    worst_got: float = 0.0
    worst_allowed: float = 0.0  # atol + rtol * |expected| there

    def describe(self) -> str:
        if self.problem != "values":
            return f"  {self.name}: {self.detail}"
        if self.detail:  # non-numeric tensors: no error magnitude, the first difference
            return f"  {self.name}: {self.mismatched}/{self.total} elements differ; {self.detail}"
        cosine = "n/a (a zero tensor)" if self.cosine is None else f"{self.cosine:.6g}"
        return (
            f"  {self.name}: {self.mismatched}/{self.total} elements differ; "
            f"max abs error {self.max_abs:.6g} at {list(self.max_abs_at)}, "
            f"max rel error {self.max_rel:.6g} at {list(self.max_rel_at)}\n"
            f"      shape {list(self.shape)}, dtype {self.dtype}, cosine similarity {cosine}\n"
            f"      worst element {list(self.worst_at)}: expected {self.worst_expected:.8g}, "
            f"got {self.worst_got:.8g} (allowed |got - expected| <= {self.worst_allowed:.3g})"
        )


@dataclass
class Comparison:
    diffs: list[TensorDiff] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.diffs


def _storable(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    # Object arrays (Triton BYTES) would need pickle; fixed-width bytes load with
    # allow_pickle=False and compare element-wise the same way.
    if array.dtype.kind == "O":
        return np.array(
            [bytes(x) if not isinstance(x, str) else x.encode() for x in array.ravel()], dtype=bytes
        ).reshape(array.shape)
    if array.dtype.kind == "U":
        return np.char.encode(array, "utf-8")
    return array


def _flat_index(array_shape: tuple[int, ...], flat: int) -> tuple[int, ...]:
    if not array_shape:
        return ()
    return tuple(int(i) for i in np.unravel_index(flat, array_shape))


def compare_tensor(
    name: str, actual: npt.NDArray[Any], expected: npt.NDArray[Any], rtol: float, atol: float
) -> TensorDiff | None:
    actual = _storable(np.asarray(actual))
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        return TensorDiff(
            name, "shape", f"shape {list(actual.shape)}, golden has {list(expected.shape)}"
        )
    numeric = actual.dtype.kind in "biuf" and expected.dtype.kind in "biuf"
    if not numeric:
        if actual.dtype.kind != expected.dtype.kind:
            return TensorDiff(name, "dtype", f"dtype {actual.dtype}, golden has {expected.dtype}")
        differ = actual != expected
        count = int(np.count_nonzero(differ))
        if count == 0:
            return None
        first = _flat_index(actual.shape, int(np.flatnonzero(differ)[0]))
        return TensorDiff(
            name,
            "values",
            f"first at {list(first)}: {actual[first]!r} != golden {expected[first]!r}",
            mismatched=count,
            total=actual.size,
        )
    if actual.dtype.kind != expected.dtype.kind or (
        actual.dtype.kind == "f" and actual.dtype != expected.dtype
    ):
        # float32 vs float16 is a real change of the model's interface, not noise.
        return TensorDiff(name, "dtype", f"dtype {actual.dtype}, golden has {expected.dtype}")
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    close = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    count = int(close.size - np.count_nonzero(close))
    if count == 0:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        abs_err = np.abs(a - e)
        rel_err = abs_err / np.abs(e)
    # NaN against a number is an infinite error; inf/inf and 0/0 too (unless equal, see isclose).
    abs_err = np.where(np.isnan(abs_err) & ~close, np.inf, abs_err)
    rel_err = np.where(np.isnan(rel_err), np.where(close, 0.0, np.inf), rel_err)
    abs_at = int(np.argmax(abs_err))
    rel_at = int(np.argmax(rel_err))
    allowed = atol + rtol * np.abs(e)
    # Furthest outside its tolerance: the error over what was allowed there (isclose's rule).
    with np.errstate(invalid="ignore", divide="ignore"):
        excess = np.where(close, -1.0, np.where(allowed > 0, abs_err / allowed, np.inf))
    worst = int(np.argmax(np.nan_to_num(excess, nan=np.inf)))
    return TensorDiff(
        name,
        "values",
        mismatched=count,
        total=int(close.size),
        max_abs=float(abs_err.flat[abs_at]),
        max_abs_at=_flat_index(a.shape, abs_at),
        max_rel=float(rel_err.flat[rel_at]),
        max_rel_at=_flat_index(a.shape, rel_at),
        shape=tuple(int(n) for n in actual.shape),
        dtype=str(actual.dtype),
        cosine=_cosine(a, e),
        worst_at=_flat_index(a.shape, worst),
        worst_expected=float(e.flat[worst]),
        worst_got=float(a.flat[worst]),
        worst_allowed=float(allowed.flat[worst]),
    )


def _cosine(a: npt.NDArray[Any], e: npt.NDArray[Any]) -> float | None:
    """Cosine similarity of the two tensors flattened: 1 for the same direction whatever the
    scale, NaN when either holds a NaN or an infinity, None when either is all zeros."""
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(e))
    if norms == 0.0:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.dot(a.ravel(), e.ravel()) / norms)


def compare(
    actual: Mapping[str, npt.NDArray[Any]], expected: Mapping[str, npt.NDArray[Any]],
    rtol: float, atol: float,
) -> Comparison:
    result = Comparison()
    for name in sorted(set(expected) - set(actual)):
        result.diffs.append(TensorDiff(name, "missing", "in the golden, not in the outputs"))
    for name in sorted(set(actual) - set(expected)):
        result.diffs.append(TensorDiff(name, "unexpected", "in the outputs, not in the golden"))
    for name in sorted(set(actual) & set(expected)):
        diff = compare_tensor(name, actual[name], expected[name], rtol, atol)
        if diff is not None:
            result.diffs.append(diff)
    return result


@dataclass
class Golden:
    tensors: dict[str, npt.NDArray[Any]]
    meta: dict[str, object]


def load(path: Path) -> Golden:
    with np.load(path, allow_pickle=False) as data:
        tensors = {k: data[k] for k in data.files if k != META_KEY}
        meta = json.loads(str(data[META_KEY])) if META_KEY in data.files else {}
    return Golden(tensors, meta)


def save(path: Path, outputs: Mapping[str, npt.NDArray[Any]], meta: Mapping[str, object]) -> None:
    if META_KEY in outputs:
        raise ValueError(f"an output may not be named {META_KEY!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {name: _storable(np.asarray(value)) for name, value in outputs.items()}
    arrays[META_KEY] = np.array(json.dumps({"format": FORMAT_VERSION, **meta}, sort_keys=True))
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def check(
    path: Path,
    outputs: Mapping[str, npt.NDArray[Any]],
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    update: bool = False,
    model_digest: str | None = None,
    model: str | None = None,
) -> str:
    """Compare ``outputs`` with the snapshot at ``path``; record it when ``update`` is set.

    Returns "recorded", "updated" or "matched"; raises :class:`GoldenMismatch` otherwise.
    """
    meta: dict[str, object] = {}
    if model is not None:
        meta["model"] = model
    if model_digest is not None:
        meta["model_digest"] = model_digest
    exists = path.is_file()
    if update:
        save(path, outputs, meta)
        return "updated" if exists else "recorded"
    if not exists:
        raise GoldenMismatch(
            f"no golden snapshot {path}; run pytest with --mme-update-goldens to record it"
        )
    golden = load(path)
    recorded = golden.meta.get("model_digest")
    stale = model_digest is not None and recorded is not None and recorded != model_digest
    result = compare(outputs, golden.tensors, rtol, atol)
    if result.ok:
        if stale:
            warnings.warn(
                GoldenWarning(
                    f"golden {path.name} was recorded for model digest {recorded}, "
                    f"the model is now {model_digest}; outputs still match "
                    "(re-record with --mme-update-goldens)"
                ),
                stacklevel=3,
            )
        return "matched"
    what = golden.meta.get("model", model or "the model")
    if stale:
        head = (
            f"golden {path} is STALE: it was recorded for {what} with digest {recorded}, "
            f"the tarball is now {model_digest}. If the model changed on purpose, re-record "
            f"with --mme-update-goldens. Differences:"
        )
    else:
        head = f"outputs differ from golden {path} (rtol={rtol:g}, atol={atol:g}):"
    raise GoldenMismatch("\n".join([head, *(d.describe() for d in result.diffs)]))
