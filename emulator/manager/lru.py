"""A pure least-recently-used index with byte, GPU-byte and count capacities and pins. No I/O.

Each entry has two sizes: its bytes of memory and its bytes of GPU memory (0 for a model that
holds none); an item fits when every capacity holds with it.

Why not ``cachetools.LRUCache``: it evicts synchronously inside ``__setitem__`` and knows no pins,
while here eviction is an async unload in Triton that must skip models serving requests. The index
only *chooses* victims; the model manager carries the evictions out.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


class DoesNotFit(Exception):
    """The item is larger than the whole capacity: no eviction can make room."""

    def __init__(self, message: str, gpu: bool = False) -> None:
        super().__init__(message)
        self.gpu = gpu  # the GPU capacity is the one exceeded


@dataclass
class Entry:
    key: str
    size: int
    pins: int = 0
    gpu: int = 0  # bytes of GPU memory


class LruIndex:
    def __init__(self, capacity_bytes: int | None = None, capacity_count: int | None = None,
                 capacity_gpu_bytes: int | None = None):
        self.capacity_bytes = capacity_bytes
        self.capacity_count = capacity_count
        self.capacity_gpu_bytes = capacity_gpu_bytes
        self._entries: OrderedDict[str, Entry] = OrderedDict()  # least recent first

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self._entries.values())

    @property
    def total_gpu_bytes(self) -> int:
        return sum(e.gpu for e in self._entries.values())

    def get(self, key: str) -> Entry | None:
        return self._entries.get(key)

    def keys_lru_first(self) -> list[str]:
        return list(self._entries)

    def position(self, key: str) -> int:
        """0 for the least recently used (the next victim)."""
        return self.keys_lru_first().index(key)

    def add(self, key: str, size: int, gpu: int = 0) -> None:
        self._entries[key] = Entry(key, size, self._entries[key].pins if key in self else 0, gpu)
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

    def victims(self, incoming_size: int, exclude: frozenset[str] = frozenset(),
                incoming_gpu: int = 0) -> list[str] | None:
        """Keys to evict, least recent first, so an item of ``incoming_size`` bytes (and
        ``incoming_gpu`` bytes of GPU memory) fits.

        Returns None when only pinned (or excluded) items stand in the way: the caller waits for
        an unpin. Raises DoesNotFit when the item alone is over the byte or GPU-byte capacity.
        """
        if self.capacity_bytes is not None and incoming_size > self.capacity_bytes:
            raise DoesNotFit(f"{incoming_size} bytes exceed the whole capacity of "
                             f"{self.capacity_bytes} bytes")
        if self.capacity_gpu_bytes is not None and incoming_gpu > self.capacity_gpu_bytes:
            raise DoesNotFit(f"{incoming_gpu} bytes of GPU memory exceed the whole GPU "
                             f"capacity of {self.capacity_gpu_bytes} bytes", gpu=True)
        total, gpu, count = self.total_bytes, self.total_gpu_bytes, len(self._entries)
        chosen: list[str] = []
        for entry in self._entries.values():
            over = self._over(total + incoming_size, gpu + incoming_gpu, count + 1)
            if not any(over):
                return chosen
            if entry.pins or entry.key in exclude or not self._helps(entry, over):
                continue
            chosen.append(entry.key)
            total -= entry.size
            gpu -= entry.gpu
            count -= 1
        return None if any(self._over(total + incoming_size, gpu + incoming_gpu, count + 1)) \
            else chosen

    def _over(self, total: int, gpu: int, count: int) -> tuple[bool, bool, bool]:
        """Which capacities these totals exceed: (bytes, GPU bytes, count)."""
        return (self.capacity_bytes is not None and total > self.capacity_bytes,
                self.capacity_gpu_bytes is not None and gpu > self.capacity_gpu_bytes,
                self.capacity_count is not None and count > self.capacity_count)

    @staticmethod
    def _helps(entry: Entry, over: tuple[bool, bool, bool]) -> bool:
        """Would evicting ``entry`` bring an exceeded capacity down? (A model that holds no GPU
        memory is not unloaded to make room on the GPU.)"""
        over_bytes, over_gpu, over_count = over
        return over_count or (over_bytes and entry.size > 0) or (over_gpu and entry.gpu > 0)

    def over_budget(self, exclude: frozenset[str] = frozenset()) -> list[str]:
        """Keys to evict, least recent first, to bring the bytes and GPU bytes within capacity
        again (after an item's sizes grew to what it measured); pinned and excluded items
        stay. The count is not looked at: it cannot grow by measuring."""
        total, gpu = self.total_bytes, self.total_gpu_bytes
        chosen: list[str] = []
        for entry in self._entries.values():
            over = self._over(total, gpu, 0)
            if not any(over):
                break
            if entry.pins or entry.key in exclude or not self._helps(entry, over):
                continue
            chosen.append(entry.key)
            total -= entry.size
            gpu -= entry.gpu
        return chosen
