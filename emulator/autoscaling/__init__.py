"""Application Auto Scaling for SageMaker variants: ``wire`` (JSON 1.1 via botocore's model),
``service`` (the API and its state), ``engine`` (target tracking that acts), ``capacity`` (how
the endpoint is reached: SageMaker's API), ``rules`` (AWS's documented behaviour and the [U])."""

from emulator.autoscaling.capacity import SageMakerVariants
from emulator.autoscaling.engine import ScalingEngine
from emulator.autoscaling.routes import build_autoscaling_router, json_handler
from emulator.autoscaling.service import AutoScalingService

__all__ = ["AutoScalingService", "SageMakerVariants", "ScalingEngine",
           "build_autoscaling_router", "json_handler"]
