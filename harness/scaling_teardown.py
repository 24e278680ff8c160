"""What a teardown deletes before an endpoint or inference component goes: its Application Auto
Scaling targets, their policies, and the CloudWatch alarms made for those policies.

AWS's order for components and variants: delete the policies, deregister the scalable target,
then delete the resource (a target left behind keeps naming a resource that is gone). A target
tracking policy's alarms are the service's own and go with it; a step policy's alarm is the one
that names the policy as its action (``AlarmActions``), which the user created for it: it goes
too, as nothing else can fire that policy any more.
"""

from __future__ import annotations

from typing import Any

from harness.deployment import DeploySteps

NAMESPACE = "sagemaker"


def delete_scaling(deployer: DeploySteps, resource_ids: list[str]) -> None:
    """Every scalable target of ``resource_ids`` (``inference-component/NAME``,
    ``endpoint/NAME/variant/VARIANT``), its policies and their alarms."""
    aas = deployer.clients.autoscaling
    if aas is None or not resource_ids:
        return
    targets = []
    for page in aas.get_paginator("describe_scalable_targets").paginate(
            ServiceNamespace=NAMESPACE, ResourceIds=resource_ids):
        targets += page.get("ScalableTargets", [])
    for target in targets:
        key = {"ServiceNamespace": NAMESPACE, "ResourceId": target["ResourceId"],
               "ScalableDimension": target["ScalableDimension"]}
        policies = []
        for page in aas.get_paginator("describe_scaling_policies").paginate(
                ServiceNamespace=NAMESPACE, ResourceId=target["ResourceId"],
                ScalableDimension=target["ScalableDimension"]):
            policies += page.get("ScalingPolicies", [])
        arns = {p["PolicyARN"] for p in policies if p.get("PolicyARN")}
        alarms = {a["AlarmName"] for p in policies for a in p.get("Alarms", [])}
        alarms |= _alarms_acting_on(deployer, arns)
        for policy in policies:
            deployer._mutate(aas, "DeleteScalingPolicy", PolicyName=policy["PolicyName"], **key)
        deployer._mutate(aas, "DeregisterScalableTarget", **key)
        _delete_alarms(deployer, sorted(alarms))


def _alarms_acting_on(deployer: DeploySteps, arns: set[str]) -> set[str]:
    cloudwatch = deployer.clients.cloudwatch
    if cloudwatch is None or not arns:
        return set()
    names = set()
    for page in cloudwatch.get_paginator("describe_alarms").paginate():
        for alarm in page.get("MetricAlarms", []):
            if arns & set(alarm.get("AlarmActions", [])):
                names.add(alarm["AlarmName"])
    return names


def _delete_alarms(deployer: DeploySteps, names: list[str]) -> None:
    """Those of ``names`` still there (the service deletes a target tracking policy's own)."""
    cloudwatch: Any = deployer.clients.cloudwatch
    if cloudwatch is None or not names:
        return
    left = [a["AlarmName"] for a in deployer._read(cloudwatch, "DescribeAlarms",
                                                   AlarmNames=names).get("MetricAlarms", [])]
    if left:
        deployer._mutate(cloudwatch, "DeleteAlarms", AlarmNames=left)
