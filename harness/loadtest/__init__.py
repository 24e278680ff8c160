"""Load tests for multi-model endpoints, modelled on SageMaker Inference Recommender jobs, run
on Locust (``locust_run.run_load``; the engine inside Locust is ``locust_engine``)."""

from harness.loadtest.config import (
    LatencyThreshold,
    LoadPlan,
    Phase,
    PlanError,
    Popularity,
    StoppingConditions,
    plan_from_api,
)
from harness.loadtest.locust_run import Engine, Target, run_load
from harness.loadtest.runner import LoadResult

__all__ = [
    "Engine",
    "LatencyThreshold",
    "LoadPlan",
    "LoadResult",
    "Phase",
    "PlanError",
    "Popularity",
    "StoppingConditions",
    "Target",
    "plan_from_api",
    "run_load",
]
