"""UpdateEndpoint of an endpoint for inference components, without Triton (fake copies, a real
SQLite store): copies that cannot start on the new instances put the endpoint back on its
previous config; what is refused before anything changes.

Over HTTP with real copies: tests/integration/test_component_endpoint_update.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from emulator.contract.control_plane import ControlPlaneError
from emulator.control import component_endpoint_updates as updates
from emulator.control.inference_components import InferenceComponents
from emulator.control.state_db import ControlStore, Deployment, EndpointRecord
from emulator.hosting.component_copies import CopyTarget

SPEC = {"Container": {"Image": "img", "ArtifactUrl": "file:///m.tar.gz"},
        "ComputeResourceRequirements": {"MinMemoryRequiredInMb": 8192}}


def _arn(kind: str, name: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:123456789012:{kind}/{name.lower()}"


def _variants(instance_type: str, variant: str = "AllTraffic") -> list[dict[str, Any]]:
    return [{"VariantName": variant, "InstanceType": instance_type, "InitialInstanceCount": 1}]


class Fixture:
    def __init__(self, tmp_path: Path) -> None:
        self.store = ControlStore(tmp_path / "control.sqlite3")
        self.store.add_endpoint(EndpointRecord(
            name="ep", created=1.0, modified=1.0, status="InService",
            current=Deployment(config_name="old", variants=_variants("ml.m5.xlarge"), spec={})))
        self.components = InferenceComponents(self.store, _arn, clock=lambda: 10.0)
        self.components.apply_copies = self._apply
        self.applied: list[str | None] = []

    async def _apply(self, endpoint: str, component: str, target: CopyTarget | None) -> None:
        kind = target.variant.instance_type if target is not None else None
        self.applied.append(kind)
        if kind == "ml.c5.2xlarge":
            raise RuntimeError("the copy's container exited")

    async def settle(self) -> None:
        while self.components.lifecycle.tasks:
            await asyncio.gather(*self.components.lifecycle.tasks.values())

    def transition(self, name: str, expected: tuple[str, ...] | None, status: str,
                   **changes: Any) -> None:
        """As the service's: the endpoint's record moved to ``status`` with ``changes``."""
        record = self.store.get_endpoint(name)
        assert record is not None and (expected is None or record.status in expected)
        record.status = status
        for key, value in changes.items():
            setattr(record, key, value)
        self.store.save_endpoint(record)

    def endpoint(self) -> EndpointRecord:
        record = self.store.get_endpoint("ep")
        assert record is not None
        return record


async def _with_component(tmp_path: Path) -> Fixture:
    fixture = Fixture(tmp_path)
    await fixture.components.create({"InferenceComponentName": "ic", "EndpointName": "ep",
                                     "Specification": SPEC, "RuntimeConfig": {"CopyCount": 1}})
    await fixture.settle()
    return fixture


def test_copies_that_cannot_start_on_the_new_instances_put_the_endpoint_back(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        fixture = await _with_component(tmp_path)
        record = fixture.endpoint()
        new = Deployment(config_name="new", variants=_variants("ml.c5.2xlarge"), spec={})
        record.pending = updates.prepare(record, new, {}, fixture.components)
        fixture.transition("ep", None, "Updating", pending=record.pending)
        configured: list[str] = []
        await updates.run("ep", fixture.store.get_endpoint, fixture.transition,
                          fixture.components, lambda _name, d: configured.append(d.config_name))
        done = fixture.endpoint()
        # The new config's MetricsConfig while it was tried, the old one's again after.
        assert configured == ["new", "old"]
        assert (done.status, done.current.config_name, done.pending) == ("InService", "old", None)
        assert done.failure_reason is not None
        assert "ic: the copy's container exited" in done.failure_reason
        assert "endpoint config new failed and was rolled back" in done.failure_reason
        # The old type's copies were asked for again last (they never stopped).
        assert fixture.applied[-2:] == ["ml.c5.2xlarge", "ml.m5.xlarge"]
        described = await fixture.components.describe({"InferenceComponentName": "ic"})
        assert described["RuntimeConfig"]["PlacementStatus"] == [
            {"InstanceType": "ml.m5.xlarge", "CurrentCopyCount": 1}]

    asyncio.run(scenario())


def test_a_copy_that_no_longer_fits_or_a_component_in_progress_is_refused(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        fixture = await _with_component(tmp_path)
        small = Deployment(config_name="small", variants=_variants("ml.c5.large"), spec={})
        with pytest.raises(ControlPlaneError, match="does not fit on one ml.c5.large"):
            updates.prepare(fixture.endpoint(), small, {}, fixture.components)
        await fixture.components.update_runtime_config({
            "InferenceComponentName": "ic", "DesiredRuntimeConfig": {"CopyCount": 2}})
        new = Deployment(config_name="new", variants=_variants("ml.m5.2xlarge"), spec={})
        with pytest.raises(ControlPlaneError, match="inference component ic is Updating"):
            updates.prepare(fixture.endpoint(), new, {}, fixture.components)
        await fixture.settle()

    asyncio.run(scenario())


def test_retain_all_variant_properties_keeps_the_running_count_and_weight(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        fixture = await _with_component(tmp_path)
        record = fixture.endpoint()
        record.current.variants[0]["InitialInstanceCount"] = 3
        new = Deployment(config_name="new", spec={}, variants=[{
            **_variants("ml.m5.2xlarge")[0], "InitialVariantWeight": 0.5}])
        kept = updates.prepare(record, new, {"RetainAllVariantProperties": True,
                                             "ExcludeRetainedVariantProperties": [
                                                 {"VariantPropertyType": "DesiredWeight"}]},
                               fixture.components)
        assert kept.variants[0]["InitialInstanceCount"] == 3
        assert kept.variants[0]["InitialVariantWeight"] == 0.5
        assert kept.variants[0]["InstanceType"] == "ml.m5.2xlarge"

    asyncio.run(scenario())


class _Broken:
    """Components whose placement itself raises (a bug, a store error) on the first move."""

    def __init__(self) -> None:
        self.moves = 0

    def check_endpoint_move(self, endpoint: EndpointRecord,
                            variants: list[dict[str, Any]]) -> None:
        return None

    async def move_copies(self, endpoint_name: str) -> list[str]:
        self.moves += 1
        if self.moves == 1:
            raise RuntimeError("placement broke")
        return []


def test_an_update_whose_placement_raises_is_not_left_updating(tmp_path: Path) -> None:
    async def scenario() -> None:
        fixture = Fixture(tmp_path)
        broken = _Broken()
        new = Deployment(config_name="new", variants=_variants("ml.c5.2xlarge"), spec={})
        fixture.transition("ep", None, "Updating", pending=new)
        await updates.run("ep", fixture.store.get_endpoint, fixture.transition, broken,
                          lambda _name, _deployment: None)
        done = fixture.endpoint()
        assert (done.status, done.current.config_name) == ("InService", "old")
        assert done.failure_reason is not None and "placement broke" in done.failure_reason

    asyncio.run(scenario())
