"""A pure least-recently-used index with byte and count capacities and pins. No I/O.

Why not ``cachetools.LRUCache``: it evicts synchronously inside ``__setitem__`` and knows no pins,
while here eviction is an async unload in Triton that must skip models serving requests. The index
only *chooses* victims; the model manager carries the evictions out.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


class DoesNotFit(Exception):
    """The item is larger than the whole capacity: no eviction can make room."""


@dataclass
class Entry:
    key: str
    size: int
    pins: int = 0


class LruIndex:
    def __init__(self, capacity_bytes: int | None = None, capacity_count: int | None = None):
        self.capacity_bytes = capacity_bytes
        self.capacity_count = capacity_count
        self._entries: OrderedDict[str, Entry] = OrderedDict()  # least recent first

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self._entries.values())

    def get(self, key: str) -> Entry | None:
        return self._entries.get(key)

    def keys_lru_first(self) -> list[str]:
        return list(self._entries)

    def position(self, key: str) -> int:
        """0 for the least recently used (the next victim)."""
        return self.keys_lru_first().index(key)

    def add(self, key: str, size: int) -> None:
        self._entries[key] = Entry(key, size, self._entries[key].pins if key in self else 0)
        self._entries.move_to_end(key)

    def touch(self, key: str) -> None:
        self._entries.move_to_end(key)

    def remove(self, key: str) -> Entry | None:
        return self._entries.pop(key, None)

    def pin(self, key: str) -> None:
        self._entries[key].pins += 1
        self._entries.move_to_end(key)

    def unpin(self, key: str) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry.pins > 0:
            entry.pins -= 1

    def is_pinned(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.pins > 0

    def unevictable_bytes(self, exclude: frozenset[str] = frozenset()) -> int:
        """Bytes no eviction can free: pinned items and those in ``exclude``."""
        return sum(e.size for e in self._entries.values() if e.pins or e.key in exclude)

    def victims(self, incoming_size: int,
                exclude: frozenset[str] = frozenset()) -> list[str] | None:
        """Keys to evict, least recent first, so an item of ``incoming_size`` fits.

        Returns None when only pinned (or excluded) items stand in the way: the caller waits for
        an unpin. Raises DoesNotFit when the item alone is over the byte capacity.
        """
        if self.capacity_bytes is not None and incoming_size > self.capacity_bytes:
            raise DoesNotFit(f"{incoming_size} bytes exceed the whole capacity of "
                             f"{self.capacity_bytes} bytes")
        total, count = self.total_bytes, len(self._entries)
        chosen: list[str] = []
        for entry in self._entries.values():
            if self._fits(total, count, incoming_size):
                return chosen
            if entry.pins or entry.key in exclude:
                continue
            chosen.append(entry.key)
            total -= entry.size
            count -= 1
        return chosen if self._fits(total, count, incoming_size) else None

    def _fits(self, total: int, count: int, incoming: int) -> bool:
        if self.capacity_bytes is not None and total + incoming > self.capacity_bytes:
            return False
        return self.capacity_count is None or count + 1 <= self.capacity_count

    def over_budget(self, exclude: frozenset[str] = frozenset()) -> list[str]:
        """Keys to evict, least recent first, to bring the bytes within capacity again (after
        an item's size grew to what it measured); pinned and excluded items stay."""
        if self.capacity_bytes is None:
            return []
        total = self.total_bytes
        chosen: list[str] = []
        for entry in self._entries.values():
            if total <= self.capacity_bytes:
                break
            if entry.pins or entry.key in exclude:
                continue
            chosen.append(entry.key)
            total -= entry.size
        return chosen
