"""When each metric alarm is evaluated next: a heap of (time, name), soonest first, so a round
costs the alarms that are due, not every alarm stored. Not thread-safe: the alarm store calls it
under its lock."""

from __future__ import annotations

import heapq


class DueQueue:
    def __init__(self) -> None:
        self._when: dict[str, float] = {}  # the one time that counts, per alarm
        # Entries whose time is no longer the alarm's (put again, deleted) are skipped when
        # they come up.
        self._heap: list[tuple[float, str]] = []

    def schedule(self, name: str, when: float) -> None:
        self._when[name] = when
        heapq.heappush(self._heap, (when, name))

    def forget(self, name: str) -> None:
        self._when.pop(name, None)

    def take(self, now: float) -> list[str]:
        """The alarms due at ``now``, each once; they stay unscheduled until scheduled again."""
        due: list[str] = []
        while self._heap and self._heap[0][0] <= now:
            when, name = heapq.heappop(self._heap)
            if self._when.get(name) == when:
                del self._when[name]  # a second entry of the same time is skipped
                due.append(name)
        return due
