"""Application Auto Scaling's API for SageMaker variants and inference components: behaviour
only (the wire is ``wire``).

Scalable targets, policies and activities are kept in a JSON file in the cache folder and come
back after a restart. Policies are target tracking (whose two CloudWatch alarms this service
creates in the ``AlarmStore``, as AWS does) or step scaling (run by the alarms a user points at
the policy's ARN); ``emulator/autoscaling/scaling_engine.py`` runs them when their alarms fire.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from botocore import xform_name  # boto3's own operation -> method name

from emulator.autoscaling import rules, step
from emulator.autoscaling.capacity import SageMakerVariants
from emulator.autoscaling.state import (
    Alarm,
    ScalableTarget,
    ScalingActivity,
    ScalingPolicy,
    policy_from,
)
from emulator.autoscaling.wire import MAX_RESULTS, ScalingError, not_found
from emulator.clock import Clock
from emulator.cloudwatch.alarm_checks import check_metric_alarm
from emulator.cloudwatch.alarm_model import METRIC_ALARM
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.cloudwatch_errors import CloudWatchError

log = logging.getLogger(__name__)

SUSPENDED = ("DynamicScalingInSuspended", "DynamicScalingOutSuspended",
             "ScheduledScalingSuspended")
MAX_ACTIVITIES = 1000  # per resource; older ones are forgotten  [U]


def _key_text(params: dict[str, Any]) -> str:
    return (f"service namespace: {params['ServiceNamespace']}, resource ID: "
            f"{params['ResourceId']}, scalable dimension: {params['ScalableDimension']}")


class AutoScalingService:
    def __init__(self, variants: SageMakerVariants, clock: Clock, region: str,
                 account: str, alarms: AlarmStore | None = None,
                 state_file: Path | None = None) -> None:
        self.variants = variants
        self.clock = clock
        self.region = region
        self.account = account
        self.alarms = alarms
        self.state_file = state_file
        self.targets: dict[str, ScalableTarget] = {}  # by ResourceId
        self.policies: dict[tuple[str, str], ScalingPolicy] = {}  # (ResourceId, PolicyName)
        self.activities: dict[str, list[ScalingActivity]] = {}  # by ResourceId, oldest first
        # Told of each activity as it starts (the live page's history; the composition root).
        self.activity_listeners: list[Callable[[ScalingActivity, ScalingPolicy | None],
                                               None]] = []
        self._load()

    # -----------------------------------------------------------------------------------------
    # Persistence: the whole state, written after every change (a handful of objects)

    def _load(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        try:
            saved = json.loads(self.state_file.read_text())
            self.targets = {t["resource_id"]: ScalableTarget(**t) for t in saved["targets"]}
            for item in saved["policies"]:
                policy = policy_from(item)
                self.policies[(policy.resource_id, policy.name)] = policy
            for item in saved["activities"]:
                activity = ScalingActivity(**item)  # InProgress: the next visit settles it
                self.activities.setdefault(activity.resource_id, []).append(activity)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("scaling state not restored: %s is unreadable (%s)", self.state_file,
                        exc)

    def save(self) -> None:
        if self.state_file is None:
            return
        text = json.dumps({
            "targets": [asdict(t) for t in self.targets.values()],
            "policies": [asdict(p) for p in self.policies.values()],
            "activities": [asdict(a) for history in self.activities.values() for a in history],
        })
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(text)
        os.replace(temporary, self.state_file)

    # -----------------------------------------------------------------------------------------
    # The whole state at once (reset, snapshots: ``emulator.state``)

    def export(self) -> dict[str, list[dict[str, Any]]]:
        """Scalable targets and policies as stored (activities are history: not included)."""
        return {"targets": [asdict(t) for t in self.targets.values()],
                "policies": [asdict(p) for p in self.policies.values()]}

    def clear(self) -> dict[str, int]:
        """Every target, policy and activity forgotten, and the state file removed (a new
        server has none); how many targets and policies there were. The alarms of target
        tracking policies are the alarm store's to clear."""
        removed = {"targets": len(self.targets), "policies": len(self.policies)}
        self.targets, self.policies, self.activities = {}, {}, {}
        if self.state_file is not None:
            self.state_file.unlink(missing_ok=True)
        return removed

    def load(self, saved: dict[str, list[dict[str, Any]]]) -> None:
        """``export``'s targets and policies added, then saved; ValueError naming what is not a
        target or a policy, or exists already (nothing is added then)."""
        try:
            targets = [ScalableTarget(**t) for t in saved.get("targets", [])]
            policies = [policy_from(dict(p)) for p in saved.get("policies", [])]
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"a scalable target or policy is not in its stored form ({exc})") \
                from None
        for target in targets:
            if target.resource_id in self.targets:
                raise ValueError(f"the scalable target {target.resource_id} exists already")
        for policy in policies:
            if (policy.resource_id, policy.name) in self.policies:
                raise ValueError(f"the scaling policy {policy.name} exists already")
        self.targets.update({t.resource_id: t for t in targets})
        self.policies.update({(p.resource_id, p.name): p for p in policies})
        self.save()

    def policy_by_arn(self, arn: str) -> ScalingPolicy | None:
        return next((p for p in self.policies.values() if p.arn == arn), None)

    async def handle(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] = getattr(
            self, "_" + xform_name(operation))
        out = await handler(params)
        if not operation.startswith("Describe"):
            self.save()
        return out

    # -----------------------------------------------------------------------------------------
    # Helpers

    def _check_dimension(self, params: dict[str, Any]) -> None:
        namespace, dimension = params.get("ServiceNamespace"), params.get("ScalableDimension")
        if namespace != rules.NAMESPACE or (
                dimension not in (None, rules.DIMENSION, rules.COMPONENT_DIMENSION)):
            # [U] other namespaces are valid on AWS; the emulator only has SageMaker variants
            # and inference components.
            raise ScalingError(
                "The emulator scales SageMaker variants and inference components only: "
                f"ServiceNamespace {rules.NAMESPACE}, ScalableDimension {rules.DIMENSION} "
                f"(ResourceId endpoint/<endpoint>/variant/<variant>) or "
                f"{rules.COMPONENT_DIMENSION} (ResourceId inference-component/<name>).")
        resource = params.get("ResourceId")
        if resource is not None and (
                rules.dimension_of(resource) is None
                or (dimension is not None and rules.dimension_of(resource) != dimension)):
            raise ScalingError("Unsupported service namespace, resource type or scalable "
                               "dimension")

    def _check_existing_key(self, params: dict[str, Any], missing: str) -> None:
        """Deregister and DeleteScalingPolicy name an existing target: a SageMaker ResourceId
        with the other SageMaker dimension (an inference component with
        sagemaker:variant:DesiredInstanceCount, as AWS's own inference-component notebooks
        clean up, catching only ObjectNotFoundException) names none, so it is not found. [U]:
        RegisterScalableTarget and the rest still refuse the pair as invalid."""
        resource, dimension = params.get("ResourceId"), params.get("ScalableDimension")
        if (params.get("ServiceNamespace") == rules.NAMESPACE
                and dimension in (rules.DIMENSION, rules.COMPONENT_DIMENSION)
                and resource is not None
                and rules.dimension_of(resource) not in (None, dimension)):
            raise not_found(missing)
        self._check_dimension(params)

    @staticmethod
    def _wanted(params: dict[str, Any], resource_id: str) -> bool:
        """A Describe* filter: the ScalableDimension asked for, if any."""
        dimension = params.get("ScalableDimension")
        return dimension is None or rules.dimension_of(resource_id) == dimension

    def _target(self, params: dict[str, Any]) -> ScalableTarget:
        target = self.targets.get(params["ResourceId"])
        if target is None:
            raise not_found(f"No scalable target registered for {_key_text(params)}")
        return target

    def record_activity(self, activity: ScalingActivity) -> None:
        history = self.activities.setdefault(activity.resource_id, [])
        history.append(activity)
        del history[:-MAX_ACTIVITIES]
        policy = self.policy_by_arn(activity.policy_arn) if activity.policy_arn else None
        for listener in self.activity_listeners:
            listener(activity, policy)

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
        dimension = rules.dimension_of(resource) or rules.DIMENSION
        # The rule is SageMaker's: "must be set to at least 1" for a variant; MinCapacity 0 for
        # a component that scales to zero, or a variant of an asynchronous endpoint, whose
        # MaxCapacity stays at least 1 [U].
        least = rules.MIN_CAPACITY[dimension]
        if least and await self.variants.scales_to_zero(resource):
            least = 0  # an asynchronous endpoint's variant scales to zero
        for name, value, bound in (("MinCapacity", minimum, least),
                                   ("MaxCapacity", maximum, max(least, 1))):
            if value < bound:  # [U] wording
                raise ScalingError(f"{name} must be at least {bound} for the scalable "
                                   f"dimension {dimension}; {value} was given.")
        if minimum > maximum:
            raise ScalingError("Minimum capacity cannot be greater than maximum capacity")
        if existing is None and len(self.targets) >= rules.MAX_TARGETS:
            raise ScalingError(  # [U] wording
                f"You have reached the maximum number of scalable targets "
                f"({rules.MAX_TARGETS}) for resource type {rules.NAMESPACE} variants; "
                "deregister one first.", "LimitExceededException")
        if await self.variants.of(resource) is None:
            raise ScalingError(_missing(resource))
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
        missing = f"No scalable target found for {_key_text(params)}"
        self._check_existing_key(params, missing)
        if params["ResourceId"] not in self.targets:
            raise not_found(missing)
        del self.targets[params["ResourceId"]]
        for key in [k for k in self.policies if k[0] == params["ResourceId"]]:
            self._drop_alarms(self.policies.pop(key))
        return {}

    async def _describe_scalable_targets(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        wanted = set(params.get("ResourceIds") or [])
        now = self.clock.now()
        found = [t for t in sorted(self.targets.values(), key=lambda t: t.created)
                 if (not wanted or t.resource_id in wanted) and self._wanted(params,
                                                                             t.resource_id)]
        page, token = self._page(found, params, "DescribeScalableTargets")
        return {"ScalableTargets": [{
            "ServiceNamespace": rules.NAMESPACE, "ResourceId": t.resource_id,
            "ScalableDimension": t.dimension, "MinCapacity": t.min_capacity,
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
        tracking_config = params.get("TargetTrackingScalingPolicyConfiguration")
        step_config = params.get("StepScalingPolicyConfiguration")
        if policy_type == "TargetTrackingScaling":
            if not tracking_config:
                raise ScalingError("TargetTrackingScalingPolicyConfiguration is required for "
                                   "a TargetTrackingScaling policy.")
            if step_config:
                raise ScalingError("StepScalingPolicyConfiguration cannot be given for a "
                                   "TargetTrackingScaling policy.")  # [U] wording
            metric_query(tracking_config, target.dimension)  # refused before storing
            _check_tracking_numbers(tracking_config, target.dimension)
            config = dict(tracking_config)
        elif policy_type == "StepScaling":
            if tracking_config:
                raise ScalingError("TargetTrackingScalingPolicyConfiguration cannot be given "
                                   "for a StepScaling policy.")  # [U] wording
            step.check(step_config)
            config = dict(step_config or {})
        else:
            # [U] predictive scaling is not emulated: refused, not silently ignored.
            raise ScalingError(f"PolicyType {policy_type} is not supported by the emulator; "
                               "use TargetTrackingScaling or StepScaling.")
        key = (target.resource_id, params["PolicyName"])
        existing = self.policies.get(key)
        if existing is None and sum(1 for resource, _ in self.policies
                                    if resource == target.resource_id
                                    ) >= rules.MAX_POLICIES_PER_TARGET:
            raise ScalingError(  # [U] wording; the quota is documented and not adjustable
                f"The scalable target {target.resource_id} already has "
                f"{rules.MAX_POLICIES_PER_TARGET} scaling policies, the most it may have; "
                "delete one or update an existing one.", "LimitExceededException")
        if existing is not None and existing.policy_type != policy_type:
            # [U] AWS's answer is not published; a policy keeps its type
            raise ScalingError(f"The policy {existing.name} is a {existing.policy_type} "
                               "policy; delete it first to make it another type.")
        guid = str(uuid.uuid4())
        prefix = f"TargetTracking-{target.resource_id}"
        policy = existing or ScalingPolicy(
            name=params["PolicyName"], resource_id=target.resource_id,
            policy_type=policy_type, configuration=config,
            arn=(f"arn:aws:autoscaling:{self.region}:{self.account}:scalingPolicy:{guid}:"
                 f"resource/sagemaker/{target.resource_id}:policyName/{params['PolicyName']}"),
            created=self.clock.now())
        if policy_type == "TargetTrackingScaling":
            high = policy.high or self._alarm(f"{prefix}-AlarmHigh-{uuid.uuid4()}")
            low = policy.low or self._alarm(f"{prefix}-AlarmLow-{uuid.uuid4()}")
            alarm_configs = [(a, tracking_alarm(policy.arn, config, target, a is high))
                             for a in (high, low)]
            for _, alarm_config in alarm_configs:  # both checked before either is stored
                try:
                    check_metric_alarm(alarm_config)
                except CloudWatchError as exc:
                    raise ScalingError(f"The metric cannot be tracked: {exc.message}") from exc
            if self.alarms is not None:
                for alarm, alarm_config in alarm_configs:
                    self.alarms.put(alarm.name, METRIC_ALARM, alarm_config, {})
            policy.high, policy.low = high, low
        policy.configuration = config
        self.policies[key] = policy
        return {"PolicyARN": policy.arn, "Alarms": self._alarms(policy)}

    def _alarm(self, name: str) -> Alarm:
        return Alarm(name, f"arn:aws:cloudwatch:{self.region}:{self.account}:alarm:{name}")

    def _drop_alarms(self, policy: ScalingPolicy) -> None:
        """A target tracking policy's alarms go with it, as on AWS."""
        if self.alarms is None:
            return
        names = [a.name for a in (policy.high, policy.low)
                 if a is not None and self.alarms.exists(a.name)]
        if names:
            self.alarms.delete(names)

    def _alarms(self, policy: ScalingPolicy) -> list[dict[str, str]]:
        if policy.tracking:
            return [{"AlarmName": a.name, "AlarmARN": a.arn} for a in (policy.high, policy.low)
                    if a is not None]
        if self.alarms is None:  # step scaling: the alarms whose actions run it
            return []
        return [{"AlarmName": a.name, "AlarmARN": a.arn} for a in self.alarms.all()
                if any(policy.arn in a.actions_for(s) for s in ("OK", "ALARM",
                                                                "INSUFFICIENT_DATA"))]

    async def _describe_scaling_policies(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        names = set(params.get("PolicyNames") or [])
        now = self.clock.now()
        found = [p for p in sorted(self.policies.values(), key=lambda p: p.created)
                 if (not params.get("ResourceId") or p.resource_id == params["ResourceId"])
                 and (not names or p.name in names) and self._wanted(params, p.resource_id)]
        page, token = self._page(found, params, "DescribeScalingPolicies")
        return {"ScalingPolicies": [{
            "PolicyARN": p.arn, "PolicyName": p.name, "ServiceNamespace": rules.NAMESPACE,
            "ResourceId": p.resource_id,
            "ScalableDimension": rules.dimension_of(p.resource_id) or rules.DIMENSION,
            "PolicyType": p.policy_type,
            ("TargetTrackingScalingPolicyConfiguration" if p.tracking
             else "StepScalingPolicyConfiguration"): p.configuration,
            "Alarms": self._alarms(p), "CreationTime": self._time(p.created, now),
        } for p in page], "NextToken": token}

    async def _delete_scaling_policy(self, params: dict[str, Any]) -> dict[str, Any]:
        missing = (f"No scaling policy found for {_key_text(params)}, "
                   f"policy name: {params['PolicyName']}")
        self._check_existing_key(params, missing)
        key = (params["ResourceId"], params["PolicyName"])
        if key not in self.policies:
            raise not_found(missing)
        self._drop_alarms(self.policies.pop(key))
        return {}

    # -----------------------------------------------------------------------------------------
    # Activities

    async def _describe_scaling_activities(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_dimension(params)
        now = self.clock.now()
        found = [a for resource, history in self.activities.items()
                 if (not params.get("ResourceId") or resource == params["ResourceId"])
                 and self._wanted(params, resource) for a in history]
        found.sort(key=lambda a: a.started, reverse=True)  # newest first, as AWS lists them
        page, token = self._page(found, params, "DescribeScalingActivities")
        out = []
        for a in page:
            item: dict[str, Any] = {
                "ActivityId": a.activity_id, "ServiceNamespace": rules.NAMESPACE,
                "ResourceId": a.resource_id,
                "ScalableDimension": rules.dimension_of(a.resource_id) or rules.DIMENSION,
                "Description": a.description, "Cause": a.cause,
                "StartTime": self._time(a.started, now), "StatusCode": a.status,
            }
            if a.ended is not None:
                item["EndTime"] = self._time(a.ended, now)
            if a.message:
                item["StatusMessage"] = a.message
            out.append(item)
        return {"ScalingActivities": out, "NextToken": token}


def _missing(resource: str) -> str:
    """[U] wording: Application Auto Scaling's answer for a SageMaker resource that does not
    exist is not published; this names the resource and what to do."""
    found = rules.COMPONENT_RESOURCE.fullmatch(resource)
    if found is not None:
        return (f"The inference component {found.group(1)} does not exist. Create it "
                "(CreateInferenceComponent) before registering it as a scalable target.")
    _, endpoint, _, variant = resource.split("/", 3)
    return f"The production variant {variant} of endpoint {endpoint} does not exist."


def _check_tracking_numbers(config: dict[str, Any], dimension: str) -> None:
    """TargetValue and the cooldowns: numbers the scaling formula can use."""
    value = config["TargetValue"]  # required and a finite number (wire)
    if not 0 < value <= rules.MAX_TARGET_VALUE:
        # [U] wording. AWS: "Values must be in the range of -2^360 to 2^360" and "a valid number
        # based on the choice of metric"; a count per instance to aim for is above 0.
        raise ScalingError(f"TargetValue must be greater than 0 and at most 2^360 for "
                           f"{dimension}; {value} was given.")
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


def metric_query(config: dict[str, Any],
                 dimension: str = rules.DIMENSION) -> rules.MetricQuery:
    """The metric a target tracking configuration tracks; ValidationException if unusable."""
    predefined: dict[str, Any] = config.get("PredefinedMetricSpecification") or {}
    customized: dict[str, Any] = config.get("CustomizedMetricSpecification") or {}
    if bool(predefined) == bool(customized):
        raise ScalingError("Exactly one of PredefinedMetricSpecification and "
                           "CustomizedMetricSpecification must be specified.")
    if predefined:
        kind = predefined["PredefinedMetricType"]
        predefined_types = rules.PREDEFINED_BY_DIMENSION[dimension]
        if kind not in predefined_types:
            # [U] wording
            raise ScalingError(f"Unsupported metric type {kind} for scalable dimension "
                               f"{dimension} (supported: {', '.join(predefined_types)}).")
        return predefined_types[kind]
    if customized.get("Metrics"):
        others = [m for m in ("MetricName", "Namespace", "Statistic", "Dimensions", "Unit")
                  if customized.get(m) is not None]
        if others:
            raise ScalingError("CustomizedMetricSpecification.Metrics cannot be combined with "
                               f"{', '.join(others)}.")  # [U] wording
        return rules.MetricQuery("", "", "", metrics=tuple(customized["Metrics"]))
    missing = [m for m in ("MetricName", "Namespace", "Statistic") if not customized.get(m)]
    if missing:
        raise ScalingError(f"CustomizedMetricSpecification is missing {', '.join(missing)}.")
    dimensions = tuple(sorted((d["Name"], d["Value"]) for d in customized.get("Dimensions") or []))
    return rules.MetricQuery(customized["Namespace"], customized["MetricName"],
                             customized["Statistic"], customized.get("Unit"), dimensions)


def tracking_alarm(policy_arn: str, config: dict[str, Any], target: ScalableTarget,
                   high: bool) -> dict[str, Any]:
    """The PutMetricAlarm parameters of a target tracking policy's AlarmHigh or AlarmLow, with
    the settings AWS gives them (rules.py): one-minute periods, 3 of 3 above the target, 15 of
    15 below 90 % of it, the policy as the alarm's only action."""
    query = metric_query(config, target.dimension)
    value = float(config["TargetValue"])
    periods = rules.HIGH_DATAPOINTS if high else rules.LOW_DATAPOINTS
    alarm: dict[str, Any] = {
        "AlarmDescription": ("DO NOT EDIT OR DELETE. For TargetTrackingScaling policy "
                             f"{policy_arn}."),
        "ActionsEnabled": True, "OKActions": [], "AlarmActions": [policy_arn],
        "InsufficientDataActions": [],
        "EvaluationPeriods": periods, "DatapointsToAlarm": periods,
        "Threshold": value if high else value * rules.LOW_THRESHOLD_FACTOR,
        "ComparisonOperator": "GreaterThanThreshold" if high else "LessThanThreshold",
    }
    if query.metrics:
        alarm["Metrics"] = [{
            **{k: v for k, v in q.items() if k != "MetricStat"},
            **({"MetricStat": {**q["MetricStat"], "Period": query.period}}
               if q.get("MetricStat") else {}),
        } for q in query.metrics]
        return alarm
    dims = query.dimensions or _own_dimensions(target)
    alarm.update({"MetricName": query.metric_name, "Namespace": query.namespace,
                  "Statistic": query.statistic, "Period": query.period,
                  "Dimensions": [{"Name": k, "Value": v} for k, v in dims]})
    if query.unit:
        alarm["Unit"] = query.unit
    return alarm


def _own_dimensions(target: ScalableTarget) -> tuple[tuple[str, str], ...]:
    """The dimensions SageMaker publishes the resource's metrics under."""
    found = rules.COMPONENT_RESOURCE.fullmatch(target.resource_id)
    if found is not None:
        return (("InferenceComponentName", found.group(1)),)
    endpoint, variant = target.endpoint_and_variant
    return (("EndpointName", endpoint), ("VariantName", variant))
