"""How the model manager tells what happens to its models: the log lines and the observers.

One job: narration. Every part of the manager (memory.py, artifacts.py, triton_side.py and the
coordinator, model_manager.py) writes its lifecycle lines through the one logger here and tells
the same observers (the live page's feed), so a reader sees one story per model whichever part
acted, and a model is named the same way everywhere (``name_of``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emulator.manager.sources import ModelSource

if TYPE_CHECKING:
    from emulator.manager.records import ModelRecord

# One logger for the whole lifecycle, under the name it had when the manager was one module:
# log configurations and tests filter on it (e.g. "model=... step=download", "step=load").
log = logging.getLogger("emulator.manager.model_manager")

# Told each lifecycle step (the live page's feed): ``observer(step, target, details)``. Steps:
# downloading, downloaded, loading, loaded, failed, unloading (details: reason, and ``for`` when
# the LRU made room for another model), unloaded, taken-out, deleted, store-changed, oom-killed;
# and for the whole instance, named after the model that caused it: recycling (reason),
# recycled (seconds).
ModelObserver = Callable[[str, str, dict[str, Any]], None]


class Events:
    """The observers of one manager, and how its models are named in logs."""

    def __init__(self, source: ModelSource) -> None:
        self._source = source
        self._observers: list[ModelObserver] = []

    def name_of(self, target: str) -> str:
        """The model as logs name it: its TargetModel, or on a single-model endpoint (no
        TargetModel) the name of the endpoint's model data, e.g. ``model.tar.gz``."""
        return target or self._source.location.rstrip("/").rsplit("/", 1)[-1]

    def add_observer(self, observer: ModelObserver) -> None:
        self._observers.append(observer)

    def emit(self, step: str, target: str, **details: Any) -> None:
        for observer in self._observers:
            try:
                observer(step, target, details)
            except Exception:  # an observer's bug must never break a load or an unload
                log.exception("model observer failed on step=%s", step)

    def loaded(self, record: ModelRecord, seconds: float) -> None:
        """A load's line and its ``loaded`` step, with what it measured."""
        log.info("model=%s step=load seconds=%.3f size=%d measured=%s gpu=%s entry=%s%s",
                 self.name_of(record.target), seconds, record.size, record.measured,
                 record.measured_gpu, record.entry,
                 " device=cpu reason=\"KIND_GPU instance groups on CPU: no GPU on this "
                 "machine\"" if record.gpu_on_cpu else "")
        self.emit("loaded", record.target, seconds=seconds, size=record.size,
                  measured=record.measured, growth=record.measured_growth,
                  **({"gpu": record.measured_gpu} if record.measured_gpu is not None else {}),
                  **({"gpu_on_cpu": True} if record.gpu_on_cpu else {}))
