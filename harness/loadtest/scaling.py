"""What a load test shows of auto scaling: instance counts over time and scaling activities.

Both come from the public APIs (``DescribeEndpoint``, ``DescribeScalingActivities``), so the same
code watches the emulator and a real endpoint. An activity is placed on the test's time axis at
the poll that first sees it: the activities' own timestamps are emulated ones under
``--clock-scale`` (see ``emulator/clock.py``), the poll time is real.

``autoscale`` registers the variant and a target tracking policy on
``SageMakerVariantInvocationsPerInstance``, as AWS's examples do (``mme loadtest --autoscale``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

DIMENSION = "sagemaker:variant:DesiredInstanceCount"


@dataclass(frozen=True)
class ScalingPoll:
    instances: dict[str, tuple[int, int]]  # variant -> (CurrentInstanceCount, Desired...)
    activities: list[dict[str, Any]]  # every activity of the endpoint, newest first


def _clients(endpoint_url: str | None) -> tuple[Any, Any]:
    import boto3

    extra: dict[str, Any] = {}
    if endpoint_url is not None:  # the emulator does not check credentials unless told to
        session = boto3.session.Session()
        extra = {"endpoint_url": endpoint_url, "region_name": session.region_name or "us-east-1"}
        if session.get_credentials() is None:
            extra.update(aws_access_key_id="x", aws_secret_access_key="x")
    return (boto3.client("sagemaker", **extra),
            boto3.client("application-autoscaling", **extra))


class ScalingWatch:
    def __init__(self, endpoint_name: str, endpoint_url: str | None = None) -> None:
        self.endpoint_name = endpoint_name
        self._sagemaker, self._autoscaling = _clients(endpoint_url)
        self._failed = False

    def _poll(self) -> ScalingPoll | None:
        try:
            described = self._sagemaker.describe_endpoint(EndpointName=self.endpoint_name)
            prefix = f"endpoint/{self.endpoint_name}/"
            activities = [
                a for a in self._autoscaling.describe_scaling_activities(
                    ServiceNamespace="sagemaker")["ScalingActivities"]
                if a["ResourceId"].startswith(prefix)]
        except Exception as exc:  # noqa: BLE001 - an old emulator or no permission: no plot
            if not self._failed:
                log.warning("instance counts not available: %s", exc)
            self._failed = True
            return None
        instances = {v["VariantName"]: (int(v.get("CurrentInstanceCount") or 0),
                                        int(v.get("DesiredInstanceCount") or 0))
                     for v in described.get("ProductionVariants") or []}
        return ScalingPoll(instances, activities)

    async def poll(self) -> ScalingPoll | None:
        if self._failed:
            return None
        return await asyncio.to_thread(self._poll)


def autoscale(endpoint_name: str, spec: str, endpoint_url: str | None = None,
              variant: str = "AllTraffic") -> None:
    """``MIN:MAX:TARGET[:SCALE_IN_COOLDOWN:SCALE_OUT_COOLDOWN]``, cooldowns default 300:60."""
    parts = [float(p) for p in spec.split(":")]
    if len(parts) not in (3, 5):
        raise ValueError(f"--autoscale {spec!r}: expected "
                         "MIN:MAX:TARGET[:IN_COOLDOWN:OUT_COOLDOWN]")
    minimum, maximum, target = int(parts[0]), int(parts[1]), parts[2]
    scale_in, scale_out = (int(parts[3]), int(parts[4])) if len(parts) == 5 else (300, 60)
    _, client = _clients(endpoint_url)
    key = {"ServiceNamespace": "sagemaker", "ScalableDimension": DIMENSION,
           "ResourceId": f"endpoint/{endpoint_name}/variant/{variant}"}
    client.register_scalable_target(**key, MinCapacity=minimum, MaxCapacity=maximum)
    client.put_scaling_policy(**key, PolicyName="mme-loadtest", PolicyType="TargetTrackingScaling",
                              TargetTrackingScalingPolicyConfiguration={
                                  "TargetValue": target,
                                  "PredefinedMetricSpecification": {
                                      "PredefinedMetricType":
                                          "SageMakerVariantInvocationsPerInstance"},
                                  "ScaleInCooldown": scale_in, "ScaleOutCooldown": scale_out})
