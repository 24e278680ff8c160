"""Copies of inference components placed on a variant's instances by resources
(emulator/hosting/placement.py)."""

from __future__ import annotations

from emulator.hosting.placement import BINPACK, SPREAD, Demand, Reservation, place

CORE = Reservation(cpus=1, memory_mib=1024)


def test_spread_evens_copies_and_binpack_fills_an_instance_first() -> None:
    # ml.m5.xlarge: 4 vCPUs, 16 GiB; two instances.
    assert place("ml.m5.xlarge", 2, [Demand("a", 4, CORE, SPREAD)]) == {"a": [2, 2]}
    assert place("ml.m5.xlarge", 2, [Demand("a", 4, CORE, BINPACK)]) == {"a": [4, 0]}


def test_what_fits_nowhere_stays_pending_and_older_components_go_first() -> None:
    two_cores = Reservation(cpus=2, memory_mib=1024)
    placed = place("ml.m5.large", 2, [Demand("old", 3, CORE, BINPACK),
                                      Demand("new", 1, two_cores)])
    assert placed == {"old": [2, 1], "new": [0, 0]}  # 1 core free on the second: not 2


def test_memory_and_accelerators_bound_copies_too() -> None:
    # ml.g5.12xlarge: 4 GPUs, 192 GiB; a copy of one GPU each: 4 copies, the fifth pending.
    gpu = Reservation(cpus=1, accelerators=1, memory_mib=8192)
    assert sum(place("ml.g5.12xlarge", 1, [Demand("g", 5, gpu)])["g"]) == 4
    # ml.m5.large: 8 GiB; 3 GiB copies: 2 fit.
    assert place("ml.m5.large", 1, [Demand("m", 3, Reservation(memory_mib=3072))]) == {"m": [2]}


def test_an_unknown_instance_type_limits_nothing() -> None:
    assert place("ml.unknown.xlarge", 2, [Demand("a", 3, CORE)]) == {"a": [2, 1]}
    assert place("ml.m5.large", 0, [Demand("a", 3, CORE)]) == {"a": []}
