"""Application Auto Scaling for SageMaker variants and inference components: ``wire`` (JSON 1.1
via botocore's model), ``service`` (the API and its state, kept across restarts), ``engine``
(the policies, run by their CloudWatch alarms' actions), ``step`` (step scaling), ``capacity``
(how a variant or a component is reached: SageMaker's API), ``rules`` (target tracking as AWS
documents it, and the [U]). Its HTTP binding is ``emulator/routes/autoscaling.py``."""

from emulator.autoscaling.capacity import SageMakerVariants
from emulator.autoscaling.scaling_engine import ScalingEngine
from emulator.autoscaling.service import AutoScalingService

__all__ = ["AutoScalingService", "SageMakerVariants", "ScalingEngine"]
