"""What an inference component copy's utilization is normalized against, and the instance's
reservation figures (``emulator.hosting.copy_utilization``, ``component_instances``)."""

from __future__ import annotations

import os

import pytest

from emulator import instance_types
from emulator.hosting.component_instances import InstanceLoad, figures
from emulator.hosting.copy_utilization import limits_of
from emulator.hosting.placement import Reservation

GIB = 1024**3


def test_a_copy_is_normalized_against_its_reservation() -> None:
    limits = limits_of(Reservation(cpus=1.5, memory_mib=1024), "ml.m5.xlarge")
    assert (limits.cpus, limits.cpu_source) == (1.5, "reservation")
    assert (limits.memory_bytes, limits.memory_source) == (GIB, "reservation")
    assert limits.gpu_memory_bytes is None  # a CPU type


def test_without_a_cpu_reservation_the_limit_is_the_instance_types_then_the_machines() -> None:
    assert limits_of(Reservation(memory_mib=512), "ml.m5.xlarge").cpus == 4
    unknown = limits_of(Reservation(memory_mib=512), "ml.unknown.large")
    assert (unknown.cpus, unknown.cpu_source) == (os.cpu_count(), "this machine")


def test_a_gpu_copys_memory_limit_is_its_reserved_devices() -> None:
    known = instance_types.lookup("ml.g5.12xlarge")
    assert known is not None and known.gpus == 4
    limits = limits_of(Reservation(cpus=1, accelerators=2, memory_mib=1024), "ml.g5.12xlarge")
    assert limits.accelerators == 2
    assert limits.gpu_memory_bytes == int(2 * known.gpu_memory_gib * GIB)


def test_an_instance_reports_what_its_copies_reserve_and_use() -> None:
    load = InstanceLoad()
    load.reserve(Reservation(cpus=1.5, memory_mib=1024), 2)
    load.measured(120.0, GIB)  # 1.2 cores
    load.measured(None, GIB)  # a copy's first sample: no CPU figure yet
    found = figures("ml.m5.xlarge", load)
    assert found["CPUReservation"] == pytest.approx(75.0)
    assert found["MemoryReservation"] == pytest.approx(12.5)
    assert found["CPUUtilization"] == pytest.approx(120.0)
    assert found["CPUUtilizationNormalized"] == pytest.approx(30.0)
    assert found["MemoryUtilization"] == pytest.approx(12.5)
    assert "GPUReservation" not in found
    assert figures("ml.unknown.large", load) == {}  # nothing to take a percentage of
