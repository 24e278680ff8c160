"""CloudWatch statistics over raw samples: the five standard ones and extended ``pNN``."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

STANDARD = ("SampleCount", "Average", "Sum", "Minimum", "Maximum")
# p0 .. p100 with up to two decimals, as CloudWatch accepts them (p99, p99.9, p99.99).
_PERCENTILE = re.compile(r"p(\d{1,2}(?:\.\d{1,2})?|100(?:\.0{1,2})?)")


def percentile(values: Sequence[float] | npt.NDArray[Any], q: float) -> float:
    """The project's one percentile: nearest rank, the smallest sample with at least ``q``%
    of the samples at or below it (always a real sample; NaN for none). CloudWatch's pNN here,
    and every latency figure the load tests and benchmarks print, use it.

    [U] CloudWatch's own percentiles are estimates; nearest rank is the exact statistic they
    estimate."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))  # C speed: a period may hold 256 Ki
    if not ordered.size:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * ordered.size))
    return float(ordered[min(rank, ordered.size) - 1])


def is_percentile(name: str) -> bool:
    return _PERCENTILE.fullmatch(name) is not None


def is_supported(name: str) -> bool:
    return name in STANDARD or is_percentile(name)


def compute(name: str, values: npt.NDArray[Any]) -> float:
    """One statistic of a non-empty sample array."""
    if name == "SampleCount":
        return float(values.size)
    if name == "Sum":
        return float(values.sum())
    if name == "Average":
        return float(values.mean())
    if name == "Minimum":
        return float(values.min())
    if name == "Maximum":
        return float(values.max())
    match = _PERCENTILE.fullmatch(name)
    if match is None:
        raise ValueError(f"unsupported statistic {name!r}")
    return percentile(values, float(match.group(1)))
