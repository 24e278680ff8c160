"""The CloudWatch metrics of a multi-model endpoint, with AWS's names, units and statistics.

Each endpoint keeps running statistics (SampleCount, Sum, Min, Max; Average derived) per metric,
dimensioned by EndpointName and VariantName as CloudWatch does. Served as JSON at
``GET /_emulator/metrics`` and in the Prometheus text format at ``GET /metrics``.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

MICROSECONDS = "Microseconds"
NONE = "None"

# name -> (CloudWatch namespace, unit)
METRICS: dict[str, tuple[str, str]] = {
    "ModelLoadingWaitTime": ("AWS/SageMaker", MICROSECONDS),
    "ModelDownloadingTime": ("AWS/SageMaker", MICROSECONDS),
    "ModelLoadingTime": ("AWS/SageMaker", MICROSECONDS),
    "ModelUnloadingTime": ("AWS/SageMaker", MICROSECONDS),
    "ModelCacheHit": ("AWS/SageMaker", NONE),
    "LoadedModelCount": ("/aws/sagemaker/Endpoints", NONE),
    "Invocations": ("AWS/SageMaker", NONE),
    "Invocation4XXErrors": ("AWS/SageMaker", NONE),
    "Invocation5XXErrors": ("AWS/SageMaker", NONE),
    "InvocationModelErrors": ("AWS/SageMaker", NONE),
    "ModelLatency": ("AWS/SageMaker", MICROSECONDS),
    "OverheadLatency": ("AWS/SageMaker", MICROSECONDS),
}


@dataclass
class Statistic:
    sample_count: int = 0
    total: float = 0.0
    minimum: float = math.inf
    maximum: float = -math.inf

    def add(self, value: float) -> None:
        self.sample_count += 1
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)

    def as_dict(self) -> dict[str, float]:
        if not self.sample_count:
            return {"SampleCount": 0, "Sum": 0.0, "Average": 0.0, "Minimum": 0.0, "Maximum": 0.0}
        return {
            "SampleCount": self.sample_count,
            "Sum": self.total,
            "Average": self.total / self.sample_count,
            "Minimum": self.minimum,
            "Maximum": self.maximum,
        }


class EndpointMetrics:
    def __init__(self, endpoint_name: str, variant_name: str) -> None:
        self.dimensions = {"EndpointName": endpoint_name, "VariantName": variant_name}
        self._stats = {name: Statistic() for name in METRICS}
        self._lock = threading.Lock()
        self.loaded_model_count = 0

    def record(self, name: str, value: float) -> None:
        if name not in METRICS:
            raise KeyError(f"unknown metric {name}")
        with self._lock:
            self._stats[name].add(value)

    def set_loaded_model_count(self, count: int) -> None:
        """LoadedModelCount is sampled at every change, so its Maximum/Average mean something."""
        self.loaded_model_count = count
        self.record("LoadedModelCount", count)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            metrics = {
                name: {"Namespace": ns, "Unit": unit, **self._stats[name].as_dict()}
                for name, (ns, unit) in METRICS.items()
            }
        metrics["LoadedModelCount"]["Current"] = self.loaded_model_count
        return {"Dimensions": dict(self.dimensions), "Metrics": metrics}


def prometheus_text(endpoints: list[EndpointMetrics]) -> str:
    """Summaries named ``sagemaker_<MetricName>_{count,sum,min,max}``, labelled by dimensions."""
    lines: list[str] = []
    snapshots = [e.snapshot() for e in endpoints]
    for name, (namespace, unit) in METRICS.items():
        metric = f"sagemaker_{name}"
        lines.append(f"# HELP {metric} {namespace} {name} ({unit})")
        lines.append(f"# TYPE {metric} summary")
        for snap in snapshots:
            dims = snap["Dimensions"]
            labels = ",".join(f'{k}="{v}"' for k, v in dims.items()) + f',unit="{unit}"'
            stat = snap["Metrics"][name]
            lines.append(f"{metric}_count{{{labels}}} {stat['SampleCount']}")
            lines.append(f"{metric}_sum{{{labels}}} {stat['Sum']}")
            lines.append(f"{metric}_min{{{labels}}} {stat['Minimum']}")
            lines.append(f"{metric}_max{{{labels}}} {stat['Maximum']}")
            if name == "LoadedModelCount":
                lines.append(f"{metric}_current{{{labels}}} {stat['Current']}")
    return "\n".join(lines) + "\n"
