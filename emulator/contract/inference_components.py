"""Wire rules of SageMaker inference components: the six operations and the
endpoint configs whose variants host components.

Pure functions, like ``emulator.contract.control_plane``, whose shape validator (botocore's model
is the spec) and error type they reuse. What is checked here is what needs no state: the
shapes, the members the emulator does not honour (refused, never silently accepted) and the
rules between members of one request. What exists (endpoints, models, components) is checked
by ``emulator.control.inference_components``.

Sources: botocore's ``sagemaker`` service model (members, constraints, and the member docs
quoted in comments); the messages AWS answers are quoted where users have published them
(marked with their source); every other wording and rule is marked [U].
"""

from __future__ import annotations

from typing import Any

from emulator.contract import control_plane as wire
from emulator.contract import routing_config, sagemaker_rules
from emulator.contract.botocore_validation import (
    constraint_failure,
    format_errors,
    validate_request,
)
from emulator.contract.json_errors import SERIALIZATION, UnreadableBody, read_body

KIND = "inference-component"

OPERATIONS = frozenset({
    "CreateInferenceComponent",
    "DescribeInferenceComponent",
    "ListInferenceComponents",
    "UpdateInferenceComponent",
    "UpdateInferenceComponentRuntimeConfig",
    "DeleteInferenceComponent",
})

STATUSES = ("Creating", "InService", "Updating", "Failed", "Deleting")
# AWS's answer to CreateInferenceComponent with RuntimeConfig.CopyCount 0, as users quote it.
COPY_COUNT_ZERO_AT_CREATE = "Inference components copy count an integer larger than 0"

# Members of InferenceComponentSpecification the emulator does not support (refused; the
# table "Not supported" in docs/inference-components.md). DataCacheConfig and InstanceType are
# honoured (the latter checked against the variant's by emulator.control.inference_components).
_SPEC_NOT_HONOURED = {
    "BaseInferenceComponentName": "BaseInferenceComponentName (adapter inference components)",
}


def arn(name: str, region: str, account: str) -> str:
    return wire.arn(KIND, name, region, account)


# ---------------------------------------------------------------------------------------------
# Errors (ValidationException, HTTP 400, like every other control-plane client error)


def not_found(component_arn: str) -> wire.ControlPlaneError:
    # The service's "Could not find <kind> "<arn>"." form, as for models and endpoints.
    return wire.validation_error(f'Could not find inference component "{component_arn}".')


def already_exists(component_arn: str) -> wire.ControlPlaneError:
    return wire.validation_error(
        f'Cannot create already existing inference component "{component_arn}".')


def endpoint_not_for_components() -> wire.ControlPlaneError:
    """A component on an endpoint whose variants name a model. Wording as AWS answers it
    (quoted in github.com/pulumi/pulumi-aws/issues/4940 and hashicorp/terraform-provider-aws
    issue 40644)."""
    return wire.validation_error(
        "Invalid request provided: Inference Components are not supported in this Endpoint. "
        "Please make sure this endpoint can deploy inference components.")


def in_progress(component_arn: str, status: str) -> wire.ControlPlaneError:
    # [U] wording, as UpdateEndpoint's 'Cannot update in-progress endpoint'.
    return wire.validation_error(
        f'Cannot update in-progress inference component "{component_arn}" (status {status}); '
        "wait until it is InService.")


def not_honoured(what: str) -> wire.ControlPlaneError:
    """A member the emulator does not implement: refused, so nobody believes it took effect.
    ``what`` starts with the member's name."""
    return wire.validation_error(
        f"{what} is not supported by the emulator for inference components "
        "(docs/inference-components.md, 'Not supported'); remove it from the request.")


# ---------------------------------------------------------------------------------------------
# Requests


def is_component_variant(variant: Any) -> bool:
    """A production variant that hosts inference components: it names no model."""
    return isinstance(variant, dict) and not variant.get("ModelName")


def is_component_config(params: dict[str, Any]) -> bool:
    variants = params.get("ProductionVariants")
    return isinstance(variants, list) and any(is_component_variant(v) for v in variants)


def parse_request(target: str | None, body: bytes) -> tuple[str, dict[str, Any]] | None:
    """Operation and validated parameters of a request these rules own: the component
    operations, and CreateEndpointConfig for component variants. None for any other request
    (``control_plane.parse_request`` reads it)."""
    if not target or not target.startswith(wire.TARGET_PREFIX):
        return None
    operation = target[len(wire.TARGET_PREFIX):]
    if operation not in OPERATIONS and operation != "CreateEndpointConfig":
        return None
    try:
        params = read_body(body)
        if operation == "CreateEndpointConfig" and not is_component_config(params):
            return None
        errors = validate_request(wire.operation_model(operation), params,
                                  pattern_overrides=sagemaker_rules.PATTERN_OVERRIDES)
    except UnreadableBody as exc:  # not JSON, or nested too deeply to read or to validate
        raise wire.ControlPlaneError(str(exc), SERIALIZATION) from exc
    if errors:
        raise wire.validation_error(format_errors(errors))
    _CHECKS[operation](params)
    return operation, params


def _check_create(params: dict[str, Any]) -> None:
    spec = _one_specification(params)
    check_specification(spec, "specification")
    if params.get("RuntimeConfig") is None:
        # [U] wording. Only an adapter component (not supported here) goes without one.
        raise wire.validation_error(
            "RuntimeConfig (CopyCount) is required for an inference component that is not "
            "an adapter component.")
    if params["RuntimeConfig"].get("CopyCount") == 0:
        # botocore allows 0 (the shape is shared with UpdateInferenceComponentRuntimeConfig,
        # where 0 is scale to zero), but CreateInferenceComponent refuses it, in these words
        # (quoted by users in github.com/stdapi-ai/stdapi.ai/issues/43): a component is
        # created with copies; Application Auto Scaling takes it to zero afterwards.
        raise wire.validation_error(COPY_COUNT_ZERO_AT_CREATE)


def _check_update(params: dict[str, Any]) -> None:
    if params.get("Specifications") is not None:
        raise not_honoured("Specifications (one specification per instance type)")
    if params.get("Specification") is None and params.get("RuntimeConfig") is None:
        # [U] wording: an update that changes nothing.
        raise wire.validation_error(
            "Specify Specification, RuntimeConfig or both to update an inference component.")
    if params.get("Specification") is not None:
        check_specification(params["Specification"], "specification", update=True)


def _check_nothing(params: dict[str, Any]) -> None:
    return None


def _one_specification(params: dict[str, Any]) -> dict[str, Any]:
    if params.get("Specifications") is not None:
        raise not_honoured("Specifications (one specification per instance type)")
    spec = params.get("Specification")
    if spec is None:
        # [U] wording. botocore's model makes neither member required, since either may be
        # given ("You can use either this parameter or the singular Specification parameter").
        raise wire.validation_error(
            "Specification is required: the model (ModelName or Container) and its "
            "ComputeResourceRequirements.")
    assert isinstance(spec, dict)  # validated against the shape
    return spec


def check_specification(spec: dict[str, Any], path: str, update: bool = False) -> None:
    """An InferenceComponentSpecification of a (non-adapter) component. [U] An update's may
    name no model (ModelName or Container): the component keeps its own, as the SageMaker
    Python SDK's Predictor.update_predictor(resources=...) sends it."""
    for member, what in _SPEC_NOT_HONOURED.items():
        if spec.get(member) is not None:
            raise not_honoured(what)
    if (spec.get("SchedulingConfig") or {}).get("AvailabilityZoneBalance") is not None:
        raise not_honoured("SchedulingConfig.AvailabilityZoneBalance (instances have no "
                           "Availability Zone here)")
    container = spec.get("Container") or {}
    if container.get("ContainerMetricsConfig") is not None:
        raise not_honoured("ContainerMetricsConfig")
    keeps_its_model = update and not spec.get("ModelName") and not spec.get("Container")
    if not spec.get("ModelName") and not spec.get("Container") and not keeps_its_model:
        # [U] wording: the component needs something to run.
        raise wire.validation_error(
            "Specify ModelName (an existing model) or Container (Image, ArtifactUrl) in the "
            "inference component's Specification.")
    if not spec.get("ModelName") and not container.get("Image") and not keeps_its_model:
        raise wire.validation_error(  # [U] wording
            "Specification.Container.Image is required when the Specification names no model.")
    resources = spec.get("ComputeResourceRequirements")
    if resources is None:
        # The model's docs: "Omit this parameter if your request is meant to create an adapter
        # inference component" -- every other component gives it. [U] wording.
        raise wire.validation_error(
            "Specification.ComputeResourceRequirements is required (MinMemoryRequiredInMb, and "
            "NumberOfCpuCoresRequired or NumberOfAcceleratorDevicesRequired as the model needs).")
    if resources.get("AcceleratorPartitionType") is not None:
        # AWS: it "must be one of the partition profiles declared in the target endpoint's
        # accelerator partition layout ... For endpoints without a layout, omit this field"
        # (botocore's model). Layouts are not supported here, so no variant has one. [U] wording.
        raise wire.validation_error(
            f"AcceleratorPartitionType {resources['AcceleratorPartitionType']} must be one of "
            "the partition profiles of the variant's AcceleratorPartitionLayouts, and the "
            "variant declares none (AcceleratorPartitionLayouts is not supported by the "
            "emulator); omit AcceleratorPartitionType to place the component on whole "
            "accelerators.")
    low, high = resources.get("MinMemoryRequiredInMb"), resources.get("MaxMemoryRequiredInMb")
    if isinstance(low, int) and isinstance(high, int) and high < low:
        raise wire.validation_error(format_errors([constraint_failure(
            f"{path}.computeResourceRequirements.maxMemoryRequiredInMb", high,
            f"Member must be greater than or equal to MinMemoryRequiredInMb ({low})")]))  # [U]


# ---------------------------------------------------------------------------------------------
# Endpoint configs whose variants host components


def _check_component_config(params: dict[str, Any]) -> None:
    """Rules of an endpoint config for inference components (no variant names a model)."""
    variants = [v for v in params["ProductionVariants"] if isinstance(v, dict)]
    problems: list[str] = []
    names = [v.get("VariantName") for v in variants]
    if len(set(names)) != len(names):
        problems.append("Production variant names must be unique within an endpoint config.")
    if any(not is_component_variant(v) for v in variants):
        # [U] wording: a config hosts either models (every variant names one) or inference
        # components (none does); AWS refuses components on a variant that names a model.
        problems.append("Either every production variant names a ModelName (an endpoint for "
                        "models) or none does (an endpoint for inference components); "
                        f"{', '.join(str(n) for n in names)} mix the two.")
    for variant in variants:
        name = variant.get("VariantName")
        if variant.get("ServerlessConfig") is not None:  # [U] wording
            problems.append(f"Production variant {name} hosts inference components, which run "
                            "on instances: ServerlessConfig is not supported for them.")
            continue
        if not variant.get("InstanceType") and not variant.get("InstancePools"):
            problems.append(f"InstanceType is required for production variant {name}.")
        if variant.get("InitialInstanceCount") is None:  # [U] wording
            problems.append(f"InitialInstanceCount is required for production variant {name}.")
        if variant.get("InstancePools") is not None:
            raise not_honoured("InstancePools")
        if variant.get("AcceleratorPartitionLayouts") is not None:
            raise not_honoured("AcceleratorPartitionLayouts (accelerator partitions)")
        problems += _scaling_problems(variant)
        problems += routing_config.problems(variant)
        strategy = routing_config.refused(variant)
        if strategy is not None:
            raise not_honoured(f"RoutingStrategy {strategy} (it routes by the container's "
                               "KV-cache contents; LEAST_OUTSTANDING_REQUESTS, RANDOM and "
                               "PREFIX_AWARE are supported)")
    if params.get("ShadowProductionVariants"):
        raise not_honoured("ShadowProductionVariants")
    weights = [v.get("InitialVariantWeight", 1.0) for v in variants]
    if variants and all(isinstance(w, (int, float)) for w in weights) and sum(weights) <= 0:
        problems.append("The sum of InitialVariantWeight across production variants must be "
                        "greater than 0.")
    if problems:
        raise wire.validation_error(format_errors(problems))


def _scaling_problems(variant: dict[str, Any]) -> list[str]:
    """ManagedInstanceScaling: MinInstanceCount <= InitialInstanceCount <= MaxInstanceCount."""
    scaling = variant.get("ManagedInstanceScaling")
    if not isinstance(scaling, dict):
        return []
    name = variant.get("VariantName")
    low, high = scaling.get("MinInstanceCount"), scaling.get("MaxInstanceCount")
    initial = variant.get("InitialInstanceCount")
    problems = []
    if isinstance(low, int) and isinstance(high, int) and low > high:  # [U] wording
        problems.append(f"ManagedInstanceScaling of production variant {name}: "
                        f"MinInstanceCount ({low}) must not exceed MaxInstanceCount ({high}).")
    if isinstance(initial, int) and isinstance(high, int) and initial > high:  # [U]
        problems.append(f"InitialInstanceCount ({initial}) of production variant {name} must not "
                        f"exceed its ManagedInstanceScaling MaxInstanceCount ({high}).")
    if isinstance(initial, int) and isinstance(low, int) and initial < low:  # [U]
        problems.append(f"InitialInstanceCount ({initial}) of production variant {name} must not "
                        f"be below its ManagedInstanceScaling MinInstanceCount ({low}).")
    return problems


_CHECKS = {
    "CreateInferenceComponent": _check_create,
    "UpdateInferenceComponent": _check_update,
    "DescribeInferenceComponent": _check_nothing,
    "ListInferenceComponents": _check_nothing,
    "UpdateInferenceComponentRuntimeConfig": _check_nothing,
    "DeleteInferenceComponent": _check_nothing,
    "CreateEndpointConfig": _check_component_config,
}
