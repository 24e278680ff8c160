"""The instance metrics AWS publishes per instance, sampled from what this machine can see.

- CPUUtilization: CPU time of the instance's Triton process and its children (the Python
  backend stubs) over the sampling period, in percent of one core -- so, as on SageMaker, an
  instance with 4 busy cores reads 400 %.
- MemoryUtilization: their resident memory in percent of this machine's memory.
- DiskUtilization: the instance's artifacts in percent of its disk budget, or, without one, the
  used share of the filesystem holding the cache.
- GPUUtilization / GPUMemoryUtilization: from NVML (``pynvml``, package nvidia-ml-py) when it is
  installed and sees a GPU; otherwise not published, as on a CPU instance.

Only the embedded launcher exposes a process id; for docker and external Tritons the CPU and
memory figures are not sampled (documented in docs/hosting.md, "Fleets").
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from emulator.processes import process_tree

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")



def _cpu_seconds_and_rss(pid: int) -> tuple[float, int]:
    cpu, rss = 0.0, 0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            statm = Path(f"/proc/{member}/statm").read_text().split()
        except (OSError, IndexError):
            continue
        cpu += (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime
        rss += int(statm[1]) * _PAGE
    return cpu, rss


def _total_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * _PAGE


@dataclass
class UtilizationSampler:
    """Call ``sample`` every period; it returns the metrics for the period just ended."""

    last_cpu: dict[int, tuple[float, float]] = field(default_factory=dict)  # pid -> (t, cpu s)

    def sample(self, pid: int | None, now: float, disk_bytes: int, disk_budget: int | None,
               cache_dir: Path) -> dict[str, float]:
        figures: dict[str, float] = {}
        if pid is not None:
            cpu_percent, rss = self.cpu_and_rss(pid, now)
            if cpu_percent is not None:
                figures["CPUUtilization"] = cpu_percent
            figures["MemoryUtilization"] = 100.0 * rss / _total_memory()
        if disk_budget:
            figures["DiskUtilization"] = 100.0 * disk_bytes / disk_budget
        else:
            usage = shutil.disk_usage(cache_dir)
            figures["DiskUtilization"] = 100.0 * usage.used / usage.total
        figures.update(gpu_utilization())
        return figures


    def cpu_and_rss(self, pid: int, now: float) -> tuple[float | None, int]:
        """The CPU time of ``pid``'s process tree since the previous call, in percent of one
        core (None at the first call: it sets the base), and the tree's resident bytes now.
        Also what an inference component's copy is measured by
        (``emulator.hosting.copy_utilization``)."""
        cpu, rss = _cpu_seconds_and_rss(pid)
        previous = self.last_cpu.get(pid)
        self.last_cpu = {pid: (now, cpu)}
        if previous is None or now <= previous[0]:
            return None, rss
        return 100.0 * (cpu - previous[1]) / (now - previous[0]), rss


def gpu_utilization() -> dict[str, float]:
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        if not count:
            return {}
        gpu = memory = 0.0
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu += pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            memory += 100.0 * info.used / info.total
        # As on SageMaker: the sum over the instance's GPUs (4 busy GPUs read 400 %).
        return {"GPUUtilization": gpu, "GPUMemoryUtilization": memory}
    except pynvml.NVMLError:
        return {}
