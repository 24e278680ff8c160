"""The memory of the ml.* instance types users pick, and the budget an instance gets from it.

A leaf (settings checks `--instance-type` against it): it imports nothing of the service.

A multi-model endpoint unloads models when its instance runs out of memory (or GPU memory on
a GPU instance), so an endpoint created with ``InstanceType: ml.m5.xlarge`` here gets that
type's memory as its budget (``--memory-budget`` still overrides it for every endpoint).

Source of the figures: the SageMaker AI pricing page's instance details
(https://aws.amazon.com/sagemaker/ai/pricing/, "Instance details") and the Amazon EC2 instance
type specifications (https://docs.aws.amazon.com/ec2/latest/instancetypes/), which give the
same vCPU, memory and accelerator figures for the EC2 type behind each ml.* type. CPU families
follow EC2's fixed memory per vCPU (m: 4 GiB, c: 2 GiB, r: 8 GiB; c4: 1.875 GiB) and size
names (large = 2 vCPUs, xlarge = 4, Nxlarge = 4N); accelerated and odd types are listed one by
one. Every row names its source (``InstanceType.source``); every type of botocore's
``ProductionVariantInstanceType`` has a row (a test keeps it so). A type botocore does not yet
list gets no memory budget (a warning says so and ``--memory-budget`` gives one).

Accelerators: ``gpus`` counts NVIDIA GPUs, the devices a Triton ``KIND_GPU`` instance group runs
on; Inferentia, Trainium and Gaudi devices are accelerators too (``accelerators``, with their
own memory in ``accelerator_memory_gib``) but no GPU: Triton sees none on those types.

[U] The share the platform keeps: AWS does not document how much of an instance's memory the
model server may use on a multi-model endpoint (the OS, the SageMaker agents and the model
server's own process take some). The emulator keeps ``PLATFORM_SHARE`` (10 %) for them, so a
model's budget is 90 % of the instance's memory; GPU memory is all the models' (nothing else
on the instance uses the GPU). One place: change it here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

GIB = 1024**3
# [U] The share of the instance's memory the platform keeps for itself (see the docstring).
PLATFORM_SHARE = 0.10
# [U] The emulator's own limit: every instance is a Triton process on this machine. SageMaker's
# equivalent is an account quota per instance type, answered with ResourceLimitExceeded.
MAX_INSTANCES_PER_ENDPOINT = 16

# GiB of memory per vCPU of the CPU families SageMaker hosts on (EC2's figures).
_GIB_PER_VCPU = {
    "m4": 4.0, "m5": 4.0, "m5d": 4.0, "m6i": 4.0, "m6g": 4.0, "m6gd": 4.0, "m7i": 4.0,
    "m8g": 4.0,
    "c4": 1.875, "c5": 2.0, "c5d": 2.0, "c6i": 2.0, "c6in": 2.0, "c6g": 2.0, "c6gd": 2.0,
    "c6gn": 2.0, "c7g": 2.0, "c7i": 2.0, "c8g": 2.0,
    "r5": 8.0, "r5d": 8.0, "r6i": 8.0, "r6g": 8.0, "r6gd": 8.0, "r7i": 8.0, "r7gd": 8.0,
    "r8g": 8.0,
}
_VCPUS_OF_SIZE = {"medium": 1, "large": 2, "xlarge": 4}


# Where the figures come from: AWS's pages, one per family group.
EC2_GENERAL = "https://docs.aws.amazon.com/ec2/latest/instancetypes/gp.html"
EC2_COMPUTE = "https://docs.aws.amazon.com/ec2/latest/instancetypes/co.html"
EC2_MEMORY = "https://docs.aws.amazon.com/ec2/latest/instancetypes/mo.html"
EC2_ACCELERATED = "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html"
SAGEMAKER_PRICING = "https://aws.amazon.com/sagemaker/ai/pricing/"
_FAMILY_SOURCE = {"m": EC2_GENERAL, "t": EC2_GENERAL, "c": EC2_COMPUTE, "r": EC2_MEMORY}


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: float
    gpus: int = 0
    gpu_memory_gib: float = 0.0  # per GPU
    source: str = EC2_ACCELERATED
    accelerator_memory_gib: float = 0.0  # per non-GPU accelerator (Inferentia, Trainium, Gaudi)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    @property
    def model_memory_bytes(self) -> int:
        """What the models may hold: the instance's memory less the platform's share [U]."""
        return int(self.memory_bytes * (1.0 - PLATFORM_SHARE))

    @property
    def gpu_memory_bytes(self) -> int:
        """All the instance's GPU memory (0 on a CPU instance)."""
        return int(self.gpus * self.gpu_memory_gib * GIB)

    @property
    def accelerators(self) -> int:
        """Accelerator devices an inference component may reserve
        (NumberOfAcceleratorDevicesRequired counts "GPUs and AWS Inferentia"): the GPUs, or the
        Inferentia / Trainium / Gaudi devices of the types that have no GPU."""
        return self.gpus or _OTHER_ACCELERATORS.get(self.name, (0, 0.0))[0]

    @property
    def accelerator_memory_bytes(self) -> int:
        """All the accelerators' memory: the GPUs', or the other accelerators' (0: none)."""
        if self.gpus:
            return self.gpu_memory_bytes
        return int(self.accelerators * self.accelerator_memory_gib * GIB)


def _listed(rows: dict[str, tuple[int, float, int, float]]) -> dict[str, InstanceType]:
    return {name: InstanceType(name, *row, source=_row_source(name),
                               accelerator_memory_gib=_OTHER_ACCELERATORS.get(name, (0, 0.0))[1])
            for name, row in rows.items()}


def _row_source(name: str) -> str:
    """The burstable t2 types are general purpose; every other listed type is accelerated."""
    return EC2_GENERAL if name.startswith("ml.t2.") else EC2_ACCELERATED


# Accelerator devices of the types whose accelerators are not GPUs, and each one's memory in
# GiB (EC2's accelerated computing specifications: Inferentia chips on inf1 / inf2, Trainium
# chips on trn1 / trn1n / trn2, Gaudi accelerators on dl1).
_OTHER_ACCELERATORS: dict[str, tuple[int, float]] = {
    "ml.inf1.xlarge": (1, 8), "ml.inf1.2xlarge": (1, 8), "ml.inf1.6xlarge": (4, 8),
    "ml.inf1.24xlarge": (16, 8),
    "ml.inf2.xlarge": (1, 32), "ml.inf2.8xlarge": (1, 32), "ml.inf2.24xlarge": (6, 32),
    "ml.inf2.48xlarge": (12, 32),
    "ml.trn1.2xlarge": (1, 32), "ml.trn1.32xlarge": (16, 32), "ml.trn1n.32xlarge": (16, 32),
    "ml.trn2.48xlarge": (16, 96), "ml.dl1.24xlarge": (8, 32),
}


# (vCPUs, memory GiB, GPUs, GPU memory GiB per GPU) of the types no family rule gives.
_LISTED = _listed({
    "ml.t2.medium": (2, 4, 0, 0), "ml.t2.large": (2, 8, 0, 0),
    "ml.t2.xlarge": (4, 16, 0, 0), "ml.t2.2xlarge": (8, 32, 0, 0),
    # NVIDIA K80 (12 GiB), V100 (16 GiB)
    "ml.p2.xlarge": (4, 61, 1, 12), "ml.p2.8xlarge": (32, 488, 8, 12),
    "ml.p2.16xlarge": (64, 732, 16, 12),
    "ml.p3.2xlarge": (8, 61, 1, 16), "ml.p3.8xlarge": (32, 244, 4, 16),
    "ml.p3.16xlarge": (64, 488, 8, 16),
    # NVIDIA T4 (16 GiB)
    "ml.g4dn.xlarge": (4, 16, 1, 16), "ml.g4dn.2xlarge": (8, 32, 1, 16),
    "ml.g4dn.4xlarge": (16, 64, 1, 16), "ml.g4dn.8xlarge": (32, 128, 1, 16),
    "ml.g4dn.12xlarge": (48, 192, 4, 16), "ml.g4dn.16xlarge": (64, 256, 1, 16),
    # NVIDIA A10G (24 GiB)
    "ml.g5.xlarge": (4, 16, 1, 24), "ml.g5.2xlarge": (8, 32, 1, 24),
    "ml.g5.4xlarge": (16, 64, 1, 24), "ml.g5.8xlarge": (32, 128, 1, 24),
    "ml.g5.12xlarge": (48, 192, 4, 24), "ml.g5.16xlarge": (64, 256, 1, 24),
    "ml.g5.24xlarge": (96, 384, 4, 24), "ml.g5.48xlarge": (192, 768, 8, 24),
    # NVIDIA L4 (24 GiB)
    "ml.g6.xlarge": (4, 16, 1, 24), "ml.g6.2xlarge": (8, 32, 1, 24),
    "ml.g6.4xlarge": (16, 64, 1, 24), "ml.g6.8xlarge": (32, 128, 1, 24),
    "ml.g6.12xlarge": (48, 192, 4, 24), "ml.g6.16xlarge": (64, 256, 1, 24),
    "ml.g6.24xlarge": (96, 384, 4, 24), "ml.g6.48xlarge": (192, 768, 8, 24),
    # NVIDIA L40S (48 GiB)
    "ml.g6e.xlarge": (4, 32, 1, 48), "ml.g6e.2xlarge": (8, 64, 1, 48),
    "ml.g6e.4xlarge": (16, 128, 1, 48), "ml.g6e.8xlarge": (32, 256, 1, 48),
    "ml.g6e.12xlarge": (48, 384, 4, 48), "ml.g6e.16xlarge": (64, 512, 1, 48),
    "ml.g6e.24xlarge": (96, 768, 4, 48), "ml.g6e.48xlarge": (192, 1536, 8, 48),
    # NVIDIA A100 40 / 80 GiB, H100 80 GiB, H200 141 GiB
    "ml.p4d.24xlarge": (96, 1152, 8, 40), "ml.p4de.24xlarge": (96, 1152, 8, 80),
    "ml.p5.4xlarge": (16, 256, 1, 80), "ml.p5.48xlarge": (192, 2048, 8, 80),
    "ml.p5e.48xlarge": (192, 2048, 8, 141), "ml.p5en.48xlarge": (192, 2048, 8, 141),
    # NVIDIA B200 (179 GiB), B300 (268 GiB); GB200's B200 (185 GiB): 1,432 / 2,144 / 740 GiB
    # of GPU memory per instance in EC2's accelerated computing specifications
    "ml.p6-b200.48xlarge": (192, 2048, 8, 179), "ml.p6-b300.48xlarge": (192, 4096, 8, 268),
    "ml.p6e-gb200.36xlarge": (144, 960, 4, 185),
    # NVIDIA RTX PRO 6000 Blackwell Server Edition (96 GiB)
    "ml.g7e.2xlarge": (8, 64, 1, 96), "ml.g7e.4xlarge": (16, 128, 1, 96),
    "ml.g7e.8xlarge": (32, 256, 1, 96), "ml.g7e.12xlarge": (48, 512, 2, 96),
    "ml.g7e.24xlarge": (96, 1024, 4, 96), "ml.g7e.48xlarge": (192, 2048, 8, 96),
    # NVIDIA RTX PRO 4500 Blackwell (32 GiB). [U] the smaller sizes' memory: g7.48xlarge's
    # 4 GiB per vCPU (768 GiB / 192), the ratio of the g6 sizes it follows
    "ml.g7.2xlarge": (8, 32, 1, 32), "ml.g7.4xlarge": (16, 64, 1, 32),
    "ml.g7.8xlarge": (32, 128, 1, 32), "ml.g7.12xlarge": (48, 192, 2, 32),
    "ml.g7.24xlarge": (96, 384, 4, 32), "ml.g7.48xlarge": (192, 768, 8, 32),
    # AWS Inferentia / Trainium and Habana: accelerators, not GPUs NVML sees
    "ml.inf1.xlarge": (4, 8, 0, 0), "ml.inf1.2xlarge": (8, 16, 0, 0),
    "ml.inf1.6xlarge": (24, 48, 0, 0), "ml.inf1.24xlarge": (96, 192, 0, 0),
    "ml.inf2.xlarge": (4, 16, 0, 0), "ml.inf2.8xlarge": (32, 128, 0, 0),
    "ml.inf2.24xlarge": (96, 384, 0, 0), "ml.inf2.48xlarge": (192, 768, 0, 0),
    "ml.trn1.2xlarge": (8, 32, 0, 0), "ml.trn1.32xlarge": (128, 512, 0, 0),
    "ml.trn1n.32xlarge": (128, 512, 0, 0), "ml.trn2.48xlarge": (192, 2048, 0, 0),
    "ml.dl1.24xlarge": (96, 768, 0, 0),
})



def _vcpus(size: str) -> int | None:
    if size in _VCPUS_OF_SIZE:
        return _VCPUS_OF_SIZE[size]
    match = re.fullmatch(r"(\d+)xlarge", size)
    return 4 * int(match.group(1)) if match else None


def lookup(name: str) -> InstanceType | None:
    """The type's figures, or None when this table does not know them."""
    if name in _LISTED:
        return _LISTED[name]
    match = re.fullmatch(r"ml\.([a-z0-9-]+)\.([a-z0-9]+)", name)
    if not match or match.group(1) not in _GIB_PER_VCPU:
        return None
    vcpus = _vcpus(match.group(2))
    if vcpus is None:
        return None
    family = match.group(1)
    return InstanceType(name, vcpus, vcpus * _GIB_PER_VCPU[family],
                        source=_FAMILY_SOURCE[family[0]])


def known_names() -> list[str]:
    """Examples for messages: the listed types (the family rules cover many more)."""
    return sorted(_LISTED)


def machine_memory_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Budget:
    """An instance's memory budgets and where they came from (shown on the page and logged)."""

    memory_bytes: int | None
    gpu_memory_bytes: int | None
    source: str  # "--memory-budget", "ml.m5.xlarge", or "none"
    instance_type: str | None = None
    # The whole instance's memory (MemoryUtilization's denominator): the type's, else the
    # budget, else None (this machine's).
    instance_bytes: int | None = None
    # The whole instance's GPU memory (GPUMemoryUtilization's denominator): the type's, else
    # the GPU budget.
    instance_gpu_bytes: int | None = None

    @property
    def beyond_machine(self) -> bool:
        """A budget larger than this machine's memory: kept as bookkeeping, with a warning."""
        return self.memory_bytes is not None and self.memory_bytes > machine_memory_bytes()


def budget_for(instance_type: str | None, memory_budget: int | None,
               gpu_memory_budget: int | None = None) -> Budget:
    """``--memory-budget`` when given, else the instance type's model memory, else none; GPU
    memory: ``--gpu-memory-budget`` when given, else the type's GPU memory (none on a CPU
    type)."""
    known = lookup(instance_type) if instance_type else None
    type_gpu = known.gpu_memory_bytes or None if known else None
    gpu = gpu_memory_budget if gpu_memory_budget is not None else type_gpu
    whole_gpu = type_gpu or gpu
    if memory_budget is not None:
        return Budget(memory_budget, gpu, "--memory-budget", instance_type,
                      known.memory_bytes if known else memory_budget, whole_gpu)
    if known is None:
        return Budget(None, gpu, "none", instance_type, None, whole_gpu)
    return Budget(known.model_memory_bytes, gpu, instance_type or "none", instance_type,
                  known.memory_bytes, whole_gpu)
