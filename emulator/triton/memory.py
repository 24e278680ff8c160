"""What a Triton's processes really hold in memory, for the model manager to count models by.

A model's measured memory (docs/memory.md) is two parts:

- the *growth* of the memory the Triton itself holds over the model's load: what its backend
  allocated in Triton's process (ONNX Runtime sessions, TensorRT engines, libraries loaded for
  the first model of a backend). Embedded: the proportional set size (PSS) of Triton's process
  tree less its Python backend stubs; docker: the container's cgroup memory (``memory.current``:
  every process in it, the stubs included, and its tmpfs ``/dev/shm``);
- the *own* memory of the model's processes: the PSS of the Python backend stubs that run its
  instances (embedded only: the stub registry says which stub is whose; in a container the
  stubs are inside the cgroup figure already).

PSS, not RSS: a page shared by N processes (the Python interpreter, numpy's libraries mapped by
every stub) counts 1/N in each, so the parts of several models add up to what the machine
really holds rather than counting the shared pages once per stub.

GPU memory: through NVML (``pynvml``) when it is installed and sees a GPU, as the memory each of
the Triton's processes holds on the GPUs; otherwise None (a CPU instance, or no NVML here). A
model's GPU memory is counted in the same two parts: the growth of what Triton's own processes
hold (native backends), and what its stubs hold (Python-based ones, which create their own CUDA
context). Per process, so the memory of a victim's stub that is still exiting is never counted as
the next model's.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from emulator.processes import process_tree
from emulator.triton import stubs

_PAGE = os.sysconf("SC_PAGE_SIZE")


def process_bytes(pid: int) -> int:
    """A process's proportional set size (its RSS when smaps_rollup cannot be read); 0 if gone."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return resident_bytes(pid)


def resident_bytes(pid: int) -> int:
    """A process's resident set size (``statm``: cheap to read, never below its PSS); 0 if
    gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    return 0


# The share of a limit a process tree's RSS must stay under for the tree to be taken as under
# the limit in PSS without measuring it: PSS is at most RSS, and the kernel's RSS counters lag
# by at most a few hundred KiB a process, far less than this share of any instance's memory.
# Measuring PSS (smaps_rollup) costs tens of ms for a Triton with a few models; RSS, well under
# one.
RSS_BOUND_SHARE = 0.875


class MemoryProbe(Protocol):
    def triton_bytes(self) -> int | None:
        """What the Triton holds, less its models' own processes; None: cannot be read now."""

    def own_bytes(self, models: Iterable[str]) -> int:
        """What the processes of these Triton models (their stubs) hold."""

    def total_bytes(self) -> int | None:
        """Everything the instance's Triton holds (MemoryUtilization's numerator)."""

    def gpu_bytes(self) -> int | None:
        """GPU memory the Triton's processes hold; None without a GPU NVML sees."""

    def triton_gpu_bytes(self) -> int | None:
        """GPU memory the Triton holds, less its models' own processes; None as above."""

    def own_gpu_bytes(self, models: Iterable[str]) -> int:
        """GPU memory the processes of these Triton models (their stubs) hold."""

    def oom_kill(self, limit: int) -> OomKill | None:
        """Past ``limit`` bytes in all, kill the largest model process as the kernel's OOM
        killer would; what was killed, or None (within the limit, or nothing to kill)."""


@dataclass(frozen=True)
class OomKill:
    model: str  # the Triton model whose process was killed
    instance: str
    pid: int
    process_bytes: int
    total_bytes: int


class EmbeddedProbe:
    """A Triton running here: its process tree through /proc, its stubs through the registry."""

    def __init__(self, pid_of: Callable[[], int | None], repository: Path) -> None:
        self._pid_of = pid_of
        self._registry = stubs.registry_for(repository)

    def _live_stubs(self) -> list[stubs.Stub]:
        return [s for s in stubs.read(self._registry) if stubs.process_state(s.pid) not in
                (None, "Z")]

    def triton_bytes(self) -> int | None:
        pid = self._pid_of()
        if pid is None:
            return None
        stub_pids = {s.pid for s in stubs.read(self._registry)}
        return sum(process_bytes(p) for p in process_tree(pid) if p not in stub_pids)

    def own_bytes(self, models: Iterable[str]) -> int:
        wanted = set(models)
        return sum(process_bytes(s.pid) for s in self._live_stubs() if s.model in wanted)

    def total_bytes(self) -> int | None:
        pid = self._pid_of()
        return None if pid is None else sum(process_bytes(p) for p in process_tree(pid))

    def gpu_bytes(self) -> int | None:
        pid = self._pid_of()
        return None if pid is None else gpu_bytes_of(set(process_tree(pid)))

    def triton_gpu_bytes(self) -> int | None:
        pid = self._pid_of()
        if pid is None:
            return None
        stub_pids = {s.pid for s in stubs.read(self._registry)}
        return gpu_bytes_of(set(process_tree(pid)) - stub_pids)

    def own_gpu_bytes(self, models: Iterable[str]) -> int:
        wanted = set(models)
        return gpu_bytes_of({s.pid for s in self._live_stubs() if s.model in wanted}) or 0

    def oom_kill(self, limit: int) -> OomKill | None:
        pid = self._pid_of()
        if pid is None:
            return None
        tree = process_tree(pid)
        if sum(resident_bytes(p) for p in tree) < limit * RSS_BOUND_SHARE:
            return None  # far under the limit: its PSS is too (see RSS_BOUND_SHARE)
        total = sum(process_bytes(p) for p in tree)
        if total <= limit:
            return None
        sizes = [(process_bytes(s.pid), s) for s in self._live_stubs()]
        if not sizes:
            return None  # Triton itself: the kernel would take it, the watchdog does not
        size, stub = max(sizes, key=lambda pair: pair[0])
        with contextlib.suppress(ProcessLookupError):
            os.kill(stub.pid, signal.SIGKILL)
        return OomKill(stub.model, stub.instance, stub.pid, size, total)


class CgroupProbe:
    """A Triton in a container: its cgroup's memory (every process in it, stubs included)."""

    def __init__(self, pid_of: Callable[[], int | None]) -> None:
        self._pid_of = pid_of

    def _cgroup_file(self, name: str) -> Path | None:
        pid = self._pid_of()
        if pid is None:
            return None
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                hierarchy, _, rest = line.partition(":")
                controllers, _, path = rest.partition(":")
                if hierarchy == "0":  # cgroup v2
                    return Path("/sys/fs/cgroup") / path.lstrip("/") / name
                if "memory" in controllers.split(","):  # cgroup v1
                    return Path("/sys/fs/cgroup/memory") / path.lstrip("/") / (
                        "memory.usage_in_bytes" if name == "memory.current" else name)
        return None

    def triton_bytes(self) -> int | None:
        file = self._cgroup_file("memory.current")
        if file is None:
            return None
        with contextlib.suppress(OSError, ValueError):
            return int(file.read_text().strip())
        return None

    def own_bytes(self, models: Iterable[str]) -> int:
        return 0  # the stubs run in the container: their memory is in its cgroup's figure

    def total_bytes(self) -> int | None:
        return self.triton_bytes()

    def gpu_bytes(self) -> int | None:
        pid = self._pid_of()
        return None if pid is None else gpu_bytes_of(set(process_tree(pid)))

    def triton_gpu_bytes(self) -> int | None:
        return self.gpu_bytes()  # the stubs are in the container's tree: growth counts them

    def own_gpu_bytes(self, models: Iterable[str]) -> int:
        return 0

    def oom_kill(self, limit: int) -> OomKill | None:
        return None  # the container's own memory limit (docker --memory) has the kernel do it


def gpu_bytes_of(pids: set[int]) -> int | None:
    """GPU memory these processes hold on every GPU NVML sees; None without NVML or a GPU."""
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        if not count:
            return None
        used = 0
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid in pids and process.usedGpuMemory:
                    used += int(process.usedGpuMemory)
        return used
    except pynvml.NVMLError:
        return None


def probe_for(launcher: object) -> MemoryProbe | None:
    """The probe of a launcher's Triton: embedded and docker; None for an external Triton (its
    processes are not this machine's to read: models then count as their files' bytes)."""
    from emulator.triton.docker_launcher import DockerLauncher
    from emulator.triton.embedded import EmbeddedLauncher

    if isinstance(launcher, EmbeddedLauncher):
        embedded = launcher
        return EmbeddedProbe(lambda: embedded.pid if embedded.is_running() else None,
                             embedded.repository)
    if isinstance(launcher, DockerLauncher):
        docker = launcher
        return CgroupProbe(lambda: docker.container_pid if docker.is_running() else None)
    return None
