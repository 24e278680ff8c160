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

With a DeploymentConfig (or RetainDeploymentConfig) the update is guarded as for an endpoint of
models (``control.guarded_updates``, AWS's deployment guardrails, which exclude no endpoint for
components): the new fleet (every component's copies placed on the new config's instances) starts
whole beside the running one, takes the plan's traffic shares step by step (canary, linear or all
at once; a call to a component goes to the new fleet's copies of it with the step's share), bakes,
and rolls back when an AutoRollbackConfiguration alarm goes into ALARM, the new copies fail to
start, or MaximumExecutionTimeoutInSeconds passes. [U] A RollingUpdatePolicy is refused: the
emulator does not move an endpoint for components in instance batches (use a
BlueGreenUpdatePolicy, or UpdateInferenceComponent's rolling update for one component).
[U] A restart of the emulator during such an update brings the endpoint back on its previous
config, InService, with the interruption as FailureReason (the new fleet's copies are gone).

Refused before anything changes (ValidationException, [U] wording unless said): a config of the
other kind (models onto an endpoint for components, or the reverse); a component in progress
(Creating, Updating, Deleting); a variant that hosts components missing from the new config; a
component whose copy would not fit on one instance of its variant's new type; a guarded plan
SageMaker refuses (``control.guarded_updates``).

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
from emulator.control.deployments import Progress
from emulator.control.guarded_updates import Fleet, GuardedUpdates
from emulator.control.runtimes import EndpointRuntimes
from emulator.control.state_db import Deployment, EndpointRecord
from emulator.hosting.component_copies import CopyTarget
from emulator.hosting.spec import EndpointSpec, MetricsOptions

log = logging.getLogger(__name__)

UPDATING, IN_SERVICE = "Updating", "InService"


class Components(Protocol):
    """What the update needs of the components (``control.inference_components``)."""

    def check_endpoint_move(self, endpoint: EndpointRecord,
                            variants: list[dict[str, Any]]) -> None: ...

    async def move_copies(self, endpoint_name: str) -> list[str]: ...

    def targets_on(self, endpoint_name: str, variants: list[dict[str, Any]]
                   ) -> dict[str, CopyTarget]: ...

    def replace_endpoint(self, endpoint_name: str) -> None: ...


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


def plan(guarded: GuardedUpdates, record: EndpointRecord, new: Deployment,
         config: dict[str, Any]) -> Progress:
    """A guarded update's plan for an endpoint for components, or SageMaker's error."""
    if config.get("RollingUpdatePolicy") is not None:  # [U] the emulator's own limit
        raise wire.validation_error(
            "RollingUpdatePolicy is not supported by the emulator for an endpoint for "
            "inference components (docs/inference-components.md); use a "
            "BlueGreenUpdatePolicy (all at once, canary or linear), or update each component "
            "with UpdateInferenceComponent's RollingUpdatePolicy.")
    return guarded.plan_fleets(
        [v["VariantName"] for v in record.current.variants],
        [Fleet(v["VariantName"], int(v.get("InitialInstanceCount") or 0), v.get("InstanceType"))
         for v in new.variants], new.config_name, config)


class NewFleet:
    """The generations a guarded update of an endpoint for components moves between
    (``control.deployments.Generations``): the registry's, except that the new fleet is every
    component's copies placed on the new config's instances."""

    def __init__(self, registry: EndpointRuntimes, components: Components, new: Deployment,
                 metrics: MetricsOptions) -> None:
        self._registry = registry
        self._components = components
        self._new = new
        self._metrics = metrics
        self.deployments = registry.deployments

    async def start_green(self, spec: EndpointSpec) -> Any:
        copies = self._components.targets_on(spec.name, self._new.variants)
        return await self._registry.start_component_green(spec.name, copies, self._metrics)

    async def resize_generation(self, name: str, green: bool, count: int) -> None:
        raise RuntimeError("an endpoint for components is never updated in instance batches")

    def shift(self, name: str, share: float) -> None:
        self._registry.shift(name, share)

    def traffic_share(self, name: str) -> float:
        return self._registry.traffic_share(name)

    def promote(self, name: str) -> Any:
        return self._registry.promote(name)

    async def retire(self, endpoint: Any) -> None:
        await self._registry.retire(endpoint)

    def green(self, name: str) -> Any:
        return self._registry.green(name)


async def run_guarded(guarded: GuardedUpdates, registry: EndpointRuntimes,
                      components: Components, name: str, new: Deployment,
                      progress: Progress, metrics: MetricsOptions) -> None:
    """The guarded update to its end; once promoted, the components' records are placed on
    the new config's instances (the copies already run there: nothing restarts)."""
    await guarded.run(name, new, progress, spec=EndpointSpec(name, ()),
                      running=EndpointSpec(name, ()),
                      generations=NewFleet(registry, components, new, metrics),
                      on_promoted=lambda: components.replace_endpoint(name))


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
