"""UpdateEndpoint on an endpoint for inference components.

AWS's UpdateEndpoint "deploys the EndpointConfig specified in the request to a new fleet of
instances ... and then deletes the old instances ... (there is no availability loss)" and sets
the endpoint ``Updating``, then ``InService`` (API reference, UpdateEndpoint). On an endpoint
for components the new config's variants (another InstanceType, InitialInstanceCount,
ManagedInstanceScaling, RoutingConfig) become the endpoint's and every component's copies are
placed on the new variants' instances (``emulator.hosting.placement``). A copy whose one-instance
variant changes (another InstanceType) is started anew beside the old one, and the old one leaves
routing, drains and stops only once the new one is ready (``ComponentCopies.apply``): the update
fails no call. A copy whose variant does not change (only the count, weights, routing or
scaling changed) keeps running [U: AWS restarts everything on a new fleet; the emulator does
not restart what would come back the same].

Refused before anything changes (ValidationException, [U] wording unless said): a config of the
other kind (models onto an endpoint for components, or the reverse); a DeploymentConfig (the
emulator does not support guarded deployments of an endpoint for components); a component in
progress (Creating, Updating, Deleting); a variant that hosts components missing from the new
config; a component whose copy would not fit on one instance of its variant's new type.

[U] If a component's copies cannot start on the new instances, the endpoint goes back to its
previous config (its old copies kept serving all along) and is ``InService`` with the reason as
``FailureReason``, as a failed UpdateEndpoint of an endpoint for models is.

The endpoint's record keeps the new config as ``pending`` until the copies moved, so a restart
in the middle of the update carries it to its end on the new config
(``service.restore``: an ``Updating`` endpoint comes back on its pending deployment, then the
components are placed again).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Protocol

from emulator.contract import control_plane as wire
from emulator.contract import inference_components as rules
from emulator.control.state_db import Deployment, EndpointRecord

log = logging.getLogger(__name__)

UPDATING, IN_SERVICE = "Updating", "InService"


class Components(Protocol):
    """What the update needs of the components (``control.inference_components``)."""

    def check_endpoint_move(self, endpoint: EndpointRecord,
                            variants: list[dict[str, Any]]) -> None: ...

    async def move_copies(self, endpoint_name: str) -> list[str]: ...


def is_for_components(deployment: Deployment) -> bool:
    variants = deployment.variants
    return bool(variants) and all(rules.is_component_variant(v) for v in variants)


def check_same_kind(running: Deployment, new: Deployment, endpoint_arn: str) -> None:
    """An endpoint for models stays one, an endpoint for components stays one. [U] wording:
    AWS's text is not published; the fix is a new endpoint."""
    if is_for_components(running) and not is_for_components(new):
        raise wire.validation_error(
            f'Endpoint "{endpoint_arn}" hosts inference components; endpoint config '
            f"{new.config_name} names a ModelName in its production variants. Update it to an "
            "endpoint config whose variants name no model, or create a new endpoint for the "
            "models.")
    if not is_for_components(running) and is_for_components(new):
        raise wire.validation_error(
            f'Endpoint "{endpoint_arn}" hosts models; endpoint config {new.config_name} is for '
            "inference components (its variants name no model). Update it to an endpoint "
            "config whose variants name a ModelName, or create a new endpoint for inference "
            "components.")


def prepare(record: EndpointRecord, new: Deployment, params: dict[str, Any],
            components: Components) -> Deployment:
    """The deployment the endpoint moves to, or SageMaker's error for what is refused."""
    if params.get("DeploymentConfig") is not None or params.get("RetainDeploymentConfig"):
        member = ("DeploymentConfig" if params.get("DeploymentConfig") is not None
                  else "RetainDeploymentConfig")
        raise wire.validation_error(
            f"{member} is not supported by the emulator for an endpoint for inference "
            "components (docs/inference-components.md); remove it: the update then moves the "
            "components' copies onto the new instances without failing a call.")
    variants = _retained(record.current.variants, new.variants, params)
    components.check_endpoint_move(record, variants)
    return dataclasses.replace(new, variants=variants)


def _retained(running: list[dict[str, Any]], new: list[dict[str, Any]],
              params: dict[str, Any]) -> list[dict[str, Any]]:
    """RetainAllVariantProperties: the running variants' instance counts and weights carry over
    to the new config's variants of the same name, except those excluded."""
    excluded = {p["VariantPropertyType"]
                for p in params.get("ExcludeRetainedVariantProperties") or []}
    if not params.get("RetainAllVariantProperties"):
        if excluded:  # [U] wording, as for an endpoint for models
            raise wire.validation_error(
                "ExcludeRetainedVariantProperties applies only when "
                "RetainAllVariantProperties is true.")
        return [dict(v) for v in new]
    by_name = {v["VariantName"]: v for v in running}
    variants = []
    for variant in new:
        variant = dict(variant)
        old = by_name.get(variant["VariantName"])
        if old is not None:
            if "DesiredInstanceCount" not in excluded:
                variant["InitialInstanceCount"] = old.get("InitialInstanceCount")
            if "DesiredWeight" not in excluded:
                variant["InitialVariantWeight"] = old.get("InitialVariantWeight", 1.0)
        variants.append(variant)
    return variants


Transition = Callable[..., None]


async def run(name: str, get: Callable[[str], EndpointRecord | None], transition: Transition,
              components: Components,
              configure_metrics: Callable[[str, Deployment], None]) -> None:
    """Move the endpoint onto its pending config (its MetricsConfig with it:
    ``configure_metrics``) and its components' copies onto the new instances; back to the
    previous config if they cannot start there."""
    record = get(name)
    if record is None or record.pending is None:
        return
    previous, new = record.current, record.pending
    transition(name, (UPDATING,), UPDATING, current=new)
    configure_metrics(name, new)
    try:
        failures = await components.move_copies(name)
    except Exception as exc:  # noqa: BLE001 - never left Updating: the previous config again
        failures = [str(exc) or type(exc).__name__]
    if not failures:
        transition(name, (UPDATING,), IN_SERVICE, pending=None, failure_reason=None)
        log.info("endpoint %s: now on endpoint config %s", name, new.config_name)
        return
    log.warning("endpoint %s: the components' copies failed to start on %s: %s", name,
                new.config_name, "; ".join(failures))
    # pending cleared first: a restart from here comes back on the previous config.
    transition(name, (UPDATING,), UPDATING, current=previous, pending=None)
    configure_metrics(name, previous)
    await components.move_copies(name)
    reason = (f"The update to endpoint config {new.config_name} failed and was rolled back: "
              f"the inference components' copies failed to start on its instances: "
              f"{'; '.join(failures)}")  # [U] wording
    transition(name, (UPDATING,), IN_SERVICE, failure_reason=reason[:1024])


def pending_summary(pending: Deployment) -> dict[str, Any]:
    """DescribeEndpoint's PendingDeploymentSummary while an endpoint for components moves to
    ``pending`` (botocore's PendingProductionVariantSummary members that apply)."""
    variants = []
    for variant in pending.variants:
        summary: dict[str, Any] = {
            "VariantName": variant["VariantName"],
            "DesiredWeight": float(variant.get("InitialVariantWeight", 1.0)),
            "DesiredInstanceCount": int(variant.get("InitialInstanceCount") or 0),
        }
        if variant.get("InstanceType"):
            summary["InstanceType"] = variant["InstanceType"]
        for member in ("ManagedInstanceScaling", "RoutingConfig"):
            if variant.get(member) is not None:
                summary[member] = variant[member]
        variants.append(summary)
    return {"EndpointConfigName": pending.config_name, "ProductionVariants": variants,
            "StartTime": pending.started}
