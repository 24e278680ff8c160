from __future__ import annotations

import pytest

from emulator.manager.lru import DoesNotFit, LruIndex


def test_victims_are_least_recently_used_first() -> None:
    index = LruIndex(capacity_bytes=30)
    for key in "abc":
        index.add(key, 10)
    index.touch("a")  # order now b, c, a
    assert index.victims(10) == ["b"]
    assert index.victims(20) == ["b", "c"]


def test_pinned_and_excluded_items_are_never_chosen() -> None:
    index = LruIndex(capacity_bytes=30)
    for key in "abc":
        index.add(key, 10)
    index.pin("b")  # pinning also makes it most recent: order a, c, b
    assert index.victims(20, exclude=frozenset({"a"})) is None  # only c is evictable: not enough
    assert index.victims(10, exclude=frozenset({"a"})) == ["c"]
    index.unpin("b")
    assert index.victims(30) == ["a", "c", "b"]


def test_count_capacity() -> None:
    index = LruIndex(capacity_count=2)
    index.add("a", 1)
    assert index.victims(1) == []
    index.add("b", 1)
    assert index.victims(1) == ["a"]


def test_item_larger_than_capacity_does_not_fit() -> None:
    with pytest.raises(DoesNotFit):
        LruIndex(capacity_bytes=5).victims(6)


def test_unlimited_index_never_evicts() -> None:
    index = LruIndex()
    for i in range(100):
        index.add(str(i), 10**9)
    assert index.victims(10**12) == []
    assert index.position("0") == 0
