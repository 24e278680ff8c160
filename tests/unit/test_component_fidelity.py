"""Inference components as AWS has them where the first build differed: a Create
with no copy refused, a Create whose copies cannot start ends Failed (an update's keeps the
old specification), StartupParameters' timeouts bound a copy's start,
ConcurrentRequestsPerCopy published while idle, and ManagedInstanceScaling's ScaleInPolicy.
No Triton: fake copies, a real SQLite store.

Over HTTP with real copies: tests/integration/test_inference_components.py (Failed) and
tests/integration/test_component_scaling.py (an idle component scaled in).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from emulator.clock import Clock
from emulator.contract import inference_components as rules
from emulator.contract.control_plane import ControlPlaneError
from emulator.control.inference_components import InferenceComponents
from emulator.control.state_db import ControlStore, Deployment, EndpointRecord
from emulator.hosting.component_copies import ComponentCopies, CopyStartTimeout, CopyTarget
from emulator.hosting.managed_instances import instance_count
from emulator.hosting.placement import Demand, Reservation
from emulator.hosting.spec import ContainerSpec, VariantSpec
from tests.support import wait_for_async

SPEC = {"Container": {"Image": "img", "ArtifactUrl": "file:///m.tar.gz"},
        "ComputeResourceRequirements": {"MinMemoryRequiredInMb": 1024}}


def _arn(kind: str, name: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:123456789012:{kind}/{name.lower()}"


def _parse(operation: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    return rules.parse_request(f"SageMaker.{operation}", json.dumps(params).encode())


# --- CreateInferenceComponent with CopyCount 0 ---------------------------------------------


def test_a_create_with_no_copy_is_refused_in_aws_words() -> None:
    with pytest.raises(ControlPlaneError) as raised:
        _parse("CreateInferenceComponent", {
            "InferenceComponentName": "ic", "EndpointName": "ep", "Specification": SPEC,
            "RuntimeConfig": {"CopyCount": 0}})
    assert raised.value.code == "ValidationException"
    assert raised.value.message == "Inference components copy count an integer larger than 0"
    # Scale to zero stays: an update to 0 copies is accepted.
    assert _parse("UpdateInferenceComponentRuntimeConfig", {
        "InferenceComponentName": "ic", "DesiredRuntimeConfig": {"CopyCount": 0}}) is not None
    assert _parse("UpdateInferenceComponent", {
        "InferenceComponentName": "ic", "RuntimeConfig": {"CopyCount": 0}}) is not None


# --- a Create whose copies cannot start ----------------------------------------------------


def _components(tmp_path: Path) -> InferenceComponents:
    store = ControlStore(tmp_path / "control.sqlite3")
    store.add_endpoint(EndpointRecord(
        name="ep", created=1.0, modified=1.0, status="InService",
        current=Deployment(config_name="ep", variants=[{
            "VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge",
            "InitialInstanceCount": 1}], spec={})))
    return InferenceComponents(store, _arn, clock=lambda: 10.0)


async def _create_until_done(components: InferenceComponents,
                             spec: dict[str, Any]) -> dict[str, Any]:
    await components.create({"InferenceComponentName": "ic", "EndpointName": "ep",
                             "Specification": spec, "RuntimeConfig": {"CopyCount": 2}})
    while components.lifecycle.tasks:
        await asyncio.gather(*components.lifecycle.tasks.values())
    return await components.describe({"InferenceComponentName": "ic"})


def test_a_create_whose_copies_cannot_start_ends_failed_with_the_reason(
        tmp_path: Path) -> None:
    components = _components(tmp_path)
    targets: list[CopyTarget | None] = []

    async def apply_copies(endpoint: str, component: str, target: CopyTarget | None) -> None:
        targets.append(target)
        raise RuntimeError("The primary container failed to start: model.onnx is missing")

    components.apply_copies = apply_copies
    described = asyncio.run(_create_until_done(components, SPEC))
    assert described["InferenceComponentStatus"] == "Failed"
    assert described["FailureReason"] == (
        "The inference component's copies failed to start: The primary container failed to "
        "start: model.onnx is missing")
    assert described["RuntimeConfig"]["CurrentCopyCount"] == 0
    assert targets and targets[0] is not None and targets[0].copies == 2


def test_an_update_whose_new_copies_cannot_start_keeps_the_old_specification(
        tmp_path: Path) -> None:
    components = _components(tmp_path)
    started: list[str] = []

    async def apply_copies(endpoint: str, component: str, target: CopyTarget | None) -> None:
        if target is not None and target.variant.container.model_data == "file:///new.tar.gz":
            raise RuntimeError("The primary container failed to start: no such file")
        if target is not None:
            started.append(target.variant.container.model_data)

    components.apply_copies = apply_copies

    async def run() -> dict[str, Any]:
        await _create_until_done(components, SPEC)
        new = {**SPEC, "Container": {**SPEC["Container"], "ArtifactUrl": "file:///new.tar.gz"}}
        await components.update({"InferenceComponentName": "ic", "Specification": new})
        while components.lifecycle.tasks:
            await asyncio.gather(*components.lifecycle.tasks.values())
        return await components.describe({"InferenceComponentName": "ic"})

    described = asyncio.run(run())
    assert described["InferenceComponentStatus"] == "InService"
    assert described["Specification"]["Container"]["ArtifactUrl"] == "file:///m.tar.gz"
    assert described["FailureReason"] == (
        "The update failed: the new specification's copies failed to start: The primary "
        "container failed to start: no such file. The inference component keeps its previous "
        "specification.")
    assert started and set(started) == {"file:///m.tar.gz"}


def test_the_startup_parameters_reach_the_copies(tmp_path: Path) -> None:
    components = _components(tmp_path)
    targets: list[CopyTarget] = []

    async def apply_copies(endpoint: str, component: str, target: CopyTarget | None) -> None:
        if target is not None:
            targets.append(target)

    components.apply_copies = apply_copies
    described = asyncio.run(_create_until_done(components, {**SPEC, "StartupParameters": {
        "ModelDataDownloadTimeoutInSeconds": 120,
        "ContainerStartupHealthCheckTimeoutInSeconds": 90}}))
    assert described["InferenceComponentStatus"] == "InService"
    assert targets[0].download_timeout_s == 120
    assert targets[0].variant.startup_timeout_s == 90


# --- StartupParameters' timeouts bound a copy's start ----------------------------------------


class Manager:
    def __init__(self) -> None:
        self.observers: list[Any] = []

    def add_observer(self, observer: Any) -> None:
        self.observers.append(observer)

    def emit(self, step: str) -> None:
        for observer in self.observers:
            observer(step, "", {})


class SlowCopy:
    """A copy whose start downloads for ``download_s`` then starts for ``rest_s`` (None:
    forever)."""

    def __init__(self, copy_id: str, work_dir: Path, download_s: float | None,
                 rest_s: float | None) -> None:
        self.id, self.work_dir = copy_id, work_dir
        self.manager = Manager()
        self.download_s, self.rest_s = download_s, rest_s
        self.stopped = False
        self.in_flight = 0
        self.draining = False

    async def start(self) -> None:
        if self.download_s is not None:
            self.manager.emit("downloading")
            await asyncio.sleep(self.download_s)
            self.manager.emit("downloaded")
        await (asyncio.sleep(self.rest_s) if self.rest_s is not None else asyncio.Event().wait())

    async def stop(self) -> None:
        self.stopped = True

    async def drain(self, timeout_s: float) -> None:
        self.draining = True


def _slow_copies(tmp_path: Path, download_s: float | None, rest_s: float | None,
                 sink: Any = None) -> tuple[ComponentCopies, list[SlowCopy]]:
    built: list[SlowCopy] = []

    async def build(endpoint: Any, variant: Any, copy_id: str, work_dir: Path,
                    metrics: Any) -> Any:
        built.append(SlowCopy(copy_id, work_dir, download_s, rest_s))
        return built[-1]

    return ComponentCopies("ep", "ic", tmp_path, build, sink,
                           clock=getattr(sink, "clock", None)), built


def _target(download_s: float | None, health_s: float | None) -> CopyTarget:
    variant = VariantSpec("AllTraffic", ContainerSpec("file:///m.tar.gz", mode="SingleModel"),
                          startup_timeout_s=health_s)
    return CopyTarget(variant, 1, download_timeout_s=download_s)


@pytest.mark.parametrize(("download_s", "rest_s", "named"), [
    (None, None, "ContainerStartupHealthCheckTimeoutInSeconds (0.2 s)"),  # never ready
    (30.0, 0.0, "ModelDataDownloadTimeoutInSeconds (0.2 s)"),  # a download that never ends
])
def test_a_copy_that_exceeds_a_startup_timeout_fails_naming_it(
        tmp_path: Path, download_s: float | None, rest_s: float | None, named: str) -> None:
    copies, built = _slow_copies(tmp_path, download_s, rest_s)

    async def run() -> None:
        with pytest.raises(CopyStartTimeout, match=named.replace("(", r"\(").replace(
                ")", r"\)")):
            await copies.apply(_target(0.2, 0.2))

    asyncio.run(run())
    assert copies.failure is not None and named in copies.failure
    assert built[0].stopped and not copies.ready


def test_the_download_does_not_count_against_the_health_check(tmp_path: Path) -> None:
    # The download takes longer than the health check's timeout, the rest does not: it starts.
    # A second of health check for 0.05 s of start: room for a runner that holds the loop.
    copies, built = _slow_copies(tmp_path, download_s=1.2, rest_s=0.05)
    asyncio.run(copies.apply(_target(5.0, 1.0)))
    assert copies.ready == built and copies.failure is None


# --- ConcurrentRequestsPerCopy on a tick, 0 when idle ---------------------------------------


class Sink:
    def __init__(self) -> None:
        self.clock = Clock(1000.0)  # 10 emulated seconds are 10 ms
        self.samples: list[tuple[str, float]] = []

    def record_many(self, dimensions: Any, samples: Any) -> None:
        self.samples += [(name, value) for _namespace, _unit, name, value in samples]


def test_concurrent_requests_per_copy_is_published_while_idle(tmp_path: Path) -> None:
    sink = Sink()
    copies, _ = _slow_copies(tmp_path, None, 0.0, sink)

    async def run() -> None:
        await copies.apply(_target(None, None))
        await wait_for_async(lambda: len(sink.samples) >= 3, 10, "three ticks")
        await copies.stop()
        published = len(sink.samples)
        await asyncio.sleep(0.05)  # five ticks' time: nothing after the stop
        assert len(sink.samples) == published

    asyncio.run(run())
    assert set(sink.samples) == {("ConcurrentRequestsPerCopy", 0.0)}


# --- ManagedInstanceScaling's ScaleInPolicy -------------------------------------------------

ONE_CORE = Reservation(cpus=1, memory_mib=1024)


def _variant(current: int, policy: dict[str, Any] | None) -> dict[str, Any]:
    scaling: dict[str, Any] = {"Status": "ENABLED", "MinInstanceCount": 0,
                               "MaxInstanceCount": 8}
    if policy is not None:
        scaling["ScaleInPolicy"] = policy
    return {"VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge",  # 4 vCPUs
            "InitialInstanceCount": current, "ManagedInstanceScaling": scaling}


def test_scale_in_policy_idle_release_and_consolidation() -> None:
    # 3 one-core copies spread over 4 instances: 3 hold a copy, 1 holds none; 1 would do.
    spread = [Demand("a", 3, ONE_CORE)]
    assert instance_count(_variant(4, None), spread, 16) == 1  # no policy: at once [U]
    assert instance_count(_variant(4, {"Strategy": "IDLE_RELEASE"}), spread, 16) == 3
    assert instance_count(_variant(4, {"Strategy": "CONSOLIDATION"}), spread, 16) == 3
    assert instance_count(_variant(3, {"Strategy": "CONSOLIDATION"}), spread, 16) == 2
    assert instance_count(_variant(4, {"Strategy": "CONSOLIDATION", "MaximumStepSize": 5}),
                          spread, 16) == 1
    # No copy left: every instance is idle, both release them all (down to Min).
    for strategy in ("IDLE_RELEASE", "CONSOLIDATION"):
        assert instance_count(_variant(4, {"Strategy": strategy}), [], 16) == 0
    # Scale-out is not a scale-in: a pending copy gets its instance under either.
    assert instance_count(_variant(1, {"Strategy": "IDLE_RELEASE"}),
                          [Demand("a", 6, ONE_CORE)], 16) == 2
