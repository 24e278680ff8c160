"""The router's documented choices ([U] in emulator/hosting/routing.py), on plain stand-ins."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from emulator.hosting.routing import SATURATED_IN_FLIGHT, Router


@dataclass
class Choice:
    name: str
    weight: float


@dataclass
class Box:
    """An instance as the router sees it."""

    id: str
    loaded: set[str] = field(default_factory=set)
    loading: set[str] = field(default_factory=set)
    on_disk: set[str] = field(default_factory=set)
    free: float = 1.0
    in_flight: int = 0

    def has_loaded(self, target: str) -> bool:
        return target in self.loaded

    def is_bringing_in(self, target: str) -> bool:
        return target in self.loading

    def has_on_disk(self, target: str) -> bool:
        return target in self.on_disk

    def free_fraction(self) -> float:
        return self.free


def draws(seed: int, variants: list[Choice], count: int = 4000) -> list[str]:
    router = Router(seed=seed)
    return [router.variant(variants).name for _ in range(count)]  # type: ignore[union-attr]


def test_weighted_variants_are_exact_for_a_seed_and_follow_the_weights() -> None:
    variants = [Choice("A", 3), Choice("B", 1), Choice("Z", 0)]
    assert draws(11, variants) == draws(11, variants)  # a seed repeats the run exactly
    counted = Counter(draws(11, variants))
    assert counted["Z"] == 0
    assert 0.72 < counted["A"] / 4000 < 0.78  # 3:1, about 10 standard deviations of room
    assert Router(seed=1).variant([Choice("A", 0)]) is None


def test_a_loaded_model_goes_to_its_least_busy_holder() -> None:
    a, b, c = Box("i-1", loaded={"m"}, in_flight=3), Box("i-2", loaded={"m"}, in_flight=1), \
        Box("i-3", free=1.0)
    assert Router().instance([a, b, c], "m") is b


def test_a_hot_model_spreads_only_when_every_holder_is_saturated() -> None:
    holder = Box("i-1", loaded={"m"}, in_flight=SATURATED_IN_FLIGHT - 1)
    spare = Box("i-2")
    assert Router().instance([holder, spare], "m") is holder
    holder.in_flight = SATURATED_IN_FLIGHT
    assert Router().instance([holder, spare], "m") is spare
    spare.in_flight = SATURATED_IN_FLIGHT  # nowhere better: stay on the holder
    assert Router().instance([holder, spare], "m") is holder


def test_a_model_being_loaded_is_waited_for_not_loaded_twice() -> None:
    loading, empty = Box("i-1", loading={"m"}, free=0.0), Box("i-2", free=1.0)
    assert Router().instance([loading, empty], "m") is loading


def test_a_miss_goes_to_the_most_free_room_then_to_its_disk_copy_then_stably() -> None:
    full, roomy = Box("i-1", free=0.0, on_disk={"m"}), Box("i-2", free=0.5)
    assert Router().instance([full, roomy], "m") is roomy
    x, y = Box("i-1", free=0.5), Box("i-2", free=0.5, on_disk={"m"})
    assert Router().instance([x, y], "m") is y
    p, q, r = Box("i-1"), Box("i-2"), Box("i-3")
    chosen = {t: Router().instance([p, q, r], t).id for t in (f"t{k}" for k in range(30))}
    assert chosen == {t: Router().instance([r, q, p], t).id for t in chosen}  # order-free
    assert len(set(chosen.values())) == 3  # and spread over the instances


def test_single_model_traffic_goes_round_robin_over_idle_instances() -> None:
    boxes = [Box("i-1"), Box("i-2"), Box("i-3")]
    router = Router()
    assert Counter(router.instance(boxes, None).id for _ in range(9)) == \
        {"i-1": 3, "i-2": 3, "i-3": 3}
    boxes[0].in_flight = boxes[1].in_flight = 2
    assert router.instance(boxes, None).id == "i-3"
