"""Where a phased traffic pattern stands at a given time (pure: times are passed in)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.loadtest.config import Phase


@dataclass(frozen=True)
class Position:
    phase: int  # index into the phases
    phase_elapsed_s: float
    users: int


def position(phases: Sequence[Phase], elapsed_s: float) -> Position | None:
    """The phase and user count ``elapsed_s`` after the start; None once every phase is over.

    Phases follow one another; each starts again from its own ``InitialNumberOfUsers``.
    """
    if elapsed_s < 0:
        elapsed_s = 0.0
    start = 0.0
    for index, phase in enumerate(phases):
        if elapsed_s < start + phase.duration_s:
            into = elapsed_s - start
            return Position(index, into, phase.users_at(into))
        start += phase.duration_s
    return None
