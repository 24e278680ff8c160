"""A wall clock the test moves by hand: ``Clock(scale, time=FakeTime())``."""

from __future__ import annotations


class FakeTime:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
