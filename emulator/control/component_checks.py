"""What the component operations check against state before anything changes.

The wire checks (shapes, ranges) are ``emulator.contract.inference_components``'; these need the
control plane's state: the endpoint is one for inference components and may take one, the
variant exists, the model exists, one copy fits one instance of the variant's type (by the
instance-type table's figures), and what an UpdateEndpoint or UpdateEndpointWeightsAndCapacities
of such an endpoint would break.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulator import instance_types
from emulator.contract import control_plane as wire
from emulator.contract import inference_components as rules
from emulator.contract.control_plane import KIND_ENDPOINT, KIND_MODEL
from emulator.control.component_records import ComponentTable
from emulator.control.state_db import MODELS, EndpointRecord

CREATING, _, UPDATING, FAILED, DELETING = rules.STATUSES
IN_PROGRESS = (CREATING, UPDATING, DELETING)
_MIB = 1024 * 1024


class ComponentChecks:
    """The state checks of one control plane's components."""

    def __init__(self, table: ComponentTable, arn: Callable[[str, str], str]) -> None:
        self.table = table
        self.arn = arn

    def endpoint(self, name: str) -> EndpointRecord:
        endpoint = self.table.store.get_endpoint(name)
        if endpoint is None:
            raise wire.not_found(KIND_ENDPOINT, self.arn(KIND_ENDPOINT, name))
        if not endpoint.current.variants or not all(
                rules.is_component_variant(v) for v in endpoint.current.variants):
            raise rules.endpoint_not_for_components()
        if endpoint.status in (FAILED, DELETING):  # [U] wording
            raise wire.validation_error(
                f'Cannot deploy an inference component on endpoint '
                f'"{self.arn(KIND_ENDPOINT, endpoint.name)}" in status {endpoint.status}.')
        return endpoint

    def variant(self, endpoint: EndpointRecord, name: str | None) -> dict[str, Any]:
        variants = endpoint.current.variants
        if name is None:
            if len(variants) == 1:
                return variants[0]
            raise wire.validation_error(  # [U] wording
                f"Endpoint {endpoint.name} has {len(variants)} production variants "
                f"({', '.join(v['VariantName'] for v in variants)}): name one in VariantName.")
        for variant in variants:
            if variant["VariantName"] == name:
                return variant
        raise wire.validation_error(  # [U] wording
            f'The variant "{name}" does not exist in endpoint '
            f'"{self.arn(KIND_ENDPOINT, endpoint.name)}"; its variants are '
            f"{', '.join(v['VariantName'] for v in variants)}.")

    def specification(self, spec: dict[str, Any], variant: dict[str, Any]) -> None:
        """What needs state: the model exists; one copy fits one instance of the variant's
        type (a copy never spans instances), by the instance-type table's figures."""
        if spec.get("ModelName") and self.table.store.get(MODELS, spec["ModelName"]) is None:
            raise wire.not_found(KIND_MODEL, self.arn(KIND_MODEL, spec["ModelName"]))
        named = spec.get("InstanceType")
        if named is not None and named != variant.get("InstanceType"):
            # The member "specifies which instance type this specification applies to" (one of
            # the variant's); a variant here has one InstanceType (InstancePools are refused).
            raise wire.validation_error(  # [U] wording
                f"Specification.InstanceType {named} is not the instance type of variant "
                f"{variant['VariantName']} ({variant.get('InstanceType')}); name that one, or "
                "leave InstanceType out.")
        known = instance_types.lookup(variant.get("InstanceType") or "")
        if known is None:  # a type the table does not know: nothing to check it against
            return
        needs = spec["ComputeResourceRequirements"]
        problems = []
        cores = needs.get("NumberOfCpuCoresRequired")
        if cores is not None and cores > known.vcpus:
            problems.append(f"NumberOfCpuCoresRequired {cores:g} > its {known.vcpus} vCPUs")
        devices = needs.get("NumberOfAcceleratorDevicesRequired")
        if devices is not None and devices > known.accelerators:
            problems.append(f"NumberOfAcceleratorDevicesRequired {devices:g} > its "
                            f"{known.accelerators} accelerator devices")
        memory_mib = known.memory_bytes // _MIB
        if needs["MinMemoryRequiredInMb"] > memory_mib:
            problems.append(f"MinMemoryRequiredInMb {needs['MinMemoryRequiredInMb']} > its "
                            f"{memory_mib} MiB of memory")
        if problems:  # [U] wording; the figures are the instance-type table's
            raise wire.validation_error(
                f"One copy of the inference component does not fit on one "
                f"{known.name} instance of variant {variant['VariantName']}: "
                f"{'; '.join(problems)}. Ask for less, or use a larger instance type.")

    def endpoint_move(self, endpoint: EndpointRecord,
                            variants: list[dict[str, Any]]) -> None:
        """UpdateEndpoint of an endpoint for components to ``variants``
        (``control.component_endpoint_updates``): refused while a component is in progress, if
        a variant that hosts components is missing, or if a copy no longer fits one instance.
        [U] wording."""
        endpoint_arn = self.arn(KIND_ENDPOINT, endpoint.name)
        by_name = {v["VariantName"]: v for v in variants}
        for record in self.table.on_endpoint(endpoint.name):
            if record.status in IN_PROGRESS:
                raise wire.validation_error(
                    f'Cannot update endpoint "{endpoint_arn}" while its inference component '
                    f"{record.name} is {record.status}; wait until it is InService.")
            variant = by_name.get(record.variant_name)
            if variant is None:
                raise wire.validation_error(
                    f"The new endpoint config has no production variant {record.variant_name}, "
                    f"which hosts inference component {record.name}; keep the variant or "
                    "delete the component first.")
            self.specification(record.specification, variant)


def resized(endpoint: EndpointRecord, changes: list[dict[str, Any]], max_instances: int,
            endpoint_arn: str) -> list[dict[str, Any]]:
    """The variants of an endpoint for components after UpdateEndpointWeightsAndCapacities
    (their DesiredWeight and DesiredInstanceCount become the variants' own)."""
    variants = [dict(v) for v in endpoint.current.variants]
    by_name = {v["VariantName"]: v for v in variants}
    for change in changes:
        variant = by_name.get(change["VariantName"])
        if variant is None:
            raise wire.validation_error(  # [U] wording, as for endpoints of models
                f'The variant "{change["VariantName"]}" does not exist in endpoint '
                f'"{endpoint_arn}"; its variants are {", ".join(by_name)}.')
        if change.get("DesiredWeight") is not None:
            variant["InitialVariantWeight"] = float(change["DesiredWeight"])
        if change.get("DesiredInstanceCount") is not None:
            count = int(change["DesiredInstanceCount"])
            scaling = variant.get("ManagedInstanceScaling") or {}
            low, high = scaling.get("MinInstanceCount"), scaling.get("MaxInstanceCount")
            if (low is not None and count < low) or (high is not None and count > high):
                raise wire.validation_error(  # [U] wording, the config's rule kept
                    f"DesiredInstanceCount {count} of variant {variant['VariantName']} is "
                    f"outside its ManagedInstanceScaling range ({low if low is not None else 0}"
                    f" to {high if high is not None else 'any'}).")
            variant["InitialInstanceCount"] = count
    if sum(float(v.get("InitialVariantWeight", 1.0)) for v in variants) <= 0:
        raise wire.validation_error(  # [U] wording
            "The sum of the variants' weights must be greater than 0; the endpoint would "
            "receive no traffic.")
    total = sum(int(v.get("InitialInstanceCount") or 0) for v in variants)
    if total > max_instances:
        raise wire.resource_limit_exceeded(
            f"Endpoint {endpoint.name} would have {total} instances; the emulator runs at most "
            f"{max_instances} per endpoint.")
    return variants
