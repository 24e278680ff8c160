"""Golden snapshots: record, match, and explain a mismatch (magnitude, place, count, staleness)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from harness.golden import GoldenMismatch, GoldenWarning, check, compare_tensor, load


def outputs() -> dict[str, np.ndarray]:
    return {
        "SUM": np.arange(12, dtype=np.float32).reshape(3, 4),
        "LABEL": np.array([b"cat", b"dog"], dtype=object),
    }


def test_missing_golden_fails_and_says_how_to_record(tmp_path: Path) -> None:
    with pytest.raises(GoldenMismatch, match="--mme-update-goldens"):
        check(tmp_path / "g.npz", outputs())


def test_record_then_match(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "g.npz"
    assert (
        check(path, outputs(), update=True, model_digest="sha256:aa", model="m.tar.gz")
        == "recorded"
    )
    assert check(path, outputs(), model_digest="sha256:aa") == "matched"
    golden = load(path)
    assert golden.meta["model_digest"] == "sha256:aa"
    assert golden.meta["model"] == "m.tar.gz"
    assert golden.tensors["LABEL"].tolist() == [b"cat", b"dog"]


def test_within_tolerance_matches(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    check(path, outputs(), update=True)
    drifted = outputs()
    drifted["SUM"] = drifted["SUM"] + np.float32(1e-4)
    assert check(path, drifted, rtol=0, atol=1e-3) == "matched"
    with pytest.raises(GoldenMismatch):
        check(path, drifted, rtol=0, atol=1e-5)


def test_mismatch_reports_max_errors_location_and_count(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    check(path, outputs(), update=True)
    changed = outputs()
    changed["SUM"][1, 2] += 5.0  # golden 6 -> 11
    changed["SUM"][2, 3] += 0.5  # golden 11 -> 11.5
    with pytest.raises(GoldenMismatch) as info:
        check(path, changed, rtol=1e-6, atol=1e-6)
    message = str(info.value)
    assert "SUM: 2/12 elements differ" in message
    assert "max abs error 5 at [1, 2]" in message
    assert "max rel error 0.833333 at [1, 2]" in message
    assert "STALE" not in message


def test_shape_dtype_missing_and_extra_outputs_are_named(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    check(path, outputs(), update=True)
    changed = {"SUM": np.zeros((4, 3), np.float32), "EXTRA": np.zeros(1)}
    with pytest.raises(GoldenMismatch) as info:
        check(path, changed)
    message = str(info.value)
    assert "LABEL: in the golden, not in the outputs" in message
    assert "EXTRA: in the outputs, not in the golden" in message
    assert "SUM: shape [4, 3], golden has [3, 4]" in message
    diff = compare_tensor("X", np.zeros(2, np.float16), np.zeros(2, np.float32), 0, 0)
    assert diff is not None and diff.problem == "dtype"


def test_bytes_mismatch_names_first_difference(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    check(path, outputs(), update=True)
    changed = outputs()
    changed["LABEL"] = np.array([b"cat", b"cow"], dtype=object)
    with pytest.raises(GoldenMismatch, match=r"LABEL: 1/2 elements differ; first at \[1\]"):
        check(path, changed)


def test_nan_equal_to_nan_but_not_to_a_number(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    check(path, {"X": np.array([np.nan, 1.0])}, update=True)
    assert check(path, {"X": np.array([np.nan, 1.0])}) == "matched"
    with pytest.raises(GoldenMismatch, match="max abs error inf at \\[0\\]"):
        check(path, {"X": np.array([0.0, 1.0])})


def test_stale_snapshot_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    check(path, outputs(), update=True, model_digest="sha256:old", model="m.tar.gz")
    changed = outputs()
    changed["SUM"][0, 0] = 100
    with pytest.raises(GoldenMismatch) as info:
        check(path, changed, model_digest="sha256:new")
    message = str(info.value)
    assert "STALE" in message and "sha256:old" in message and "sha256:new" in message
    assert "m.tar.gz" in message


def test_new_digest_with_equal_outputs_only_warns(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    check(path, outputs(), update=True, model_digest="sha256:old")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert check(path, outputs(), model_digest="sha256:new") == "matched"
    assert any(issubclass(w.category, GoldenWarning) for w in caught)


def test_update_rewrites_an_existing_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    check(path, outputs(), update=True)
    changed = {"SUM": np.ones(3, np.float32)}
    assert check(path, changed, update=True) == "updated"
    assert check(path, changed) == "matched"
    assert not list(tmp_path.glob("*.tmp*"))
