"""Target tracking as Application Auto Scaling documents it, and every undocumented choice ([U]).

Documented (Application Auto Scaling user guide, SageMaker's auto scaling guide):
- a target tracking policy creates two CloudWatch alarms: ``AlarmHigh`` (metric above the target
  for 3 datapoints of one minute) and ``AlarmLow`` (metric below a lower threshold for 15
  datapoints of one minute): it scales out fast and in slowly;
- scale out is proportional: desired = ceil(capacity * metric / target), within Min/Max;
- it does not scale in when removing capacity would push the metric above the target;
- ``SageMakerVariantInvocationsPerInstance`` is the per-minute Sum of InvocationsPerInstance;
- SageMaker's default cooldowns are 300 s; DisableScaleIn stops scale in only;
- with no traffic InvocationsPerInstance has no datapoints, so the low alarm never fires and an
  idle endpoint is not scaled in (the AlarmLow stays INSUFFICIENT_DATA);
- an inference component's copies scale as a variant's instances do, on
  ``sagemaker:inference-component:DesiredCopyCount`` (ResourceId ``inference-component/<name>``),
  down to MinCapacity 0 (SageMaker's "Scale an endpoint to zero instances"); from 0 copies only a
  step scaling policy scales out (target tracking's proportion of 0 is 0).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

PERIOD_S = 60  # emulated seconds per alarm datapoint
HIGH_DATAPOINTS = 3
LOW_DATAPOINTS = 15
DEFAULT_COOLDOWN_S = 300

# [U] The low alarm's threshold: the guide says "typically 10% or more below the target".
LOW_THRESHOLD_FACTOR = 0.9
# The two alarms are real CloudWatch alarms (emulator/cloudwatch/alarms.py), visible in
# DescribeAlarms, evaluated with TreatMissingData missing; the policy runs when one is in ALARM,
# again at every evaluation while it stays there. The formula uses the most recent datapoint.
# When policies disagree (target tracking and step scaling alike), the largest capacity wins.
# [U] While the endpoint is not InService (an update in progress) nothing is evaluated; the next
#     period tries again, as Application Auto Scaling retries a refused change.
# [U] During ScaleOutCooldown no further scale-out starts (AWS lets a larger one through); during
#     ScaleInCooldown, counted from the end of the last scale-in, no scale-in starts.
# [U] Several target tracking policies: scale out to the largest proposal; scale in only when all
#     policies propose it, to the largest of their proposals (the documented intent).
# [U] Capacity outside Min/Max after RegisterScalableTarget is corrected by the next evaluation.


@dataclass(frozen=True)
class MetricQuery:
    namespace: str
    metric_name: str
    statistic: str
    unit: str | None = None
    # None: the resource's own dimensions, as for the predefined metrics: (EndpointName,
    # VariantName) of a variant, InferenceComponentName of an inference component.
    dimensions: tuple[tuple[str, str], ...] | None = None
    # CustomizedMetricSpecification.Metrics (metric math), as given; then the rest is unused.
    metrics: tuple[dict[str, Any], ...] = ()
    # Seconds per alarm datapoint: one minute, or 10 s for a high-resolution metric.
    period: int = 60


DIMENSION = "sagemaker:variant:DesiredInstanceCount"
COMPONENT_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
NAMESPACE = "sagemaker"
# ResourceId of each scalable dimension (Application Auto Scaling's ResourceId reference).
VARIANT_RESOURCE = re.compile(r"endpoint/([^/]+)/variant/([^/]+)")
COMPONENT_RESOURCE = re.compile(r"inference-component/([^/]+)")

# Predefined metric types per scalable dimension; the other SageMaker ones (provisioned
# concurrency of serverless variants, concurrent requests per model, which the emulator does not
# publish) are refused.
# - SageMakerVariantInvocationsPerInstance: per-minute Sum of InvocationsPerInstance.
# - SageMakerInferenceComponentInvocationsPerCopy: per-minute Sum of InvocationsPerCopy, dimension
#   InferenceComponentName (SageMaker's guide, "Define a scaling policy").
# - SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution: ConcurrentRequestsPerCopy,
#   a high-resolution metric SageMaker publishes every 10 s, statistic Maximum; [U] its alarms
#   take 10-second datapoints (AWS says the high-resolution metrics make scaling "faster" and
#   does not publish the alarms' period).
PREDEFINED_BY_DIMENSION = {
    DIMENSION: {
        "SageMakerVariantInvocationsPerInstance": MetricQuery(
            "AWS/SageMaker", "InvocationsPerInstance", "Sum"),
    },
    COMPONENT_DIMENSION: {
        "SageMakerInferenceComponentInvocationsPerCopy": MetricQuery(
            "AWS/SageMaker", "InvocationsPerCopy", "Sum"),
        "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution": MetricQuery(
            "AWS/SageMaker", "ConcurrentRequestsPerCopy", "Maximum", period=10),
    },
}
PREDEFINED = PREDEFINED_BY_DIMENSION[DIMENSION]
# Quotas (Application Auto Scaling's "Quotas" page): scaling policies per scalable target, not
# adjustable; scalable targets per resource type ("other resource types": SageMaker's).
MAX_POLICIES_PER_TARGET = 50
MAX_TARGETS = 500
# SageMaker's "Register a model": MinCapacity and MaxCapacity "must be set to at least 1" for a
# variant's DesiredInstanceCount. An inference component's DesiredCopyCount may go down to 0
# (SageMaker's "Scale an endpoint to zero instances": register it with MinCapacity 0).
MIN_VARIANT_CAPACITY = 1
MIN_CAPACITY = {DIMENSION: MIN_VARIANT_CAPACITY, COMPONENT_DIMENSION: 0}
# TargetTrackingScalingPolicyConfiguration.TargetValue: "in the range of -2^360 to 2^360".
MAX_TARGET_VALUE = 2.0 ** 360


def dimension_of(resource_id: str) -> str | None:
    """The scalable dimension a ResourceId names, None when it names neither."""
    if VARIANT_RESOURCE.fullmatch(resource_id):
        return DIMENSION
    if COMPONENT_RESOURCE.fullmatch(resource_id):
        return COMPONENT_DIMENSION
    return None


def unit_of(dimension: str) -> str:
    """What the dimension counts, in the words of the activities' descriptions."""
    return "copy count" if dimension == COMPONENT_DIMENSION else "instance count"


def scale_out_capacity(capacity: int, metric: float, target: float, maximum: int) -> int:
    return min(maximum, max(capacity, math.ceil(capacity * metric / target)))


def scale_in_capacity(capacity: int, metric: float, target: float, minimum: int) -> int:
    # ceil keeps metric * capacity / new <= target: never scale in past the target.
    return max(minimum, min(capacity, math.ceil(capacity * metric / target)))
