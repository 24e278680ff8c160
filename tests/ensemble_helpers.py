"""Helpers for the shim and ensemble tests: a real embedded Triton on a background loop.

``RunningTriton`` starts ``EmbeddedLauncher`` on its own asyncio loop in a thread so that
synchronous tests (and tritonclient) can use it; one instance is shared per test module.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import requests
import tritonclient.http as httpclient

from emulator.triton.embedded import EmbeddedLauncher
from emulator.triton.launcher import TritonOptions


class RunningTriton:
    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.repository = work_dir / "repository"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.launcher = EmbeddedLauncher(TritonOptions(repository=self.repository), work_dir)
        self._call(self.launcher.start())
        self.url = self.launcher.http_url
        # tritonclient's HTTP client is gevent-based and must not be shared between threads.
        self._local = threading.local()
        self._clients: list[httpclient.InferenceServerClient] = []

    @property
    def client(self) -> httpclient.InferenceServerClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = httpclient.InferenceServerClient(self.url.removeprefix("http://"),
                                                      network_timeout=300)
            self._local.client = client
            self._clients.append(client)
        return client

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=300)

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._call(self.launcher.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def install(self, source: Path, name: str | None = None) -> str:
        """Copy a model folder into the served repository (Triton loads it on ``load``)."""
        name = name or source.name
        target = self.repository / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target)
        return name

    def install_repo(self, repo: Path) -> list[str]:
        return [self.install(folder) for folder in sorted(repo.iterdir()) if folder.is_dir()]

    def load(self, name: str) -> requests.Response:
        return requests.post(f"{self.url}/v2/repository/models/{name}/load", timeout=600)

    def unload(self, name: str) -> None:
        requests.post(f"{self.url}/v2/repository/models/{name}/unload",
                      json={"parameters": {"unload_dependents": True}}, timeout=120)

    def config(self, name: str) -> dict[str, Any]:
        return requests.get(f"{self.url}/v2/models/{name}/config", timeout=30).json()

    def infer_json(self, name: str, body: dict[str, Any]) -> requests.Response:
        return requests.post(f"{self.url}/v2/models/{name}/infer", data=json.dumps(body),
                             timeout=300)

    def infer(self, name: str, inputs: dict[str, np.ndarray],
              outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        infer_inputs = []
        for key, array in inputs.items():
            item = httpclient.InferInput(key, list(array.shape),
                                         _triton_dtype(array))
            item.set_data_from_numpy(array, binary_data=True)
            infer_inputs.append(item)
        requested = [httpclient.InferRequestedOutput(n, binary_data=True) for n in outputs or []]
        result = self.client.infer(name, infer_inputs, outputs=requested or None)
        names = outputs or [o["name"] for o in result.get_response()["outputs"]]
        return {n: result.as_numpy(n) for n in names}


def _triton_dtype(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(array.dtype))


def triton_session(work_dir: Path) -> Iterator[RunningTriton]:
    triton = RunningTriton(work_dir)
    try:
        yield triton
    finally:
        triton.close()


# --- artifacts built once per test session ---------------------------------------------------
def built_repository(tmp_path_factory: Any, ensemble: str, variant: str | None = None) -> Path:
    """Build an ensemble once per test run (the text one takes ~20 s) and reuse it.

    Shared by the run's pytest-xdist workers: the first to ask builds under a file lock, the
    others wait for it and reuse what it built. The default variant asked by name or by
    ``None`` is one build.
    """
    from ensembles import catalogue

    variant = variant or catalogue.get(ensemble).default_variant
    run_dir = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run_dir = run_dir.parent  # the workers' base folders are siblings in the run's folder
    folder = run_dir / "built-ensembles" / f"{ensemble}-{variant}"
    folder.mkdir(parents=True, exist_ok=True)
    built = folder / "repository-path"
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not built.exists():
            shutil.rmtree(folder / "build", ignore_errors=True)
            repository = catalogue.build(ensemble, folder / "build", variant).repository
            built.write_text(str(repository))
    return Path(built.read_text())


def gpu_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, or no working CUDA: no GPU
        return False
