"""``mme serve --watch``: the default endpoint's folder store, looked at every
``--watch-interval`` seconds.

Each look reads every object's modification time and size (``FolderSource.versions``: no
dependency, no file read); an object whose figures changed, or that went away, is told to the
endpoint's instances (``EndpointRegistry.store_changed``): its next call loads the new version,
the old one serving until then, and every other model stays loaded. One log line per change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from emulator.background import beside
from emulator.manager.sources import FolderSource

log = logging.getLogger(__name__)


def changes(before: dict[str, str], now: dict[str, str]) -> list[tuple[str, str]]:
    """``(TargetModel, what happened)`` for every object new, changed or gone, sorted."""
    found = [(key, "changed") for key, version in now.items()
             if key in before and before[key] != version]
    found += [(key, "new") for key in now if key not in before]
    found += [(key, "removed") for key in before if key not in now]
    return sorted(found)


_SAID = {
    "changed": "changed; its next call loads the new version",
    "new": "is new; its first call loads it",
    "removed": "was removed; its next call finds no model",
}


class StoreWatch:
    """Polls ``source`` and calls ``changed(target)`` for each object changed or removed."""

    def __init__(self, source: FolderSource, interval_s: float,
                 changed: Callable[[str], None]) -> None:
        self.source = source
        self.interval_s = interval_s
        self._changed = changed
        self._seen: dict[str, str] = {}

    def look(self, now: dict[str, str]) -> list[tuple[str, str]]:
        """Compare ``now`` with the last look; tell and log what changed."""
        found = changes(self._seen, now)
        self._seen = now
        for target, what in found:
            log.info("store: %s %s", target, _SAID[what])
            if what != "new":
                self._changed(target)
        return found

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.look(await asyncio.to_thread(self.source.versions))
            except Exception:  # a failed look must not stop the next ones
                log.exception("store: looking at %s failed", self.source.location)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Watch for as long as the block runs (the first look is taken before it starts)."""
        self._seen = await asyncio.to_thread(self.source.versions)
        log.info("store: watching %s every %gs (%d objects)", self.source.location,
                 self.interval_s, len(self._seen))
        async with beside(self._run(), "store-watch"):
            yield
