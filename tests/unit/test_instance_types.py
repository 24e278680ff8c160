"""An endpoint's memory budget comes from its InstanceType.

The factory builds a real instance (launcher, Triton client, model manager) without starting
it: the budget its model manager evicts by is what is checked.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import botocore.session
import pytest

from emulator import instance_types
from emulator.hosting.factory import InstanceFactory
from emulator.hosting.instance import Instance
from emulator.hosting.spec import ContainerSpec, EndpointSpec, VariantSpec
from emulator.metrics import EndpointMetrics
from emulator.settings import InvalidSettings, Settings

GIB = 1024**3


def _enum() -> list[str]:
    model = botocore.session.get_session().get_service_model("sagemaker")
    return list(model.shape_for("ProductionVariantInstanceType").enum)


def _build(tmp_path: Path, variant_type: str | None, **settings: object) -> Instance:
    factory = InstanceFactory(Settings.from_env(env={}, cache_dir=tmp_path, **settings))
    variant = VariantSpec("AllTraffic", ContainerSpec(str(tmp_path / "store")),
                          instance_type=variant_type)
    endpoint = EndpointSpec("e", (variant,))
    instance = asyncio.run(factory.build(endpoint, variant, "i-1", tmp_path / "i-1",
                                         EndpointMetrics("e", "AllTraffic")))
    assert isinstance(instance, Instance)
    return instance


@pytest.mark.parametrize("name,memory_gib,gpu_bytes", [
    ("ml.m5.xlarge", 16, 0), ("ml.m5.large", 8, 0), ("ml.c5.9xlarge", 72, 0),
    ("ml.c4.8xlarge", 60, 0), ("ml.r5.2xlarge", 64, 0), ("ml.t2.medium", 4, 0),
    ("ml.g4dn.xlarge", 16, 16 * GIB), ("ml.g5.12xlarge", 192, 4 * 24 * GIB),
    ("ml.p4d.24xlarge", 1152, 8 * 40 * GIB), ("ml.inf2.xlarge", 16, 0),
    ("ml.g7e.12xlarge", 512, 2 * 96 * GIB), ("ml.g7.48xlarge", 768, 8 * 32 * GIB),
    ("ml.p6-b200.48xlarge", 2048, 8 * 179 * GIB), ("ml.p6-b300.48xlarge", 4096, 8 * 268 * GIB),
    ("ml.p6e-gb200.36xlarge", 960, 4 * 185 * GIB)])
def test_the_table_has_ec2s_figures(name: str, memory_gib: float, gpu_bytes: int) -> None:
    known = instance_types.lookup(name)
    assert known is not None
    assert known.memory_bytes == memory_gib * GIB
    assert known.gpu_memory_bytes == gpu_bytes
    # The platform keeps its share [U]; the models get the rest.
    assert known.model_memory_bytes == int(memory_gib * GIB * (1 - instance_types.PLATFORM_SHARE))


def test_every_type_sagemaker_accepts_has_a_row_with_its_source() -> None:
    accepted = set(_enum())
    assert set(instance_types.known_names()) <= accepted
    missing = sorted(name for name in accepted if instance_types.lookup(name) is None)
    assert missing == [], f"add these botocore types to emulator/instance_types.py: {missing}"
    for name in accepted:
        row = instance_types.lookup(name)
        assert row is not None and row.vcpus > 0 and row.memory_gib > 0
        assert row.source.startswith("https://docs.aws.amazon.com/ec2/latest/instancetypes/")
        # An accelerated type says how many accelerators it has and their memory.
        assert (row.accelerators > 0) == (row.accelerator_memory_bytes > 0), name
    assert instance_types.lookup("ml.m5.hugeish") is None
    assert instance_types.lookup("ml.z9.xlarge") is None


@pytest.mark.parametrize("name,gpus,accelerators", [
    ("ml.m5.xlarge", 0, 0), ("ml.g5.xlarge", 1, 1), ("ml.g5.12xlarge", 4, 4),
    ("ml.inf2.24xlarge", 0, 6), ("ml.trn2.48xlarge", 0, 16)])
def test_gpus_are_the_nvidia_devices_and_accelerators_every_kind(
        name: str, gpus: int, accelerators: int) -> None:
    row = instance_types.lookup(name)
    assert row is not None and (row.gpus, row.accelerators) == (gpus, accelerators)


def test_an_endpoint_with_an_instance_type_gets_its_budget(tmp_path: Path) -> None:
    instance = _build(tmp_path, "ml.m5.xlarge")
    want = instance_types.lookup("ml.m5.xlarge").model_memory_bytes  # type: ignore[union-attr]
    assert instance.manager.memory.capacity_bytes == want
    described = instance.describe()
    assert described["MemoryBudgetBytes"] == want
    assert (described["InstanceType"], described["MemoryBudgetSource"]) == (
        "ml.m5.xlarge", "ml.m5.xlarge")


def test_memory_budget_overrides_the_instance_type(tmp_path: Path) -> None:
    instance = _build(tmp_path, "ml.m5.xlarge", memory_budget="1GiB")
    assert instance.manager.memory.capacity_bytes == GIB
    assert instance.describe()["MemoryBudgetSource"] == "--memory-budget"


def test_the_default_endpoint_takes_instance_type_from_the_flag(tmp_path: Path) -> None:
    instance = _build(tmp_path, None, instance_type="ml.c5.large")
    assert instance.manager.memory.capacity_bytes == int(4 * GIB * 0.9)
    assert _build(tmp_path / "none", None).manager.memory.capacity_bytes is None  # as before


def test_a_budget_beyond_this_machine_is_kept_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "emulator.hosting.factory")
    big = instance_types.lookup("ml.p5.48xlarge")
    assert big is not None and big.memory_bytes > instance_types.machine_memory_bytes()
    instance = _build(tmp_path, "ml.p5.48xlarge")
    assert instance.manager.memory.capacity_bytes == big.model_memory_bytes  # never shrunk
    assert instance.describe()["MemoryBudgetBeyondMachine"] is True
    assert "more than this machine's memory" in caplog.text
    assert "kept as bookkeeping" in caplog.text


def test_a_type_without_figures_gets_no_budget_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    unknown = "ml.m9.xlarge"  # a type botocore does not list yet
    caplog.set_level(logging.WARNING, "emulator.hosting.factory")
    instance = _build(tmp_path, unknown)
    assert instance.manager.memory.capacity_bytes is None
    assert f"does not know the memory of {unknown}" in caplog.text
    assert "--memory-budget" in caplog.text


def test_instance_type_flag_is_checked() -> None:
    with pytest.raises(InvalidSettings, match="--instance-type 'ml.m5.huge'.*--memory-budget"):
        Settings.from_env(env={"MME_INSTANCE_TYPE": "ml.m5.huge"})
    assert Settings.from_env(env={}, instance_type="ml.g5.xlarge").instance_type == "ml.g5.xlarge"
