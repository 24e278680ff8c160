"""CloudWatch statistics over raw samples: the five standard ones and extended ``pNN``."""

from __future__ import annotations

import re

import numpy as np

STANDARD = ("SampleCount", "Average", "Sum", "Minimum", "Maximum")
# p0 .. p100 with up to two decimals, as CloudWatch accepts them (p99, p99.9, p99.99).
_PERCENTILE = re.compile(r"p(\d{1,2}(?:\.\d{1,2})?|100(?:\.0{1,2})?)")


def is_percentile(name: str) -> bool:
    return _PERCENTILE.fullmatch(name) is not None


def is_supported(name: str) -> bool:
    return name in STANDARD or is_percentile(name)


def compute(name: str, values: np.ndarray) -> float:
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
    # [U] CloudWatch's percentiles are estimates; nearest rank (a real sample) is used here.
    return float(np.percentile(values, float(match.group(1)), method="inverted_cdf"))
