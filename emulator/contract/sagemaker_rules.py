"""What SageMaker's control plane checks in a request beyond botocore's model.

The model constrains each member alone (``botocore_validation``); these rules relate members to
each other (PrimaryContainer or Containers, unique variant names, weights that sum above 0, ...).
Stateless only: rules that need what exists (a model named by a config, instance quotas) are the
service's (``emulator.control.service``). Each rule's violation joins the model's in the one
"N validation errors detected" message, after them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from emulator.contract import multi_container, routing_config
from emulator.contract.botocore_validation import PatternOverrides

# The real service only takes S3 (or https S3) URLs; the emulator also serves model stores from
# local folders, so ModelDataUrl (shape "Url") may be a ``file://`` URL or an absolute path here.
PATTERN_OVERRIDES: PatternOverrides = {"Url": r"(https|s3)://([^/]+)/?(.*)|file://.*|/.*"}


def violations(operation: str, params: dict[str, Any]) -> list[str]:
    """The cross-member rules ``operation`` breaks, each as one sentence (``[]`` when none).

    ``params`` has been checked against the model already, but not rejected yet: a member may
    still have the wrong type, which the model's message reports; the rules skip such values.
    """
    rules = _RULES.get(operation)
    if rules is None:
        return []
    errors: list[str] = []
    rules(params, errors)
    return errors


def _create_model(params: dict[str, Any], errors: list[str]) -> None:
    primary, containers = params.get("PrimaryContainer"), params.get("Containers")
    if primary is None and not containers:
        errors.append("Either PrimaryContainer or Containers must be specified.")
    if primary is not None and containers:
        errors.append("Specify either PrimaryContainer or Containers, not both.")
    found = [primary] if isinstance(primary, dict) else []
    found += [c for c in _list(containers) if isinstance(c, dict)]
    for container in found:
        if container.get("Mode") == "MultiModel" and not container.get("ModelDataUrl"):
            errors.append("ModelDataUrl is required when the container Mode is MultiModel.")
    _check_containers(params, found, errors)


def _check_containers(params: dict[str, Any], found: list[dict[str, Any]],
                      errors: list[str]) -> None:
    """Multi-container models: hostnames (required for Direct, unique) and no multi-model
    container among several (SageMaker's rule and message)."""
    execution = params.get("InferenceExecutionConfig") or {}
    direct = isinstance(execution, dict) and execution.get("Mode") == "Direct"
    if direct and any(not c.get("ContainerHostname") for c in found):
        errors.append(multi_container.hostname_required_for_direct())
    hostnames = [h for h in _countable(c.get("ContainerHostname") for c in found) if h]
    for hostname in sorted({h for h in hostnames if hostnames.count(h) > 1}, key=str):
        errors.append(multi_container.duplicate_hostname(hostname))
    if len(found) > 1:
        multi_model = sum(1 for c in found if c.get("Mode") == "MultiModel")
        if multi_model > 1:
            errors.append(multi_container.multi_model_in_pipeline())
        elif multi_model == 1:
            errors.append(multi_container.multi_model_with_others())


def _update_weights_and_capacities(params: dict[str, Any], errors: list[str]) -> None:
    changes = [c for c in _list(params.get("DesiredWeightsAndCapacities")) if isinstance(c, dict)]
    names = _countable(c.get("VariantName") for c in changes)
    if len(set(names)) != len(names):
        errors.append("Each VariantName may appear only once in DesiredWeightsAndCapacities.")
    for change in changes:
        if "DesiredWeight" not in change and "DesiredInstanceCount" not in change:
            errors.append(f"Specify DesiredWeight or DesiredInstanceCount for variant "
                          f"{change.get('VariantName')}.")
        if change.get("DesiredInstanceCount") == 0:
            # [U] scaling a variant to 0 instances is for inference-component endpoints.
            errors.append(f"DesiredInstanceCount for variant {change.get('VariantName')} "
                          "must be at least 1.")


def _create_endpoint_config(params: dict[str, Any], errors: list[str]) -> None:
    variants = [v for v in _list(params.get("ProductionVariants")) if isinstance(v, dict)]
    names = _countable(v.get("VariantName") for v in variants)
    if len(set(names)) != len(names):
        errors.append("Production variant names must be unique within an endpoint config.")
    weights = [v.get("InitialVariantWeight", 1.0) for v in variants]
    if variants and all(isinstance(w, (int, float)) for w in weights) and sum(weights) <= 0:
        # [U] wording: a config whose variants all weigh 0 would receive no traffic at all.
        errors.append("The sum of InitialVariantWeight across production variants must be "
                      "greater than 0.")
    _metrics_config(params.get("MetricsConfig"), errors)
    for variant in variants:
        if not variant.get("ModelName"):
            errors.append(
                f"ModelName is required for production variant {variant.get('VariantName')}."
            )
        if not variant.get("InstanceType") and not variant.get("ServerlessConfig"):
            errors.append(
                f"InstanceType or ServerlessConfig is required for production variant "
                f"{variant.get('VariantName')}."
            )
        errors.extend(routing_config.problems(variant))
        strategy = routing_config.refused(variant)
        if strategy is not None:
            errors.append(routing_config.refusal_message(strategy))


# MetricsConfig.MetricPublishFrequencyInSeconds: the values the API reference lists.
PUBLISH_PERIODS_S = (10, 30, 60, 120, 180, 240, 300)


def _metrics_config(config: Any, errors: list[str]) -> None:
    if not isinstance(config, dict):
        return
    period = config.get("MetricPublishFrequencyInSeconds")
    if isinstance(period, int) and period not in PUBLISH_PERIODS_S:
        # [U] wording, in the model's own style; the values are the API reference's.
        errors.append(
            f"Value '{period}' at 'metricsConfig.metricPublishFrequencyInSeconds' failed to "
            "satisfy constraint: Member must be one of "
            f"[{', '.join(str(p) for p in PUBLISH_PERIODS_S)}]")


def _list(value: Any) -> list[Any]:
    """A member the model says is a list; anything else (already reported) as no items."""
    return value if isinstance(value, list) else []


def _countable(values: Iterable[Any]) -> list[Any]:
    """The names among ``values`` that a set can count: a list or an object where a name belongs
    is the model's error (already reported), not a duplicate, and no reason to fail."""
    return [v for v in values if isinstance(v, Hashable)]


_RULES: dict[str, Callable[[dict[str, Any], list[str]], None]] = {
    "CreateModel": _create_model,
    "CreateEndpointConfig": _create_endpoint_config,
    "UpdateEndpointWeightsAndCapacities": _update_weights_and_capacities,
}
