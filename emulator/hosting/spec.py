"""What an endpoint is made of, as SageMaker describes it: endpoint -> variants -> container.

These are plain values, JSON-safe through ``to_doc``/``from_doc`` so the control plane can keep
them in its state and bring an endpoint back after a restart with the same shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from emulator.contract.routing_config import LEAST_OUTSTANDING_REQUESTS, PrefixAwareConfig

MULTI_MODEL = "MultiModel"
SINGLE_MODEL = "SingleModel"
# InferenceExecutionConfig.Mode of a multi-container model; Serial is SageMaker's default.
SERIAL = "Serial"
DIRECT = "Direct"


@dataclass(frozen=True)
class ContainerSpec:
    """One container of a model (``PrimaryContainer``)."""

    model_data: str  # MultiModel: the prefix (s3://b/p/ or a folder); SingleModel: one tarball
    mode: str = MULTI_MODEL
    environment: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    model_cache_enabled: bool = True
    hostname: str | None = None  # ContainerHostname

    @property
    def is_multi_model(self) -> bool:
        return self.mode == MULTI_MODEL


@dataclass(frozen=True)
class VariantSpec:
    """A production variant: a model on ``instance_count`` instances, receiving ``weight``.

    A multi-container model (``Containers`` with more than one entry) keeps its first container
    in ``container`` and the others, in order, in ``more_containers``; ``execution_mode`` is its
    ``InferenceExecutionConfig.Mode`` (Serial: a pipeline; Direct: one container per request).
    """

    name: str
    container: ContainerSpec
    instance_count: int = 1
    weight: float = 1.0
    instance_type: str | None = None
    more_containers: tuple[ContainerSpec, ...] = ()
    execution_mode: str | None = None
    # ContainerStartupHealthCheckTimeoutInSeconds: how long a container may take to pass /ping.
    startup_timeout_s: float | None = None
    # RoutingConfig: RoutingStrategy (among instances of a single-model variant) and, for
    # PREFIX_AWARE, its PrefixAwareRoutingConfig.
    routing: str = LEAST_OUTSTANDING_REQUESTS
    prefix: PrefixAwareConfig | None = None

    @property
    def containers(self) -> tuple[ContainerSpec, ...]:
        return (self.container, *self.more_containers)

    @property
    def is_multi_container(self) -> bool:
        return bool(self.more_containers)

    @property
    def is_direct(self) -> bool:
        return self.execution_mode == DIRECT


# MetricsConfig.MetricPublishFrequencyInSeconds: SageMaker's default.
DEFAULT_PUBLISH_PERIOD_S = 60


@dataclass(frozen=True)
class MetricsOptions:
    """An endpoint config's MetricsConfig as an endpoint for inference components runs it:
    ``enhanced`` (EnableEnhancedMetrics: the InstanceId and ContainerId series),
    ``detailed_observability`` (the per-instance host metrics) and ``publish_period_s`` (the
    utilization metrics' period, emulated seconds)."""

    enhanced: bool = False
    detailed_observability: bool = False
    publish_period_s: int = DEFAULT_PUBLISH_PERIOD_S


@dataclass(frozen=True)
class EndpointSpec:
    """An endpoint as one endpoint config makes it: its variants, the config's name (a
    deployment's fleets publish Invocations per EndpointConfigName) and its MetricsConfig
    (``enhanced_metrics``: the InstanceId series; ``detailed_observability``: the per-instance
    host metrics; ``publish_period_s``: the utilization metrics' period, emulated seconds)."""

    name: str
    variants: tuple[VariantSpec, ...]
    config_name: str = ""
    enhanced_metrics: bool = False
    detailed_observability: bool = False
    publish_period_s: int = DEFAULT_PUBLISH_PERIOD_S
    # The config's AsyncInferenceConfig as sent (None: a real-time endpoint).
    async_config: dict[str, Any] | None = None
    # The config's DataCaptureConfig as sent (None: nothing captured).
    capture_config: dict[str, Any] | None = None

    def variant(self, name: str) -> VariantSpec | None:
        return next((v for v in self.variants if v.name == name), None)

    def with_capacities(self, changes: dict[str, tuple[float | None, int | None]]) -> EndpointSpec:
        """The same endpoint with new weights and/or instance counts for some variants."""
        variants = []
        for v in self.variants:
            weight, count = changes.get(v.name, (None, None))
            variants.append(replace(v, weight=v.weight if weight is None else weight,
                                    instance_count=v.instance_count if count is None else count))
        return replace(self, variants=tuple(variants))

    def to_doc(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> EndpointSpec:
        if "variants" not in doc:  # state written before endpoints had variants: one of them
            container = ContainerSpec(
                model_data=doc["model_data"], mode=doc.get("mode", MULTI_MODEL),
                environment=dict(doc.get("environment") or {}), image=doc.get("image"),
                model_cache_enabled=doc.get("model_cache_enabled", True))
            return cls(doc["name"], (VariantSpec(doc.get("variant_name", "AllTraffic"),
                                                 container),))
        variants = tuple(
            VariantSpec(
                name=v["name"], container=ContainerSpec(**v["container"]),
                instance_count=int(v.get("instance_count", 1)),
                weight=float(v.get("weight", 1.0)), instance_type=v.get("instance_type"),
                more_containers=tuple(ContainerSpec(**c) for c in v.get("more_containers") or ()),
                execution_mode=v.get("execution_mode"),
                startup_timeout_s=v.get("startup_timeout_s"),
                routing=v.get("routing") or LEAST_OUTSTANDING_REQUESTS,
                prefix=PrefixAwareConfig(**v["prefix"]) if v.get("prefix") else None)
            for v in doc["variants"])
        return cls(doc["name"], variants, config_name=doc.get("config_name", ""),
                   enhanced_metrics=bool(doc.get("enhanced_metrics", False)),
                   detailed_observability=bool(doc.get("detailed_observability", False)),
                   publish_period_s=int(doc.get("publish_period_s",
                                                DEFAULT_PUBLISH_PERIOD_S)),
                   async_config=doc.get("async_config"),
                   capture_config=doc.get("capture_config"))


def single_variant(name: str, model_data: str, *, variant_name: str = "AllTraffic",
                   instance_count: int = 1, **container: Any) -> EndpointSpec:
    """The common case: one variant, one container (``mme serve --model-data``, tests)."""
    return EndpointSpec(name, (VariantSpec(variant_name, ContainerSpec(model_data, **container),
                                           instance_count=instance_count),))
