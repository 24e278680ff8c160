"""The instance metrics AWS publishes for an endpoint that hosts inference components.

AWS ("SageMaker AI endpoint metrics", namespace ``/aws/sagemaker/Endpoints``, dimensions
``EndpointName``, ``VariantName``; "provided only for endpoints that host active inference
components" for the reservation and normalized ones), one sample per instance and tick:

- ``CPUReservation``, ``MemoryReservation``, ``GPUReservation``: what the copies placed on the
  instance reserve (``NumberOfCpuCoresRequired``, ``MinMemoryRequiredInMb``,
  ``NumberOfAcceleratorDevicesRequired``) in percent of its type's vCPUs, memory and
  accelerators (GPUReservation only on a type that has accelerators);
- ``CPUUtilization`` (the sum over cores, so 0-400 % on 4 vCPUs), ``CPUUtilizationNormalized``
  (the same over the vCPUs, 0-100 %) and ``MemoryUtilization``: the measured use of the copies
  on the instance (``hosting.copy_utilization``), summed.

Per instance as well (``{EndpointName, VariantName, InstanceId}``, as an endpoint for models
publishes them): every one of these with ``EnableEnhancedMetrics`` (AWS: in
``/aws/sagemaker/Endpoints``, "including those that use inference components", InstanceId
"become[s] available alongside the existing namespace dimensions"); otherwise, with
``EnableDetailedObservability``, its per-instance host metrics that are measured here
(``CPUUtilization``, ``MemoryUtilization``; [U] no disk is measured for an instance of
components: its copies' work directories are theirs).

[U] Which copy is on which instance is the placement's bookkeeping (every copy runs on this
machine); an instance type the emulator's table does not know publishes none of these (there
is nothing to take a percentage of); the GPU utilization of an instance is not published (the
machine's GPUs are not the instance's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from emulator import instance_types
from emulator.hosting.placement import Reservation
from emulator.hosting.spec import MetricsOptions
from emulator.metrics import HOST_METRICS, INSTANCE_NAMESPACE, PERCENT, MetricSink

_MIB = 1024 * 1024


@dataclass
class InstanceLoad:
    """What the copies placed on one instance reserve, and what those measured use."""

    cpus_reserved: float = 0.0
    accelerators_reserved: float = 0.0
    memory_reserved_bytes: int = 0
    cpu_percent: float | None = None  # percent of one core, summed over the measured copies
    memory_bytes: int | None = None

    def reserve(self, need: Reservation, copies: int) -> None:
        self.cpus_reserved += need.cpus * copies
        self.accelerators_reserved += need.accelerators * copies
        self.memory_reserved_bytes += need.memory_mib * _MIB * copies

    def measured(self, cpu_percent: float | None, memory_bytes: int) -> None:
        if cpu_percent is not None:
            self.cpu_percent = (self.cpu_percent or 0.0) + cpu_percent
        self.memory_bytes = (self.memory_bytes or 0) + memory_bytes


@dataclass
class VariantLoad:
    """A variant's instances (by index, as placement counts them) and their type."""

    instance_type: str | None
    instances: dict[int, InstanceLoad]


def figures(instance_type: str | None, load: InstanceLoad) -> dict[str, float]:
    known = instance_types.lookup(instance_type or "")
    if known is None:
        return {}
    found = {"CPUReservation": min(100.0, 100.0 * load.cpus_reserved / known.vcpus),
             "MemoryReservation": min(100.0, 100.0 * load.memory_reserved_bytes
                                      / known.memory_bytes)}
    if known.accelerators:
        found["GPUReservation"] = min(100.0, 100.0 * load.accelerators_reserved
                                      / known.accelerators)
    if load.cpu_percent is not None:
        found["CPUUtilization"] = load.cpu_percent
        found["CPUUtilizationNormalized"] = min(100.0, load.cpu_percent / known.vcpus)
    if load.memory_bytes is not None:
        found["MemoryUtilization"] = 100.0 * load.memory_bytes / known.memory_bytes
    return found


def per_instance(found: Mapping[str, float], options: MetricsOptions) -> dict[str, float]:
    """Which of an instance's figures are also published under its InstanceId."""
    if options.enhanced:
        return dict(found)
    if options.detailed_observability:
        return {name: value for name, value in found.items() if name in HOST_METRICS}
    return {}


def publish(endpoint_name: str, variants: Mapping[str, VariantLoad], sink: MetricSink,
            options: MetricsOptions) -> None:
    """One sample per instance of each variant, under EndpointName and VariantName, and under
    its InstanceId too as ``options`` asks (``per_instance``)."""
    for variant_name, variant in variants.items():
        dimensions = {"EndpointName": endpoint_name, "VariantName": variant_name}
        for index in sorted(variant.instances):
            found = figures(variant.instance_type, variant.instances[index])
            if found:
                sink.record_many(dimensions, _samples(found))
            extra = per_instance(found, options)
            if extra:
                sink.record_many({**dimensions, "InstanceId": f"i-{index + 1}"}, _samples(extra))


def _samples(found: Mapping[str, float]) -> list[tuple[str, str, str, float]]:
    return [(INSTANCE_NAMESPACE, PERCENT, name, value) for name, value in found.items()]
