"""DescribeInferenceComponent, ListInferenceComponents, and DescribeEndpoint's variants of an
endpoint for inference components, as SageMaker renders them. Rendering only: nothing here
changes state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulator.contract import inference_components as rules
from emulator.contract.control_plane import KIND_ENDPOINT
from emulator.control.component_records import ComponentRecord
from emulator.control.state_db import EndpointRecord


def summary(record: ComponentRecord, arn: Callable[[str, str], str]) -> dict[str, Any]:
    """One component of ListInferenceComponents."""
    return {
        "InferenceComponentName": record.name,
        "InferenceComponentArn": arn(rules.KIND, record.name),
        "EndpointName": record.endpoint_name,
        "EndpointArn": arn(KIND_ENDPOINT, record.endpoint_name),
        "VariantName": record.variant_name,
        "InferenceComponentStatus": record.status,
        "CreationTime": record.created,
        "LastModifiedTime": record.modified,
    }


def describe(record: ComponentRecord, arn: Callable[[str, str], str],
             endpoint: EndpointRecord | None) -> dict[str, Any]:
    """DescribeInferenceComponent's answer (before the wire drops its empty members)."""
    spec = record.specification
    specification: dict[str, Any] = {
        key: spec[key] for key in ("ModelName", "StartupParameters",
                                   "ComputeResourceRequirements", "InstanceType",
                                   "DataCacheConfig", "SchedulingConfig") if key in spec}
    container = spec.get("Container")
    if container:
        specification["Container"] = {
            "ArtifactUrl": container.get("ArtifactUrl"),
            "Environment": container.get("Environment"),
            "DeployedImage": {"SpecifiedImage": container["Image"],
                              "ResolvedImage": container["Image"],
                              "ResolutionTime": record.created} if container.get("Image")
            else None,
        }
    return {
        **summary(record, arn),  # the names, ARNs, status and times, as the list gives them
        "FailureReason": record.failure_reason,
        "Specification": specification,
        "RuntimeConfig": {"DesiredCopyCount": record.desired_copies,
                          "CurrentCopyCount": record.current_copies,
                          "PlacementStatus": placement_status(record, endpoint)},
        "LastDeploymentConfig": record.last_deployment_config,
    }


def placement_status(record: ComponentRecord,
                     endpoint: EndpointRecord | None) -> list[dict[str, Any]] | None:
    """The placed copies by instance type (a variant has one); None when none is placed."""
    variant = next((v for v in endpoint.current.variants
                    if v["VariantName"] == record.variant_name), None) if endpoint else None
    if not record.current_copies or variant is None or not variant.get("InstanceType"):
        return None
    return [{"InstanceType": variant["InstanceType"],
             "CurrentCopyCount": record.current_copies}]


def variant_summaries(variants: list[dict[str, Any]], in_service: bool) -> list[dict[str, Any]]:
    """DescribeEndpoint's ProductionVariants of an endpoint for components. Its instances are
    bookkeeping (resources copies will be placed on): counted once the endpoint is InService."""
    summaries = []
    for variant in variants:
        count = int(variant.get("InitialInstanceCount") or 0)
        weight = float(variant.get("InitialVariantWeight", 1.0))
        summary: dict[str, Any] = {
            "VariantName": variant["VariantName"],
            "CurrentWeight": weight,
            "DesiredWeight": weight,
            "CurrentInstanceCount": count if in_service else 0,
            "DesiredInstanceCount": count,
        }
        for member in ("ManagedInstanceScaling", "RoutingConfig"):
            if variant.get(member) is not None:
                summary[member] = variant[member]
        summaries.append(summary)
    return summaries
