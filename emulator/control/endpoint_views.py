"""DescribeEndpoint and ListEndpoints as SageMaker renders them, from an endpoint's record and
what its runtime serves now.

Rendering only: nothing here changes state. During a guarded deployment the running fleet's
weights are scaled by the share of the calls it still takes, and the new fleet is the
PendingDeploymentSummary (Creating, then Baking with the step in StatusMessage).
"""

from __future__ import annotations

from typing import Any, Protocol

from emulator.contract.data_capture import CaptureRules
from emulator.control import component_endpoint_updates as endpoint_updates
from emulator.control.component_views import variant_summaries
from emulator.control.deployments import BAKING, STARTING, Progress
from emulator.control.specs import is_component_deployment
from emulator.control.state_db import Deployment, EndpointRecord
from emulator.hosting.spec import EndpointSpec, VariantSpec


class Runtimes(Protocol):
    """What rendering reads of the endpoint registry."""

    def get(self, name: str) -> Any: ...

    def green(self, name: str) -> Any: ...

    def traffic_share(self, name: str) -> float: ...


def summary(record: EndpointRecord, endpoint_arn: str) -> dict[str, Any]:
    """One endpoint of ListEndpoints."""
    return {
        "EndpointName": record.name,
        "EndpointArn": endpoint_arn,
        "CreationTime": record.created,
        "LastModifiedTime": record.modified,
        "EndpointStatus": record.status,
    }


def describe(record: EndpointRecord, endpoint_arn: str, runtimes: Runtimes) -> dict[str, Any]:
    """DescribeEndpoint's answer (before the wire drops its empty members)."""
    doc: dict[str, Any] = {
        "EndpointName": record.name,
        "EndpointArn": endpoint_arn,
        "EndpointConfigName": record.current.config_name or None,
        "EndpointStatus": record.status,
        "FailureReason": record.failure_reason,
        "CreationTime": record.created,
        "LastModifiedTime": record.modified,
    }
    progress = Progress.from_doc(record.deployment) if record.deployment else None
    # During a guarded deployment, the share of the calls the new fleet takes now.
    share = runtimes.traffic_share(record.name) if progress is not None else 0.0
    if record.current.spec:
        spec = EndpointSpec.from_doc(record.current.spec)
        desired = EndpointSpec.from_doc(record.desired) if record.desired else spec
        runtime = runtimes.get(record.name)
        if spec.async_config is not None:
            doc["AsyncInferenceConfig"] = spec.async_config
        if spec.capture_config is not None:
            doc["DataCaptureConfig"] = CaptureRules.of(spec.capture_config).summary()
        doc["ProductionVariants"] = [
            variant_summary(v, desired.variant(v.name) or v, runtime, record.current,
                            share=1.0 - share)
            for v in spec.variants
        ]
    elif is_component_deployment(record.current.variants):
        doc["ProductionVariants"] = variant_summaries(
            record.current.variants, in_service=record.status in ("InService", "Updating"))
    if record.pending is not None and not record.pending.spec:  # for components
        doc["PendingDeploymentSummary"] = endpoint_updates.pending_summary(record.pending)
    elif record.pending is not None:
        pending = EndpointSpec.from_doc(record.pending.spec)
        green = runtimes.green(record.name) if progress is not None else None
        doc["PendingDeploymentSummary"] = {
            "EndpointConfigName": record.pending.config_name,
            "ProductionVariants": [
                pending_summary(v, record.pending, green, share, progress)
                for v in pending.variants
            ],
            "StartTime": record.pending.started,
        }
    if record.last_deployment_config is not None:
        doc["LastDeploymentConfig"] = record.last_deployment_config
    return doc


def variant_summary(variant: VariantSpec, desired: VariantSpec, runtime: Any,
                    deployment: Deployment, share: float = 1.0) -> dict[str, Any]:
    """CurrentInstanceCount is what serves now (0 until the endpoint runs); Desired* is the
    target of an update in progress, else the same as Current*. CurrentWeight is the weight
    times the ``share`` of the calls this fleet takes (below 1 during a deployment) [U]."""
    serving = 0
    if runtime is not None:
        running = runtime.variant(variant.name)
        serving = len(running.serving()) if running is not None else 0
    summary: dict[str, Any] = {
        "VariantName": variant.name,
        "CurrentWeight": variant.weight * share,
        "DesiredWeight": desired.weight,
        "CurrentInstanceCount": serving,
        "DesiredInstanceCount": desired.instance_count,
    }
    images = [c.image for c in variant.containers if c.image]
    if images:  # one entry per container, in order
        summary["DeployedImages"] = [{"SpecifiedImage": image, "ResolvedImage": image,
                                      "ResolutionTime": deployment.started} for image in images]
    return summary


def pending_summary(variant: VariantSpec, deployment: Deployment, green: Any = None,
                    share: float = 0.0, progress: Progress | None = None) -> dict[str, Any]:
    """The new fleet: Creating while it starts, then (a guarded deployment) Baking with the
    step, its share of the traffic and the bake's length in StatusMessage [U]."""
    summary = variant_summary(variant, variant, green, deployment, share=share)
    status: dict[str, Any] = {"Status": "Creating", "StartTime": deployment.started}
    if progress is not None and progress.phase == BAKING:
        steps = len(progress.plan["shares"])
        message = (f"Step {progress.step + 1} of {steps}: {share:.0%} of traffic on the new "
                   f"fleet, baking for {progress.plan['bake_s']:.0f} seconds")
        if progress.resumed:
            message += " (resumed after an emulator restart; the bake started again)"
        status = {"Status": "Baking", "StatusMessage": message,
                  "StartTime": progress.step_started}
    elif progress is not None and progress.phase == STARTING and progress.resumed:
        status["StatusMessage"] = ("Starting again after an emulator restart; the deployment "
                                   f"resumes at step {progress.step + 1}")
    summary["VariantStatus"] = [status]
    if variant.instance_type:
        summary["InstanceType"] = variant.instance_type
    return summary
