"""The one place the clock scale (``--clock-scale``, ``MME_CLOCK_SCALE``) is applied.

Everything AWS expresses in time (metric periods, alarm evaluation windows, cooldowns) is an
*emulated* duration; ``Clock`` turns it into real seconds. With ``--clock-scale 60`` one emulated
minute passes per real second, so a target-tracking scale-out (3 one-minute datapoints) happens in
3 real seconds and a scale-in (15 datapoints) in 15.

How absolute times relate (the choice that keeps AWS's published code working unmodified):
**the present is the real present and the past is compressed.** An event that happened ``s`` real
seconds ago is reported as ``s * scale`` seconds ago, and a client's ``StartTime``/``EndTime`` are
read the same way: ``datetime.utcnow() - timedelta(minutes=10)`` names the moment 10 emulated
minutes ago, i.e. 10 real seconds ago at scale 60, so the usual "last ten minutes" query covers
exactly the last ten emulated minutes. The price: the reported timestamp of one past event moves
further into the past from one call to the next (at scale 1 nothing moves). A clock that started
at real now and ran faster would put every recent sample in the client's future, outside any
``EndTime=utcnow()`` window; hence this choice.

Internally every stored time is a real epoch second (``time.time()``); conversion happens only at
the edges (the CloudWatch and Application Auto Scaling wire), always against one ``now`` per
request so that a response is self-consistent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Clock:
    scale: float = 1.0
    # Injected in tests; production uses the wall clock.
    time_fn: Callable[[], float] = field(default=time.time, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"clock scale must be > 0, got {self.scale!r}")

    def now(self) -> float:
        """Real epoch seconds; also the emulated present (see the module docstring)."""
        return self.time_fn()

    def real_duration(self, emulated_seconds: float) -> float:
        return emulated_seconds / self.scale

    def emulated_duration(self, real_seconds: float) -> float:
        return real_seconds * self.scale

    def to_emulated(self, real_ts: float, now: float | None = None) -> float:
        """The emulated timestamp of a real moment, as seen at ``now``."""
        now = self.now() if now is None else now
        return now - (now - real_ts) * self.scale

    def to_real(self, emulated_ts: float, now: float | None = None) -> float:
        """The real moment a client's timestamp names, as seen at ``now``."""
        now = self.now() if now is None else now
        return now - (now - emulated_ts) / self.scale

    async def sleep(self, emulated_seconds: float) -> None:
        await asyncio.sleep(max(0.0, self.real_duration(emulated_seconds)))
