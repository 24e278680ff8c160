"""Which TargetModel each request goes to: uniform, or Zipf-distributed to exercise MME caching.

With Zipf(s) the k-th model (1-based, in the order given) is chosen with probability
proportional to ``1 / k**s``: a few hot models stay loaded while the long tail causes cold
starts and evictions, the traffic shape SageMaker multi-model endpoints are built for.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from typing import Generic, TypeVar

from harness.loadtest.config import Popularity

T = TypeVar("T")


def weights(popularity: Popularity, count: int) -> list[float]:
    if count < 1:
        raise ValueError("no models to choose from")
    if popularity.kind == "uniform":
        raw = [1.0] * count
    else:
        raw = [1.0 / (k**popularity.s) for k in range(1, count + 1)]
    total = sum(raw)
    return [w / total for w in raw]


class Chooser(Generic[T]):
    """Draws items with the given popularity from a seeded generator (reproducible runs)."""

    def __init__(self, items: Sequence[T], popularity: Popularity, seed: int = 0) -> None:
        self.items = list(items)
        self.weights = weights(popularity, len(self.items))
        self._cumulative = list(itertools.accumulate(self.weights))
        self._cumulative[-1] = 1.0  # guard against float round-off at the top end
        self._random = random.Random(seed)

    def __call__(self) -> T:
        if len(self.items) == 1:
            return self.items[0]
        return self.items[bisect.bisect_right(self._cumulative, self._random.random())]
