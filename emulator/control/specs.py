"""From the control plane's documents to what the runtime runs.

An endpoint config and its models become a ``Deployment``: the config's variants as sent, and
(for an endpoint of models) the hosting spec the endpoint registry starts
(``emulator.hosting.spec.EndpointSpec``). It is resolved once, when CreateEndpoint or
UpdateEndpoint is called: deleting the config or a model later changes nothing that runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

from emulator.contract import control_plane as wire
from emulator.contract import inference_components as component_rules
from emulator.contract import routing_config
from emulator.contract.control_plane import KIND_MODEL
from emulator.control.state_db import Deployment, EndpointRecord
from emulator.control.stored_resources import StoredResources
from emulator.hosting.spec import (
    DEFAULT_PUBLISH_PERIOD_S,
    SERIAL,
    ContainerSpec,
    EndpointSpec,
    MetricsOptions,
    VariantSpec,
)
from emulator.instance_types import MAX_INSTANCES_PER_ENDPOINT


class Resolved(NamedTuple):
    """A deployment as stored, and its hosting spec as built (None for an endpoint for
    inference components): what CreateEndpoint and UpdateEndpoint work on, so the spec is built
    once and never read back from its stored form on the way."""

    deployment: Deployment
    spec: EndpointSpec | None


def is_component_deployment(variants: list[dict[str, Any]]) -> bool:
    """An endpoint deployment (its config's variants) that hosts inference components."""
    return bool(variants) and all(component_rules.is_component_variant(v) for v in variants)


def deployment(resources: StoredResources, endpoint_name: str, config_name: str,
               clock: Callable[[], float]) -> Resolved:
    """Resolve a config and its models into what the runtime needs, at call time."""
    config = resources.config(config_name)
    variants = config.doc["ProductionVariants"]
    if is_component_deployment(variants):
        refuse_capture_for_components(config.name, config.doc)
        # Instances for inference components: bookkeeping, no runtime spec; the
        # same bound, as their copies will be processes on this machine.
        count = sum(int(v.get("InitialInstanceCount") or 0) for v in variants)
        if count > MAX_INSTANCES_PER_ENDPOINT:
            raise wire.resource_limit_exceeded(
                f"Endpoint config {config.name} asks for {count} instances; the emulator "
                f"runs at most {MAX_INSTANCES_PER_ENDPOINT} per endpoint.")
        return Resolved(Deployment(config_name=config.name, variants=variants, spec={},
                                   started=clock(),
                                   metrics_config=dict(config.doc.get("MetricsConfig") or {})),
                        None)
    specs = tuple(variant_spec(resources, v) for v in variants)
    total = sum(v.instance_count for v in specs)
    if total > MAX_INSTANCES_PER_ENDPOINT:
        raise wire.resource_limit_exceeded(
            f"Endpoint config {config.name} asks for {total} instances; the emulator runs at "
            f"most {MAX_INSTANCES_PER_ENDPOINT} per endpoint (each is a Triton process on "
            "this machine).")
    metrics = metrics_options(config.doc.get("MetricsConfig") or {})
    spec = EndpointSpec(
        endpoint_name, specs, config_name=config.name, enhanced_metrics=metrics.enhanced,
        detailed_observability=metrics.detailed_observability,
        publish_period_s=metrics.publish_period_s,
        async_config=config.doc.get("AsyncInferenceConfig"),
        capture_config=config.doc.get("DataCaptureConfig"))
    return Resolved(Deployment(
        config_name=config.name,
        variants=variants,
        spec=spec.to_doc(),
        images=[c.image for v in specs for c in v.containers],
        started=clock(),
    ), spec)


def refuse_capture_for_components(config_name: str, config: dict[str, Any]) -> None:
    """[U] what AWS answers: the emulator captures the calls of endpoints of models only."""
    if config.get("DataCaptureConfig") is not None:
        raise wire.validation_error(
            f"Endpoint config {config_name} hosts inference components and has a "
            "DataCaptureConfig: the emulator captures the calls of endpoints of models only. "
            "Remove DataCaptureConfig from the config.")


def metrics_options(metrics_config: dict[str, Any]) -> MetricsOptions:
    """An endpoint config's MetricsConfig, AWS's defaults filled in."""
    return MetricsOptions(
        enhanced=bool(metrics_config.get("EnableEnhancedMetrics", False)),
        # AWS: "The default value for new endpoint configurations is True."
        detailed_observability=bool(metrics_config.get("EnableDetailedObservability", True)),
        publish_period_s=int(metrics_config.get("MetricPublishFrequencyInSeconds",
                                                DEFAULT_PUBLISH_PERIOD_S)))


def variant_spec(resources: StoredResources, variant: dict[str, Any]) -> VariantSpec:
    """One ProductionVariant and its model as the runtime's variant."""
    model = resources.model(variant["ModelName"])
    containers = (
        [model.doc["PrimaryContainer"]]
        if model.doc.get("PrimaryContainer")
        else list(model.doc.get("Containers") or [])
    )
    model_arn = resources.arn(KIND_MODEL, model.name)
    if not containers:
        raise wire.validation_error(f'Model "{model_arn}" has no container.')
    several = len(containers) > 1
    specs = [container_spec(model_arn, c, required=not several) for c in containers]
    mode = (model.doc.get("InferenceExecutionConfig") or {}).get("Mode")
    routing, prefix = routing_config.strategy_of(variant)
    return VariantSpec(
        name=variant["VariantName"],
        container=specs[0],
        more_containers=tuple(specs[1:]),
        # SageMaker's default for a multi-container model is Serial.
        execution_mode=mode or (SERIAL if several else None),
        instance_count=int(variant.get("InitialInstanceCount") or 1),
        weight=float(variant.get("InitialVariantWeight", 1.0)),
        instance_type=variant.get("InstanceType"),
        startup_timeout_s=variant.get("ContainerStartupHealthCheckTimeoutInSeconds"),
        routing=routing,
        prefix=prefix,
    )


def container_spec(model_arn: str, container: dict[str, Any], required: bool) -> ContainerSpec:
    """One ContainerDefinition; model data may be absent from a pipeline's container (a
    featurizer with its code in the image), never from a single container's."""
    model_data = container.get("ModelDataUrl") or (
        (container.get("ModelDataSource") or {}).get("S3DataSource") or {}
    ).get("S3Uri")
    if not model_data and required:
        raise wire.validation_error(
            f'Model "{model_arn}" has no ModelDataUrl; the emulator '
            "needs one (an S3 prefix for MultiModel, a tarball for SingleModel)."
        )
    cache = (container.get("MultiModelConfig") or {}).get("ModelCacheSetting", "Enabled")
    return ContainerSpec(
        model_data=model_data or "",
        mode=container.get("Mode", "SingleModel"),
        environment=dict(container.get("Environment") or {}),
        image=container.get("Image"),
        model_cache_enabled=cache != "Disabled",
        hostname=container.get("ContainerHostname"),
    )


def retained(record: EndpointRecord, running: EndpointSpec, new: EndpointSpec,
             deployment: Deployment, params: dict[str, Any]) -> Resolved:
    """RetainAllVariantProperties: the running variants' instance counts and weights (those
    of a capacity change still recorded, else ``running``'s) carry over to the ``new`` config's
    variants of the same name, except those excluded."""
    excluded = {p["VariantPropertyType"]
                for p in params.get("ExcludeRetainedVariantProperties") or []}
    if not params.get("RetainAllVariantProperties"):
        if excluded:  # [U] wording
            raise wire.validation_error(
                "ExcludeRetainedVariantProperties applies only when "
                "RetainAllVariantProperties is true.")
        return Resolved(deployment, new)
    current = EndpointSpec.from_doc(record.desired) if record.desired else running
    changes: dict[str, tuple[float | None, int | None]] = {}
    for variant in new.variants:
        kept = current.variant(variant.name)
        if kept is not None:
            changes[variant.name] = (
                None if "DesiredWeight" in excluded else kept.weight,
                None if "DesiredInstanceCount" in excluded else kept.instance_count)
    # [U] DataCaptureConfig is always the new config's: AWS lists it as a VariantProperty
    # "not currently supported", so excluding it changes nothing.
    spec = new.with_capacities(changes)
    return Resolved(dataclasses.replace(deployment, spec=spec.to_doc()), spec)
