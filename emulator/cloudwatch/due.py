"""When each metric alarm is evaluated next: a heap of (time, name), soonest first, so a round
costs the alarms that are due, not every alarm stored; and the end of each one's last window, so
the windows a round evaluates follow on from it whenever the round runs. Not thread-safe: the
alarm store calls it under its lock."""

from __future__ import annotations

import heapq

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

    def windows(self, name: str, now: float, interval: float, every: bool = False
                ) -> list[float]:
        """The ends of the windows to evaluate now, oldest first. An alarm's windows end on
        its own grid, one interval after another from its first evaluation, so they tile time:
        however late a round runs (a busy machine, a fast emulated clock), every datapoint falls
        in a window that is evaluated, as each falls in one of CloudWatch's periods. A round
        catches up on every grid end it passed (at most ``MAX_CATCH_UP``); ``every`` (a round
        that evaluates every alarm, after a step of a test's clock) also evaluates the present
        when it is past the last grid end."""
        last = self._evaluated.get(name)
        if last is None or interval <= 0 or now < last:  # the first, or the clock went back
            self._evaluated[name] = now
            return [now]
        passed = int((now - last) // interval)
        ends = [last + k * interval for k in range(max(1, passed - MAX_CATCH_UP + 1), passed + 1)]
        if ends:
            self._evaluated[name] = ends[-1]
        if not ends or (every and now > ends[-1]):
            ends.append(now)
        return ends

    def next_end(self, name: str, now: float, interval: float) -> float:
        """When the alarm's next window ends: one interval after its last grid end."""
        last = self._evaluated.get(name)
        return (last if last is not None else now) + interval

    def take(self, now: float) -> list[str]:
        """The alarms due at ``now``, each once; they stay unscheduled until scheduled again."""
        due: list[str] = []
        while self._heap and self._heap[0][0] <= now:
            when, name = heapq.heappop(self._heap)
            if self._when.get(name) == when:
                del self._when[name]  # a second entry of the same time is skipped
                due.append(name)
        return due
