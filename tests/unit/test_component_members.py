"""Members of the inference component requests the emulator honours cheaply (DataCacheConfig,
Specification.InstanceType) and the ones it refuses: each refusal a ValidationException that
names the member and says the emulator does not support it (docs/inference-components.md,
'Not supported'). No Triton: the wire rules, and the operations on a real SQLite store.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from emulator.contract import inference_components as rules
from emulator.contract.control_plane import ControlPlaneError
from emulator.control.inference_components import InferenceComponents
from emulator.control.state_db import ControlStore, Deployment, EndpointRecord

RESOURCES = {"NumberOfCpuCoresRequired": 1, "MinMemoryRequiredInMb": 1024}
SPEC = {"Container": {"Image": "img", "ArtifactUrl": "file:///m.tar.gz"},
        "ComputeResourceRequirements": RESOURCES}
VARIANT = {"VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge",
           "InitialInstanceCount": 1}
NOT_SUPPORTED = "is not supported by the emulator for inference components"


def _parse(operation: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    return rules.parse_request(f"SageMaker.{operation}", json.dumps(params).encode())


def _create(spec: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    return _parse("CreateInferenceComponent", {
        "InferenceComponentName": "ic", "EndpointName": "ep", "Specification": spec,
        "RuntimeConfig": {"CopyCount": 1}})


def _refusal(call: Any, *args: Any) -> str:
    with pytest.raises(ControlPlaneError) as raised:
        call(*args)
    assert raised.value.code == "ValidationException"
    return raised.value.message


@pytest.mark.parametrize(("member", "spec"), [
    ("BaseInferenceComponentName", {**SPEC, "BaseInferenceComponentName": "base"}),
    ("SchedulingConfig.AvailabilityZoneBalance", {**SPEC, "SchedulingConfig": {
        "PlacementStrategy": "SPREAD", "AvailabilityZoneBalance": {
            "EnforcementMode": "PERMISSIVE"}}}),
    ("ContainerMetricsConfig", {**SPEC, "Container": {**SPEC["Container"],
                                                      "ContainerMetricsConfig": {
                                                          "MetricsEndpoints": []}}}),
])
def test_a_specification_member_not_supported_is_named(member: str,
                                                       spec: dict[str, Any]) -> None:
    message = _refusal(_create, spec)
    assert message.startswith(member) and NOT_SUPPORTED in message


def test_specifications_not_supported_on_create_and_update() -> None:
    for operation, params in (
            ("CreateInferenceComponent", {"InferenceComponentName": "ic", "EndpointName": "ep",
                                          "Specifications": [SPEC],
                                          "RuntimeConfig": {"CopyCount": 1}}),
            ("UpdateInferenceComponent", {"InferenceComponentName": "ic",
                                          "Specifications": [SPEC]})):
        message = _refusal(_parse, operation, params)
        assert message.startswith("Specifications") and NOT_SUPPORTED in message


def test_an_accelerator_partition_is_refused_as_aws_refuses_one_without_a_layout() -> None:
    message = _refusal(_create, {**SPEC, "ComputeResourceRequirements": {
        **RESOURCES, "NumberOfAcceleratorDevicesRequired": 1,
        "AcceleratorPartitionType": "mig-3g.40gb"}})
    assert "AcceleratorPartitionType mig-3g.40gb must be one of the partition profiles" in message
    assert "omit AcceleratorPartitionType" in message


@pytest.mark.parametrize(("member", "variant", "config"), [
    ("InstancePools", {"InstancePools": [{"InstanceType": "ml.m5.xlarge", "Priority": 1}]}, {}),
    ("AcceleratorPartitionLayouts", {"AcceleratorPartitionLayouts": [{
        "AcceleratorIndices": [0], "PartitionProfiles": ["mig-3g.40gb"]}]}, {}),
    ("RoutingStrategy KV_AWARE", {"RoutingConfig": {"RoutingStrategy": "KV_AWARE"}}, {}),
    ("ShadowProductionVariants", {}, {"ShadowProductionVariants": [
        {**VARIANT, "VariantName": "Shadow"}]}),
])
def test_a_config_member_not_supported_is_named(member: str, variant: dict[str, Any],
                                                config: dict[str, Any]) -> None:
    params = {"EndpointConfigName": "cfg", "ProductionVariants": [{**VARIANT, **variant}],
              **config}
    message = _refusal(_parse, "CreateEndpointConfig", params)
    assert message.startswith(member) and NOT_SUPPORTED in message


def test_data_cache_config_is_accepted() -> None:
    parsed = _create({**SPEC, "DataCacheConfig": {"EnableCaching": True}})
    assert parsed is not None


def _components(tmp_path: Path) -> InferenceComponents:
    store = ControlStore(tmp_path / "control.sqlite3")
    store.add_endpoint(EndpointRecord(
        name="ep", created=1.0, modified=1.0, status="InService",
        current=Deployment(config_name="ep", variants=[VARIANT], spec={})))
    return InferenceComponents(store, lambda kind, name: f"arn:{kind}/{name}", clock=lambda: 1.0)


def test_instance_type_and_data_cache_config_are_honoured(tmp_path: Path) -> None:
    """Specification.InstanceType naming the variant's type is accepted and shown, another is
    refused saying which; DataCacheConfig and SchedulingConfig are shown as sent."""
    async def scenario() -> None:
        components = _components(tmp_path)
        spec = {**SPEC, "InstanceType": "ml.m5.xlarge", "DataCacheConfig": {
            "EnableCaching": True}, "SchedulingConfig": {"PlacementStrategy": "BINPACK"}}
        params = {"InferenceComponentName": "ic", "EndpointName": "ep", "Specification": spec,
                  "RuntimeConfig": {"CopyCount": 1}}
        assert _create(spec) is not None
        await components.create(params)
        while components.lifecycle.tasks:
            await asyncio.gather(*components.lifecycle.tasks.values())
        shown = (await components.describe({"InferenceComponentName": "ic"}))["Specification"]
        assert shown["InstanceType"] == "ml.m5.xlarge"
        assert shown["DataCacheConfig"] == {"EnableCaching": True}
        assert shown["SchedulingConfig"] == {"PlacementStrategy": "BINPACK"}
        with pytest.raises(ControlPlaneError) as raised:
            await components.create({**params, "InferenceComponentName": "other",
                                     "Specification": {**spec, "InstanceType": "ml.c5.xlarge"}})
        assert "Specification.InstanceType ml.c5.xlarge is not the instance type of variant " \
               "AllTraffic (ml.m5.xlarge)" in raised.value.message

    asyncio.run(scenario())


def test_prefix_aware_settings_without_prefix_aware_routing_are_refused() -> None:
    message = _refusal(_parse, "CreateEndpointConfig", {
        "EndpointConfigName": "cfg", "ProductionVariants": [{**VARIANT, "RoutingConfig": {
            "RoutingStrategy": "RANDOM", "PrefixAwareRoutingConfig": {
                "PrefixLength": 1024, "ConcurrencyThreshold": 4}}}]})
    assert "PrefixAwareRoutingConfig of production variant AllTraffic applies only with " \
           "RoutingStrategy PREFIX_AWARE (it is RANDOM)" in message
