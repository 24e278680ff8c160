"""PREFIX_AWARE routing: calls that share a prefix go to the same member of a serving group (an
instance of a variant, a copy of an inference component) until it is busy.

AWS documents the outline (botocore's ProductionVariantRoutingConfig and
PrefixAwareRoutingConfig): the first ``PrefixLength`` bytes of the body (and PrefixAwareId, when
the caller gives one) choose the member; once the member has ``ConcurrencyThreshold`` calls in
flight a call goes to another; prefix-aware routing applies only when two or more members can
serve. The algorithm is the emulator's [U]:

- the member is chosen by rendezvous (highest-random-weight) hashing of the prefix key over the
  members' ids, so a prefix keeps its member while members come and go, and only the prefixes
  of a member that leaves move;
- a call whose member has reached the threshold spills to the member with the fewest calls in
  flight among those under it (ties to the next in the prefix's rendezvous order); when every
  member has reached it, to the member with the fewest in flight.

The choice hashes the prefix once (CRC-32) and mixes that with each member's cached id hash
(SplitMix64): ``mme bench routing`` and ``tests/unit/test_prefix_routing.py`` print its cost.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from typing import TypeVar

from emulator.contract.body import Body
from emulator.contract.routing_config import PrefixAwareConfig
from emulator.hosting.routing import Member

_MASK = (1 << 64) - 1

# Why a member was chosen (the X-Mme-Routed-By header's value).
PREFIX = "PREFIX_AWARE"
SPILLED = "PREFIX_AWARE; spilled"


M = TypeVar("M", bound=Member)


# A member id's hash, kept once computed (ids are few: instances and copies).
_ID_HASHES: dict[str, int] = {}
_ID_HASHES_MAX = 4096


def _id_hash(member_id: str) -> int:
    found = _ID_HASHES.get(member_id)
    if found is None:
        found = int.from_bytes(hashlib.blake2b(member_id.encode(), digest_size=8).digest(),
                               "big")
        if len(_ID_HASHES) >= _ID_HASHES_MAX:
            _ID_HASHES.clear()
        _ID_HASHES[member_id] = found
    return found


def _mix(value: int) -> int:
    """SplitMix64's finalizer: every bit of ``value`` moves every bit of the result."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)


def prefix_key(body: bytes | Body, prefix_length: int, prefix_aware_id: str | None) -> int:
    """The 64-bit key of a call's prefix: its first ``prefix_length`` body bytes, and its
    PrefixAwareId (calls with the same prefix and different ids are told apart). CRC-32 (zlib,
    in C: a fraction of a microsecond per KiB), spread over 64 bits by ``_mix``."""
    head = (body.head(prefix_length) if isinstance(body, Body)
            else memoryview(body)[:prefix_length])
    crc = zlib.crc32(head)
    if prefix_aware_id is not None:
        crc = zlib.crc32(b"\0" + prefix_aware_id.encode(), crc) | 1 << 32
    return _mix(crc)


class PrefixAware:
    """The PREFIX_AWARE choice among a group's members."""

    __slots__ = ("config",)

    def __init__(self, config: PrefixAwareConfig) -> None:
        self.config = config

    def choose(self, members: Sequence[M], body: bytes | Body,
               prefix_aware_id: str | None = None) -> tuple[M, str]:
        """The member for the call and why (``PREFIX`` or ``SPILLED``)."""
        if len(members) == 1:
            return members[0], PREFIX
        key = prefix_key(body, self.config.prefix_length, prefix_aware_id)
        return self.choose_by_key(members, key)

    def choose_by_key(self, members: Sequence[M], key: int) -> tuple[M, str]:
        threshold = self.config.concurrency_threshold
        best: M | None = None
        best_score = -1
        hashes = _ID_HASHES
        for member in members:
            member_hash = hashes.get(member.id)
            if member_hash is None:
                member_hash = _id_hash(member.id)
            score = key ^ member_hash  # _mix, inlined: this loop is the choice's cost
            score = (score ^ (score >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
            score = (score ^ (score >> 27)) * 0x94D049BB133111EB & _MASK
            score ^= score >> 31
            if score > best_score:
                best, best_score = member, score
        assert best is not None
        if best.in_flight < threshold:
            return best, PREFIX
        under = [m for m in members if m.in_flight < threshold]
        pool = under or list(members)
        fewest = min(m.in_flight for m in pool)
        idle = [m for m in pool if m.in_flight == fewest]
        if len(idle) > 1:  # ties: the next in the prefix's rendezvous order
            idle.sort(key=lambda m: _mix(key ^ _id_hash(m.id)), reverse=True)
        return idle[0], SPILLED
