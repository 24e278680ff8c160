"""The router: per request, which production variant and then which instance serves it.

SageMaker documents the outline (TargetVariant, else the variants' weights; a multi-model
endpoint "routes traffic to the instance where the model is loaded") but not the algorithm.
Every choice it leaves open is made here, in one place, and marked [U]:

Variant
  ``TargetVariant`` names it; otherwise a weighted random draw over the variants (a variant of
  weight 0 gets no unnamed traffic). The generator is seedable (``--routing-seed``) so tests and
  benchmarks are exact.

Instance, multi-model [U]
  1. Instances that have the TargetModel loaded: the one with the fewest requests in flight --
     unless every one of them has ``SATURATED_IN_FLIGHT`` or more in flight and another instance
     is free of traffic enough to take a copy (then that one loads it too: a hot model spreads).
  2. An instance already downloading or loading it (so one load serves every waiting request).
  3. Otherwise the instance with the most free room in its memory budget, preferring one that
     has the artifact on its disk, then fewer requests in flight, then a stable hash of the
     TargetModel (rendezvous hashing) so a model keeps landing on the same instance.

Instance, single-model
  The fewest requests in flight; ties go round-robin so sequential traffic spreads too
  (``LeastOutstandingRequests``: also an inference component's default routing strategy, beside
  ``RandomChoice``); a variant whose RoutingConfig says RANDOM draws uniformly instead, and
  PREFIX_AWARE and stateful sessions choose before either (``hosting.affinity``).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

# [U] Requests in flight on every holder of a model before a copy is loaded elsewhere.
SATURATED_IN_FLIGHT = 8


class Busy(Protocol):
    """A unit that a strategy can choose: one that counts its requests in flight."""

    @property
    def in_flight(self) -> int: ...


class Member(Busy, Protocol):
    """A unit known by its id (prefix-aware routing hashes it)."""

    @property
    def id(self) -> str: ...


class Routable(Protocol):
    id: str
    in_flight: int

    def has_loaded(self, target: str) -> bool: ...

    def is_bringing_in(self, target: str) -> bool: ...

    def has_on_disk(self, target: str) -> bool: ...

    def free_fraction(self) -> float: ...


class WeightedChoice(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def weight(self) -> float: ...


V = TypeVar("V", bound=WeightedChoice)
Inst = TypeVar("Inst", bound=Routable)
Unit = TypeVar("Unit", bound=Busy)


class LeastOutstandingRequests:
    """The unit with the fewest requests in flight; ties in turn, so sequential traffic spreads
    too (RoutingStrategy LEAST_OUTSTANDING_REQUESTS)."""

    def __init__(self) -> None:
        self._turn = itertools.count()

    def choose(self, units: Sequence[Unit]) -> Unit:
        fewest = min(u.in_flight for u in units)
        idle = [u for u in units if u.in_flight == fewest]
        return idle[next(self._turn) % len(idle)]


class RandomChoice:
    """A uniform draw among the units (RoutingStrategy RANDOM); seedable, so tests are exact."""

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def choose(self, units: Sequence[Unit]) -> Unit:
        return self._random.choice(units)


class Router:
    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)
        self._single_model = LeastOutstandingRequests()

    def variant(self, variants: Sequence[V]) -> V | None:
        """A weighted draw; None when every weight is 0."""
        if len(variants) == 1:  # most endpoints: no draw needed
            return variants[0] if variants[0].weight > 0 else None
        # Shares of the heaviest weight: weights near a float's limit must not sum to infinity
        # (every draw would then land on the last variant).
        heaviest = max(v.weight for v in variants)
        if not heaviest > 0:
            return None
        shares = [v.weight / heaviest for v in variants]
        point = self._random.uniform(0, sum(shares))
        for v, share in zip(variants, shares, strict=True):
            point -= share
            if point < 0 and share > 0:
                return v
        return next(v for v in reversed(variants) if v.weight > 0)

    def random_instance(self, instances: Sequence[Unit]) -> Unit:
        """RoutingStrategy RANDOM among a single-model variant's instances: a uniform draw from
        the router's (seedable) generator."""
        return self._random.choice(instances)

    def instance(self, instances: Sequence[Inst], target: str | None) -> Inst:
        if len(instances) == 1:
            return instances[0]
        if target is None:
            return self._single_model.choose(instances)
        holders = [i for i in instances if i.has_loaded(target)]
        if holders:
            best = min(holders, key=lambda i: i.in_flight)
            if best.in_flight < SATURATED_IN_FLIGHT:
                return best
            others = [i for i in instances if i not in holders
                      and i.in_flight < SATURATED_IN_FLIGHT]
            return self._placement(others, target) if others else best
        loading = [i for i in instances if i.is_bringing_in(target)]
        if loading:
            return min(loading, key=lambda i: i.in_flight)
        return self._placement(instances, target)

    @staticmethod
    def _placement(instances: Sequence[Inst], target: str) -> Inst:
        return max(instances, key=lambda i: (
            round(i.free_fraction(), 6), i.has_on_disk(target), -i.in_flight,
            _rendezvous(target, i.id)))


def _rendezvous(target: str, instance_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{target}\0{instance_id}".encode(),
                                          digest_size=8).digest(), "big")
