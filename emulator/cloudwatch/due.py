"""When each metric alarm is evaluated next: a heap of (time, name), soonest first, so a round
costs the alarms that are due, not every alarm stored; and up to when each was evaluated, so a
round that runs late also evaluates the windows it would otherwise skip. Not thread-safe: the
alarm store calls it under its lock."""

from __future__ import annotations

import heapq

# A round later than this (in evaluation intervals) evaluates the windows it skipped too.
_LATE = 0.5
# At most this many windows caught up at once (a server stopped for an hour does not replay it).
MAX_CATCH_UP = 60


class DueQueue:
    def __init__(self) -> None:
        self._when: dict[str, float] = {}  # the one time that counts, per alarm
        # Entries whose time is no longer the alarm's (put again, deleted) are skipped when
        # they come up.
        self._heap: list[tuple[float, str]] = []
        self._evaluated: dict[str, float] = {}  # the end of the last window evaluated, per alarm

    def schedule(self, name: str, when: float) -> None:
        self._when[name] = when
        heapq.heappush(self._heap, (when, name))

    def forget(self, name: str) -> None:
        """Neither scheduled nor evaluated: deleted, or put again with a new rule."""
        self._when.pop(name, None)
        self._evaluated.pop(name, None)

    def windows(self, name: str, now: float, interval: float) -> list[float]:
        """The ends of the windows to evaluate now, oldest first: ``now``, after the end of each
        interval since the last evaluation that a late round would skip. CloudWatch evaluates
        every interval; a round that runs late (a busy machine, a fast emulated clock) must
        still see a datapoint that fell in a window it did not evaluate on time."""
        last = self._evaluated.get(name)
        self._evaluated[name] = now
        ends: list[float] = []
        if last is not None and interval > 0:
            end = last + interval
            while end <= now - _LATE * interval:
                ends.append(end)
                end += interval
        return [*ends[-MAX_CATCH_UP:], now]

    def take(self, now: float) -> list[str]:
        """The alarms due at ``now``, each once; they stay unscheduled until scheduled again."""
        due: list[str] = []
        while self._heap and self._heap[0][0] <= now:
            when, name = heapq.heappop(self._heap)
            if self._when.get(name) == when:
                del self._when[name]  # a second entry of the same time is skipped
                due.append(name)
        return due
