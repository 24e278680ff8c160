"""Each inference component copy's utilization, as AWS publishes it, and
the view of a component's copies and their instances that ``/metrics`` and the page read.

AWS ("SageMaker AI inference component metrics", monitoring-cloudwatch in the SageMaker
developer guide): namespace ``/aws/sagemaker/InferenceComponents``, dimension
``InferenceComponentName``, each metric "reported by each copy of the inference component",
0-100 %:

- ``CPUUtilizationNormalized``: over the copy's ``NumberOfCpuCoresRequired`` when set,
  "otherwise over the limit" -- here the instance type's vCPUs [U: AWS does not name the
  limit], else (a type the table does not know) this machine's cores;
- ``MemoryUtilizationNormalized``: over ``MinMemoryRequiredInMb`` (which the API requires), else
  the instance type's memory, else this machine's;
- ``GPUUtilizationNormalized`` / ``GPUMemoryUtilizationNormalized``: only where NVML sees a
  GPU (none on a CPU machine: not published, as on a CPU instance), over the
  ``NumberOfAcceleratorDevicesRequired`` devices (else the instance type's) [U: the machine's
  GPU utilization is shared out over the reserved devices; GPU memory is the copy's
  processes' own, from NVML].

What is measured is the copy's own processes, as for an endpoint's instance
(``hosting.utilization``): its Triton and the Python backend stubs under it, CPU time over the
period since the previous sample (the first sample of a copy only sets the base: no CPU
figure), memory as the copy's memory probe counts it (``triton.memory``), else their resident
bytes. [U] A copy can use more than it reserves (nothing here caps it): the figures are held
at 100 %, the top of AWS's documented range. A copy without a process id (a SageMaker container
under the docker launcher) is not sampled. The tick is the endpoint config's
``MetricPublishFrequencyInSeconds`` on the emulated clock (``hosting.endpoint_registry``).

With ``EnableEnhancedMetrics`` ("Container-level utilization metrics" in AWS's enhanced-metrics
page: "the InstanceId, ContainerId, and AcceleratorId (GPU metrics only) dimensions become
available alongside the existing namespace dimensions") each copy's figures are also published
under the copy's own series, ``component_tally.container_dimensions`` (the component's endpoint,
variant and name, the copy's InstanceId and its ContainerId: ``copy-2``, as the page and
``/metrics`` name the copy). [U] No GPU is attributed to one copy here, so no AcceleratorId
series. The same tick publishes each instance's reservation and use
(``hosting.component_instances``).

Which instance a copy is on is the placement's bookkeeping (``hosting.placement``): the ready
copies, oldest first, fill the placed slots instance by instance (``i-1``, ``i-2``, ... as the
emulator names a variant's instances) [U: on this machine every copy runs here].
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from emulator import instance_types
from emulator.hosting import component_instances
from emulator.hosting.component_copies import ComponentCopies, Copy, CopyDimensions
from emulator.hosting.component_tally import DIMENSION
from emulator.hosting.placement import Reservation
from emulator.hosting.spec import MetricsOptions
from emulator.hosting.utilization import UtilizationSampler, gpu_utilization
from emulator.metrics import PERCENT, MetricSink, Statistic

NAMESPACE = "/aws/sagemaker/InferenceComponents"
CPU = "CPUUtilizationNormalized"
MEMORY = "MemoryUtilizationNormalized"
GPU = "GPUUtilizationNormalized"
GPU_MEMORY = "GPUMemoryUtilizationNormalized"
METRICS = (CPU, MEMORY, GPU, GPU_MEMORY)
_MIB = 1024 * 1024


@dataclass(frozen=True)
class CopyLimits:
    """What one copy's figures are normalized against, and where each came from."""

    cpus: float
    memory_bytes: int
    accelerators: float
    gpu_memory_bytes: int | None  # the reserved devices' memory (None: no GPU on the type)
    cpu_source: str  # "reservation", "instance type" or "this machine"
    memory_source: str


def limits_of(reservation: Reservation | None, instance_type: str | None) -> CopyLimits:
    known = instance_types.lookup(instance_type or "")
    need = reservation or Reservation()
    if need.cpus:
        cpus, cpu_source = need.cpus, "reservation"
    elif known is not None:
        cpus, cpu_source = float(known.vcpus), "instance type"
    else:
        cpus, cpu_source = float(os.cpu_count() or 1), "this machine"
    if need.memory_mib:
        memory, memory_source = need.memory_mib * _MIB, "reservation"
    elif known is not None:
        memory, memory_source = known.memory_bytes, "instance type"
    else:
        memory, memory_source = instance_types.machine_memory_bytes(), "this machine"
    accelerators = need.accelerators or (float(known.gpus) if known is not None else 0.0)
    gpu_memory = (int(known.gpu_memory_gib * instance_types.GIB * accelerators)
                  if known is not None and known.gpus and accelerators else None)
    return CopyLimits(cpus, memory, accelerators, gpu_memory, cpu_source, memory_source)


def _percent(used: float, whole: float) -> float:
    return max(0.0, min(100.0, 100.0 * used / whole)) if whole > 0 else 0.0


@dataclass(frozen=True)
class ComponentGroup:
    """A component's copies on an endpoint, as ``ComponentEndpoint.component_groups`` gives
    them: its name as created, what the control plane says of it (None: gone from it, its
    copies stopping), and its copies (a rolling update's new ones second)."""

    name: str
    variant: str
    status: str | None
    desired_copies: int
    current_copies: int
    placement: tuple[int, ...]
    reservation: Reservation | None
    groups: tuple[ComponentCopies, ...]

    @property
    def instance_type(self) -> str | None:
        target = next((g.target for g in self.groups if g.target is not None), None)
        return target.variant.instance_type if target is not None else None

    @property
    def limits(self) -> CopyLimits:
        return limits_of(self.reservation, self.instance_type)


class CopyUtilization:
    """Samples every ready copy of an endpoint's components; keeps each copy's CPU base."""

    def __init__(self) -> None:
        self._samplers: dict[int, UtilizationSampler] = {}

    def sample(self, components: Sequence[ComponentGroup], now: float, sink: MetricSink,
               options: MetricsOptions,
               copy_dimensions: CopyDimensions | None = None) -> None:
        """Each ready copy's figures under its component's name (and under the copy's own
        series where ``copy_dimensions`` gives one), then each instance's
        (``hosting.component_instances``: what its copies reserve and use; per InstanceId
        too as ``options`` asks)."""
        seen: dict[int, UtilizationSampler] = {}
        gpu = gpu_utilization()  # the machine's, once per tick
        variants: dict[str, component_instances.VariantLoad] = {}
        for component in components:
            variant = variants.setdefault(component.variant, component_instances.VariantLoad(
                component.instance_type, {}))
            variant.instance_type = variant.instance_type or component.instance_type
            for index, count in enumerate(component.placement):
                variant.instances.setdefault(index, component_instances.InstanceLoad()).reserve(
                    component.reservation or Reservation(), count)
            slots = _slots(component)
            limits = component.limits
            ready = [copy for copies in component.groups for copy in list(copies.ready)]
            for position, copy in enumerate(ready):  # in copy_rows' order: the same instances
                sampler = seen[id(copy)] = self._samplers.get(id(copy), UtilizationSampler())
                measured = _measure(copy, sampler, now, limits, gpu)
                if measured is None:
                    continue
                cpu_percent, memory_bytes, figures = measured
                if position < len(slots):
                    variant.instances[slots[position]].measured(cpu_percent, memory_bytes)
                copy.metrics.latest.update(figures)
                samples = [(NAMESPACE, PERCENT, name, value) for name, value in figures.items()]
                sink.record_many({DIMENSION: component.name}, samples)
                series = (copy_dimensions(component.name, copy.id)
                          if copy_dimensions is not None else None)
                if series is not None:
                    sink.record_many(series, samples)
        self._samplers = seen
        if components and components[0].groups:
            component_instances.publish(components[0].groups[0].endpoint, variants, sink,
                                        options)


def _slots(component: ComponentGroup) -> list[int]:
    """The instance (index) of each placed copy, instance by instance."""
    return [index for index, count in enumerate(component.placement) for _ in range(count)]


def _measure(copy: Copy, sampler: UtilizationSampler, now: float, limits: CopyLimits,
             gpu: dict[str, float]) -> tuple[float | None, int, dict[str, float]] | None:
    """(percent of one core or None at the first sample, memory bytes, normalized figures);
    None for a copy with no process of its own to measure (docker, external)."""
    pid = getattr(copy.launcher, "pid", None)
    if not isinstance(pid, int):
        return None
    cpu_percent, rss = sampler.cpu_and_rss(pid, now)
    manager = getattr(copy, "manager", None)
    probe = getattr(manager, "memory_probe", None)
    memory = probe.total_bytes() if probe is not None else None
    figures: dict[str, float] = {}
    if cpu_percent is not None:  # percent of one core over the period
        figures[CPU] = _percent(cpu_percent / 100.0, limits.cpus)
    used = memory if memory is not None else rss
    figures[MEMORY] = _percent(used, limits.memory_bytes)
    if gpu and limits.accelerators:
        figures[GPU] = _percent(gpu["GPUUtilization"] / 100.0, limits.accelerators)
        gpu_bytes = probe.gpu_bytes() if probe is not None else None
        if gpu_bytes is not None and limits.gpu_memory_bytes:
            figures[GPU_MEMORY] = _percent(gpu_bytes, limits.gpu_memory_bytes)
    return cpu_percent, used, figures


def copy_label(copy: Copy) -> str:
    """``copy-2``; a rolling update's new copies carry its generation, ``copy-2-green1``
    (their numbers start again), and keep that name once they are the component's copies."""
    return label_of(copy.id)


def label_of(copy_id: str) -> str:
    """A copy's name within its component (``copy-2``) from its id (``<component>/copy-2``):
    its ContainerId in CloudWatch, its CopyId on the page."""
    return copy_id.rsplit("/", 1)[-1]


def copy_instances(component: ComponentGroup) -> dict[str, str]:
    """The instance each ready copy is on (copy id -> ``i-1``, ...): the ready copies, oldest
    first (a rolling update's new ones after), fill the placed slots instance by instance; a
    copy past them (none placed for it) is on none."""
    slots = [f"i-{index + 1}" for index in _slots(component)]
    ready = [copy for group in component.groups for copy in list(group.ready)]
    return {copy.id: slot for copy, slot in zip(ready, slots, strict=False)}


def copy_rows(component: ComponentGroup) -> list[dict[str, Any]]:
    """A component's copies and their instances: each copy's state is ``ready`` (serving),
    ``draining``, ``starting`` (placed, its process not ready yet), ``failed`` (its start
    failed) or ``pending`` (placed nowhere: no instance has room); only a process has an id."""
    slots = [f"i-{index + 1}" for index in _slots(component)]
    placed = copy_instances(component)
    copies: list[dict[str, Any]] = []
    for group in component.groups:
        for copy in list(group.ready):
            copies.append({
                "CopyId": copy_label(copy),
                "Instance": placed.get(copy.id),
                "State": "draining" if copy.draining else "ready",
                "InFlight": copy.in_flight,
                "Utilization": {k: v for k, v in copy.metrics.latest.items() if k in METRICS}})
    failure = next((g.failure for g in component.groups if g.failure), None)
    for slot in slots[len(copies):]:
        copies.append({"CopyId": None, "Instance": slot,
                       "State": "failed" if failure else "starting", "InFlight": 0,
                       "Utilization": {}})
    for _ in range(max(component.desired_copies - component.current_copies, 0)):
        copies.append({"CopyId": None, "Instance": None, "State": "pending", "InFlight": 0,
                       "Utilization": {}})
    return copies


def describe(component: ComponentGroup, stats: dict[str, Statistic]) -> dict[str, Any]:
    """A component -> its copies -> their instances, for the page and ``/_emulator/models``."""
    limits = component.limits
    failure = next((g.failure for g in component.groups if g.failure), None)

    def total(metric: str) -> float:
        stat = stats.get(metric)
        return stat.total if stat is not None else 0.0

    latency = stats.get("ModelLatency")
    need = component.reservation or Reservation()
    return {
        "InferenceComponentName": component.name,
        "Status": component.status or "Deleted",
        "InstanceType": component.instance_type,
        "DesiredCopyCount": component.desired_copies,
        "CurrentCopyCount": component.current_copies,
        "ReadyCopyCount": sum(len(g.ready) for g in component.groups),
        "Reservation": {"NumberOfCpuCoresRequired": need.cpus or None,
                        "MinMemoryRequiredInMb": need.memory_mib or None,
                        "NumberOfAcceleratorDevicesRequired": need.accelerators or None},
        "NormalizedAgainst": {"Cpus": limits.cpus, "CpuSource": limits.cpu_source,
                              "MemoryBytes": limits.memory_bytes,
                              "MemorySource": limits.memory_source},
        "VariantName": component.variant,
        "Copies": copy_rows(component),
        "Invocations": total("Invocations"),
        "Errors": total("Invocation4XXErrors") + total("Invocation5XXErrors"),
        "NoCapacityInvocationFailures": total("NoCapacityInvocationFailures"),
        "ModelLatencyAverageUs": (latency.total / latency.sample_count
                                  if latency is not None and latency.sample_count else None),
        "InFlight": sum(g.in_flight for g in component.groups),
        "Failure": failure,
        "RoutingStrategy": next((g.target.routing for g in component.groups
                                 if g.target is not None), None),
        "Sessions": [s for g in component.groups for s in g.describe_sessions()],
    }
