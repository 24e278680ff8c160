"""ManagedInstanceScaling's instance count for a variant's copies (emulator/hosting/
managed_instances.py)."""

from __future__ import annotations

from typing import Any

from emulator.hosting.managed_instances import instance_count
from emulator.hosting.placement import BINPACK, Demand, Reservation

ONE_CORE = Reservation(cpus=1, memory_mib=1024)


def _variant(minimum: int, maximum: int, current: int = 1, status: str = "ENABLED",
             instance_type: str = "ml.m5.xlarge") -> dict[str, Any]:
    return {"VariantName": "AllTraffic", "InstanceType": instance_type,
            "InitialInstanceCount": current, "ManagedInstanceScaling": {
                "Status": status, "MinInstanceCount": minimum, "MaxInstanceCount": maximum}}


def test_the_fewest_instances_that_hold_every_copy() -> None:
    # ml.m5.xlarge: 4 vCPUs; 9 one-core copies need 3 instances
    assert instance_count(_variant(1, 8), [Demand("a", 9, ONE_CORE)], 16) == 3
    assert instance_count(_variant(1, 8), [Demand("a", 9, ONE_CORE, BINPACK)], 16) == 3
    # two components: 5 + 4 one-core copies still fit 3 instances' 12 cores
    assert instance_count(_variant(1, 8), [Demand("a", 5, ONE_CORE),
                                           Demand("b", 4, ONE_CORE)], 16) == 3


def test_within_min_and_max() -> None:
    assert instance_count(_variant(0, 8), [], 16) == 0  # no copy: down to Min 0
    assert instance_count(_variant(2, 8), [Demand("a", 1, ONE_CORE)], 16) == 2
    # Max 2 holds 8 copies; the ninth stays pending
    assert instance_count(_variant(1, 2), [Demand("a", 9, ONE_CORE)], 16) == 2
    # the emulator's bound on instances per endpoint caps Max
    assert instance_count(_variant(1, 20), [Demand("a", 100, ONE_CORE)], 16) == 16


def test_not_enabled_leaves_the_count_to_the_user() -> None:
    assert instance_count(_variant(1, 8, status="DISABLED"), [Demand("a", 9, ONE_CORE)],
                          16) is None
    assert instance_count({"VariantName": "v", "InitialInstanceCount": 1},
                          [Demand("a", 9, ONE_CORE)], 16) is None


def test_a_type_the_table_does_not_know_needs_one_instance_for_any_copies() -> None:
    variant = _variant(0, 4, instance_type="ml.unknown.xlarge")
    assert instance_count(variant, [Demand("a", 9, ONE_CORE)], 16) == 1
    assert instance_count(variant, [], 16) == 0
