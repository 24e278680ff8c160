"""Load tests for multi-model endpoints, modelled on SageMaker Inference Recommender jobs."""

from harness.loadtest.config import (
    LatencyThreshold,
    LoadPlan,
    Phase,
    PlanError,
    Popularity,
    StoppingConditions,
    plan_from_api,
)
from harness.loadtest.runner import LoadResult, run_load

__all__ = [
    "LatencyThreshold",
    "LoadPlan",
    "LoadResult",
    "Phase",
    "PlanError",
    "Popularity",
    "StoppingConditions",
    "plan_from_api",
    "run_load",
]
