"""What the model manager's parts share: a model's record and state, its errors, one signal.

One job: the vocabulary. The coordinator (model_manager.py) and its three parts (memory.py,
artifacts.py, triton_side.py) all read and write the same ``ModelRecord`` of a TargetModel, so
the record lives beneath them all and none of the parts imports another to learn what a model is.
No I/O here.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
from dataclasses import dataclass, field
from pathlib import Path


class ModelState(str, enum.Enum):
    NEW = "new"
    DOWNLOADING = "downloading"
    ON_DISK = "on_disk"
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADING = "unloading"


class ModelNotReady(Exception):
    """The model is still on its way in after the caller's wait timeout."""


class ModelLoadFailed(Exception):
    """The container could not load the model: ``status`` and ``body`` are what it answered."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(body)
        self.status = status
        self.body = body


@dataclass
class ModelRecord:
    target: str
    key: str
    state: ModelState = ModelState.NEW
    artifact_dir: Path | None = None
    size: int = 0
    entry: str | None = None  # the namespaced Triton name requests go to
    installed: list[str] = field(default_factory=list)
    demand: int = 0  # requests waiting for this model to be loaded
    last_used: float = 0.0
    # Bumped when Triton's copy is abandoned (its stub died): the next load uses new names.
    generation: int = 0
    # What its serving processes held after its last load (None: never measured), and of it
    # the part that is Triton's growth (the rest is its own stubs').
    measured: int | None = None
    measured_growth: int = 0
    # The GPU memory its serving processes took over its last load (NVML; None: never
    # measured, or no GPU to measure on).
    measured_gpu: int | None = None
    # The store's object as downloaded (mtime:size of a file, an S3 ETag), the one it holds
    # now when that differs (overwritten: the copy on disk and in memory is still served), and
    # when the store was last asked.
    version: str | None = None
    store_version: str | None = None
    store_checked: float = 0.0
    # Its KIND_GPU instance groups run on CPU: the endpoint's InstanceType has GPUs, this
    # machine has none (said by /_emulator/models, the page and the load log).
    gpu_on_cpu: bool = False

    @property
    def store_changed(self) -> bool:
        return self.version is not None and self.store_version not in (None, self.version)

    @property
    def memory_size(self) -> int:
        """What the memory budget counts it as: measured, else its files' bytes."""
        return self.measured if self.measured is not None else self.size

    @property
    def gpu_size(self) -> int:
        """What the GPU budget counts it as: measured, else nothing [U]: a model's GPU memory
        is known once it has loaded once (a first load that takes more than is free makes
        the LRU others leave after it, ``ModelMemory.over_measured``)."""
        return self.measured_gpu or 0

    @property
    def triton_key(self) -> str:
        return self.key if not self.generation else f"{self.key}g{self.generation}"


# Every record of one manager, by TargetModel; shared by the coordinator and its parts.
Records = dict[str, ModelRecord]


@dataclass(frozen=True)
class Lease:
    """One request's hold on a loaded model."""

    record: ModelRecord
    cache_hit: bool  # it was loaded already when the request came (ModelCacheHit = 1)
    # Captured at acquire: a reload under a new generation must not rename this request's model.
    entry: str | None = None
    generation: int = 0


class Change:
    """A change that others may wait for: ``next()`` is a future set at the next ``notify()``.

    A waiter takes it before it looks at the state, so a change made between its look and its
    wait still wakes it; ``notify()`` costs one test when nobody waits (every invocation ends
    with one).
    """

    def __init__(self) -> None:
        self._next: asyncio.Future[None] | None = None

    def next(self) -> asyncio.Future[None]:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        return self._next

    def notify(self) -> None:
        waiting, self._next = self._next, None
        if waiting is not None and not waiting.done():
            waiting.set_result(None)


def artifact_key(target: str) -> str:
    """A short, stable, filesystem- and Triton-safe id for a TargetModel (SageMaker uses a hash)."""
    return hashlib.sha256(target.encode()).hexdigest()[:12]


def record_for(records: Records, target: str) -> ModelRecord:
    """The record of ``target``, made (NEW) if it has none yet."""
    record = records.get(target)
    if record is None:
        record = records[target] = ModelRecord(target, artifact_key(target))
    return record
