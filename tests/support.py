"""Small real Triton models for the tests, and the tarballs SageMaker would get.

The ``scale`` model lives in ``harness/testmodels.py`` (the benchmarks use it too).
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import os
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import pytest

from emulator import processes
from ensembles.packaging import package
from harness.testmodels import SCALE_MODEL_PY, write_scale_model, write_two_step_ensemble

__all__ = ["SCALE_MODEL_PY", "package", "write_scale_model", "write_scale_ensemble",
           "scale_request", "output_of", "tar_bytes", "wait_until", "wait_for", "wait_for_async",
           "stopped_after"]


# The MME_* variables of every emulator the suite starts. Every model the suite serves has a
# complete config.pbtxt, so its Tritons skip auto-completion: a process started only to run a
# model's `auto_complete_config`, about a second and a Python start on every load. Emulators
# started in the test process read this (``Settings.from_env(env=SUITE_ENV)``: nothing else of the
# machine's environment); tests/conftest.py puts it in the environment of every command the tests
# start. The docs walk does not (it runs as a user would), nor do the tests of auto-completion
# itself. `MME_TRITON_AUTO_COMPLETE=true make test` loads every model as SageMaker's Triton does.
SUITE_ENV = {"MME_TRITON_AUTO_COMPLETE": os.environ.get("MME_TRITON_AUTO_COMPLETE", "false")}


def skip_module_unless_installed(*modules: str) -> None:
    """Skip the calling test module when one of ``modules`` is not installed, without importing
    them (``pytest.importorskip`` imports): every xdist worker collects every module, and
    importing sentence_transformers (torch, transformers) costs each worker seconds of CPU for
    tests that only one of them runs, which imports what it needs as it runs."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}", allow_module_level=True)


T = TypeVar("T")

def write_scale_ensemble(repo: Path, scale_a: float = 2.0, scale_b: float = 3.0,
                         pad_bytes: int = 0) -> Path:
    """``ensemble`` = ``preprocess`` (x*a) -> ``postprocess`` (x*b): same names in every repo."""
    write_scale_model(repo, "preprocess", scale_a)
    write_scale_model(repo, "postprocess", scale_b)
    if pad_bytes:  # gives the artifact a chosen size for memory-budget tests
        (repo / "postprocess" / "1" / "weights.bin").write_bytes(b"\0" * pad_bytes)
    return write_two_step_ensemble(repo / "ensemble")


def scale_request(values: list[float], input_name: str = "X") -> bytes:
    return json.dumps({"inputs": [{"name": input_name, "shape": [1, len(values)],
                                   "datatype": "FP32", "data": values}]}).encode()


def output_of(body: bytes, name: str = "Y") -> np.ndarray:
    outputs = {o["name"]: o for o in json.loads(body)["outputs"]}
    return np.array(outputs[name]["data"], dtype=np.float32)


def tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


# The tests' waits: every wait on a condition goes through these (no bare sleeps), and they all
# poll through ``emulator.processes.wait_until``, the project's one waiting loop.

# A wait polls often for its first second, then less: a poll (an HTTP call answered in this
# process, a /proc scan) costs CPU, and the long waits (a bake on the emulated clock, copies
# starting) would spend it fifty times a second.
FAST_POLL_S, FAST_FOR_S, LONG_POLL_S = 0.02, 1.0, 0.1


def wait_for(condition: Callable[[], T], timeout: float = 60, what: str = "", *,
             still_going: Callable[[], None] | None = None, interval_s: float | None = None) -> T:
    """Poll ``condition`` until it gives a true value, and return that value. Fails the test
    after ``timeout`` s; ``still_going`` runs between polls and raises at once when what is
    awaited is gone (a process that exited), rather than at the deadline. Polls every
    ``FAST_POLL_S`` for the first ``FAST_FOR_S``, then every ``LONG_POLL_S``; or every
    ``interval_s`` throughout when given (a condition whose calls are the load it waits on)."""
    found: list[T] = []

    def ready() -> bool:
        value = condition()
        if value:
            found.append(value)
        return bool(value)

    if interval_s is not None:
        done = processes.wait_until(ready, timeout, still_starting=still_going,
                                    interval_s=interval_s)
    else:
        fast_s = min(FAST_FOR_S, timeout)
        done = (processes.wait_until(ready, fast_s, still_starting=still_going,
                                     interval_s=FAST_POLL_S)
                or processes.wait_until(ready, timeout - fast_s, still_starting=still_going,
                                        interval_s=LONG_POLL_S))
    if not done:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition}")
    return found[0]


def wait_until(condition: Callable[[], bool], timeout: float = 60, what: str = "", *,
               still_going: Callable[[], None] | None = None,
               interval_s: float | None = None) -> float:
    """``wait_for`` a condition; return the seconds it took."""
    started = time.monotonic()
    wait_for(condition, timeout, what, still_going=still_going, interval_s=interval_s)
    return time.monotonic() - started


async def wait_for_async(condition: Callable[[], T], timeout: float = 60, what: str = "",
                         interval_s: float = 0.01) -> T:
    """``wait_for`` on an event loop: the loop runs on between polls (a fake that waits for
    its test to open a gate, a task that waits for a count)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition}")
        await asyncio.sleep(interval_s)
    return value


class _Serving(Protocol):
    @property
    def server(self) -> Any: ...


S = TypeVar("S", bound=_Serving)


def stopped_after(module: S) -> Iterator[S]:
    """A module fixture's end: ``module`` to the module's tests, then its emulator stopped (its
    ``server`` as it is then: a test may have restarted it)."""
    try:
        yield module
    finally:
        module.server.stop()
