"""Application Auto Scaling's API for SageMaker variants: behaviour only (the wire is ``wire``).

Scalable targets and policies live in memory (they are not restored after a restart). Policies
are target tracking; the evaluation that acts on them is ``emulator/autoscaling/engine.py``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from botocore import xform_name  # boto3's own operation -> method name

from emulator.autoscaling import rules
from emulator.autoscaling.capacity import SageMakerVariants
from emulator.autoscaling.state import Alarm, ScalableTarget, ScalingActivity, ScalingPolicy
from emulator.autoscaling.wire import MAX_RESULTS, ScalingError, not_found
from emulator.clock import Clock

_RESOURCE_ID = re.compile(r"endpoint/([^/]+)/variant/([^/]+)")
SUSPENDED = ("DynamicScalingInSuspended", "DynamicScalingOutSuspended",
             "ScheduledScalingSuspended")
MAX_ACTIVITIES = 1000  # per resource; older ones are forgotten  [U]


def _key_text(params: dict[str, Any]) -> str:
    return (f"service namespace: {params['ServiceNamespace']}, resource ID: "
            f"{params['ResourceId']}, scalable dimension: {params['ScalableDimension']}")


class AutoScalingService:
    def __init__(self, variants: SageMakerVariants, clock: Clock, region: str,
                 account: str) -> None:
        self.variants = variants
        self.clock = clock
        self.region = region
        self.account = account
        self.targets: dict[str, ScalableTarget] = {}  # by ResourceId
        self.policies: dict[tuple[str, str], ScalingPolicy] = {}  # (ResourceId, PolicyName)
        self.activities: dict[str, list[ScalingActivity]] = {}  # by ResourceId, oldest first

    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] = getattr(
            self, "_" + xform_name(operation))
        return await handler(params)

    # -----------------------------------------------------------------------------------------
    # Helpers

    def _check_dimension(self, params: dict[str, Any]) -> None:
        namespace, dimension = params.get("ServiceNamespace"), params.get("ScalableDimension")
        if namespace != rules.NAMESPACE or (dimension not in (None, rules.DIMENSION)):
            # [U] other namespaces are valid on AWS; the emulator only has SageMaker variants.
            raise ScalingError("The emulator scales SageMaker variants only: ServiceNamespace "
                               f"{rules.NAMESPACE}, ScalableDimension {rules.DIMENSION}.")
        resource = params.get("ResourceId")
        if resource is not None and not _RESOURCE_ID.fullmatch(resource):
            raise ScalingError("Unsupported service namespace, resource type or scalable "
                               "dimension")

    def _target(self, params: dict[str, Any]) -> ScalableTarget:
        target = self.targets.get(params["ResourceId"])
        if target is None:
            raise not_found(f"No scalable target registered for {_key_text(params)}")
        return target

    def record_activity(self, activity: ScalingActivity) -> None:
        history = self.activities.setdefault(activity.resource_id, [])
        history.append(activity)
        del history[:-MAX_ACTIVITIES]

    def _time(self, real: float, now: float) -> float:
        return self.clock.to_emulated(real, now)

    @staticmethod
    def _page(items: list[Any], params: dict[str, Any],
              operation: str) -> tuple[list[Any], str | None]:
        offset = _decode_token(params.get("NextToken"))
        limit = params.get("MaxResults") or MAX_RESULTS[operation]  # its range is checked (wire)
        page = items[offset: offset + limit]
        more = offset + limit < len(items)
        return page, (base64.urlsafe_b64encode(json.dumps({"offset": offset + limit})
                                               .encode()).decode() if more else None)

    # -----------------------------------------------------------------------------------------
    # Scalable targets

    async def _register_scalable_target(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        resource = params["ResourceId"]
        existing = self.targets.get(resource)
        minimum = params.get("MinCapacity", existing.min_capacity if existing else None)
        maximum = params.get("MaxCapacity", existing.max_capacity if existing else None)
        if minimum is None or maximum is None:
            # [U] wording
            raise ScalingError("MinCapacity and MaxCapacity are required to register a new "
                               "scalable target.")
        for name, value in (("MinCapacity", minimum), ("MaxCapacity", maximum)):
            if value < rules.MIN_VARIANT_CAPACITY:
                # [U] wording; the rule is SageMaker's ("must be set to at least 1").
                raise ScalingError(f"{name} must be at least {rules.MIN_VARIANT_CAPACITY} for "
                                   f"the scalable dimension {rules.DIMENSION}; {value} was "
                                   "given.")
        if minimum > maximum:
            raise ScalingError("Minimum capacity cannot be greater than maximum capacity")
        if existing is None and len(self.targets) >= rules.MAX_TARGETS:
            raise ScalingError(  # [U] wording
                f"You have reached the maximum number of scalable targets "
                f"({rules.MAX_TARGETS}) for resource type {rules.NAMESPACE} variants; "
                "deregister one first.", "LimitExceededException")
        endpoint, variant = resource.split("/")[1], resource.split("/")[3]
        if await self.variants.capacity(endpoint, variant) is None:
            # [U] wording: SageMaker's own answer is not published.
            raise ScalingError(f"The production variant {variant} of endpoint {endpoint} "
                               "does not exist.")
        suspended = {k: bool(v) for k, v in (params.get("SuspendedState") or {}).items()}
        if existing is not None:
            existing.min_capacity, existing.max_capacity = minimum, maximum
            existing.suspended.update(suspended)
            return {"ScalableTargetARN": existing.arn}
        target = ScalableTarget(
            resource_id=resource, min_capacity=minimum, max_capacity=maximum,
            role_arn=params.get("RoleARN") or (
                f"arn:aws:iam::{self.account}:role/aws-service-role/"
                "sagemaker.application-autoscaling.amazonaws.com/"
                "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"),
            arn=(f"arn:aws:application-autoscaling:{self.region}:{self.account}:"
                 f"scalable-target/056f{uuid.uuid4().hex}"),
            created=self.clock.now(), suspended=suspended)
        self.targets[resource] = target
        return {"ScalableTargetARN": target.arn}

    async def _deregister_scalable_target(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        if params["ResourceId"] not in self.targets:
            raise not_found(f"No scalable target found for {_key_text(params)}")
        del self.targets[params["ResourceId"]]
        for key in [k for k in self.policies if k[0] == params["ResourceId"]]:
            del self.policies[key]
        return {}

    async def _describe_scalable_targets(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        wanted = set(params.get("ResourceIds") or [])
        now = self.clock.now()
        found = [t for t in sorted(self.targets.values(), key=lambda t: t.created)
                 if not wanted or t.resource_id in wanted]
        page, token = self._page(found, params, "DescribeScalableTargets")
        return {"ScalableTargets": [{
            "ServiceNamespace": rules.NAMESPACE, "ResourceId": t.resource_id,
            "ScalableDimension": rules.DIMENSION, "MinCapacity": t.min_capacity,
            "MaxCapacity": t.max_capacity, "RoleARN": t.role_arn,
            "CreationTime": self._time(t.created, now), "ScalableTargetARN": t.arn,
            "SuspendedState": {k: t.suspended.get(k, False) for k in SUSPENDED},
        } for t in page], "NextToken": token}

    # -----------------------------------------------------------------------------------------
    # Policies

    async def _put_scaling_policy(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        target = self._target(params)
        policy_type = params.get("PolicyType", "StepScaling")
        if policy_type != "TargetTrackingScaling":
            # [U] step and predictive scaling are not emulated: refused, not silently ignored.
            raise ScalingError(f"PolicyType {policy_type} is not supported by the emulator; "
                               "use TargetTrackingScaling.")
        config = params.get("TargetTrackingScalingPolicyConfiguration")
        if not config:
            raise ScalingError("TargetTrackingScalingPolicyConfiguration is required for a "
                               "TargetTrackingScaling policy.")
        metric_query(config)  # refuses what cannot be tracked, before anything is stored
        _check_tracking_numbers(config)
        key = (target.resource_id, params["PolicyName"])
        existing = self.policies.get(key)
        if existing is None and sum(1 for resource, _ in self.policies
                                    if resource == target.resource_id
                                    ) >= rules.MAX_POLICIES_PER_TARGET:
            raise ScalingError(  # [U] wording; the quota is documented and not adjustable
                f"The scalable target {target.resource_id} already has "
                f"{rules.MAX_POLICIES_PER_TARGET} scaling policies, the most it may have; "
                "delete one or update an existing one.", "LimitExceededException")
        if existing is not None:
            existing.configuration = dict(config)
            policy = existing
        else:
            guid = str(uuid.uuid4())
            prefix = f"TargetTracking-{target.resource_id}"
            policy = ScalingPolicy(
                name=params["PolicyName"], resource_id=target.resource_id,
                policy_type=policy_type, configuration=dict(config),
                arn=(f"arn:aws:autoscaling:{self.region}:{self.account}:scalingPolicy:{guid}:"
                     f"resource/sagemaker/{target.resource_id}:policyName/{params['PolicyName']}"),
                created=self.clock.now(),
                high=self._alarm(f"{prefix}-AlarmHigh-{uuid.uuid4()}"),
                low=self._alarm(f"{prefix}-AlarmLow-{uuid.uuid4()}"))
            self.policies[key] = policy
        return {"PolicyARN": policy.arn, "Alarms": self._alarms(policy)}

    def _alarm(self, name: str) -> Alarm:
        return Alarm(name, f"arn:aws:cloudwatch:{self.region}:{self.account}:alarm:{name}")

    @staticmethod
    def _alarms(policy: ScalingPolicy) -> list[dict[str, str]]:
        return [{"AlarmName": a.name, "AlarmARN": a.arn} for a in (policy.high, policy.low)]

    async def _describe_scaling_policies(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        names = set(params.get("PolicyNames") or [])
        now = self.clock.now()
        found = [p for p in sorted(self.policies.values(), key=lambda p: p.created)
                 if (not params.get("ResourceId") or p.resource_id == params["ResourceId"])
                 and (not names or p.name in names)]
        page, token = self._page(found, params, "DescribeScalingPolicies")
        return {"ScalingPolicies": [{
            "PolicyARN": p.arn, "PolicyName": p.name, "ServiceNamespace": rules.NAMESPACE,
            "ResourceId": p.resource_id, "ScalableDimension": rules.DIMENSION,
            "PolicyType": p.policy_type,
            "TargetTrackingScalingPolicyConfiguration": p.configuration,
            "Alarms": self._alarms(p), "CreationTime": self._time(p.created, now),
        } for p in page], "NextToken": token}

    async def _delete_scaling_policy(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        key = (params["ResourceId"], params["PolicyName"])
        if key not in self.policies:
            raise not_found(f"No scaling policy found for {_key_text(params)}, "
                            f"policy name: {params['PolicyName']}")
        del self.policies[key]
        return {}

    # -----------------------------------------------------------------------------------------
    # Activities

    async def _describe_scaling_activities(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        now = self.clock.now()
        found = [a for resource, history in self.activities.items()
                 if not params.get("ResourceId") or resource == params["ResourceId"]
                 for a in history]
        found.sort(key=lambda a: a.started, reverse=True)  # newest first, as AWS lists them
        page, token = self._page(found, params, "DescribeScalingActivities")
        out = []
        for a in page:
            item: dict[str, Any] = {
                "ActivityId": a.activity_id, "ServiceNamespace": rules.NAMESPACE,
                "ResourceId": a.resource_id, "ScalableDimension": rules.DIMENSION,
                "Description": a.description, "Cause": a.cause,
                "StartTime": self._time(a.started, now), "StatusCode": a.status,
            }
            if a.ended is not None:
                item["EndTime"] = self._time(a.ended, now)
            if a.message:
                item["StatusMessage"] = a.message
            out.append(item)
        return {"ScalingActivities": out, "NextToken": token}


def _check_tracking_numbers(config: dict[str, Any]) -> None:
    """TargetValue and the cooldowns: numbers the scaling formula can use."""
    value = config["TargetValue"]  # required and a finite number (wire)
    if not 0 < value <= rules.MAX_TARGET_VALUE:
        # [U] wording. AWS: "Values must be in the range of -2^360 to 2^360" and "a valid number
        # based on the choice of metric"; a count per instance to aim for is above 0.
        raise ScalingError(f"TargetValue must be greater than 0 and at most 2^360 for "
                           f"{rules.DIMENSION}; {value} was given.")
    for name in ("ScaleOutCooldown", "ScaleInCooldown"):
        if config.get(name) is not None and config[name] < 0:
            raise ScalingError(f"{name} must be 0 or more seconds; {config[name]} was given.")


def _decode_token(token: str | None) -> int:
    """The offset a NextToken of ours carries; InvalidNextTokenException for anything else."""
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(token.encode()))["offset"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        offset = None
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ScalingError("Invalid NextToken", "InvalidNextTokenException")
    return offset


def metric_query(config: dict[str, Any]) -> rules.MetricQuery:
    """The metric a target tracking configuration tracks; ValidationException if unusable."""
    predefined: dict[str, Any] = config.get("PredefinedMetricSpecification") or {}
    customized: dict[str, Any] = config.get("CustomizedMetricSpecification") or {}
    if bool(predefined) == bool(customized):
        raise ScalingError("Exactly one of PredefinedMetricSpecification and "
                           "CustomizedMetricSpecification must be specified.")
    if predefined:
        kind = predefined["PredefinedMetricType"]
        if kind not in rules.PREDEFINED:
            # [U] wording
            raise ScalingError(f"Unsupported metric type {kind} for scalable dimension "
                               f"{rules.DIMENSION}.")
        return rules.PREDEFINED[kind]
    if customized.get("Metrics"):
        # [U] metric math in a customized metric is not emulated.
        raise ScalingError("CustomizedMetricSpecification.Metrics (metric math) is not "
                           "supported by the emulator; give MetricName, Namespace, Dimensions "
                           "and Statistic.")
    missing = [m for m in ("MetricName", "Namespace", "Statistic") if not customized.get(m)]
    if missing:
        raise ScalingError(f"CustomizedMetricSpecification is missing {', '.join(missing)}.")
    dimensions = tuple(sorted((d["Name"], d["Value"]) for d in customized.get("Dimensions") or []))
    return rules.MetricQuery(customized["Namespace"], customized["MetricName"],
                             customized["Statistic"], customized.get("Unit"), dimensions)
