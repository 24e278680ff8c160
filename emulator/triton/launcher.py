"""What every way of running Triton (embedded, docker, external) offers the model manager.

A launcher owns one Triton process (or container) serving the KServe v2 HTTP API on
``http_url`` with ``--model-control-mode=explicit`` over ``repository``: the model manager
writes model folders into ``repository`` and asks Triton to load them by name.

A launcher watches its Triton and restarts it if it dies; it then calls ``on_restart`` so the
model manager can forget what was loaded (models reload on demand, as on a replaced instance).

Control channel. The embedded and docker launchers also open Triton's gRPC endpoint on loopback
(``grpc_address``) for the emulator's own load and unload calls, so that no load ever runs in one
of the HTTP server's threads (docs/isolation.md): Triton's HTTP server answers a load or unload
in the thread that owns the connection, blocking it until the load ends, and every other
connection on that thread (in practice the inference connections) waits with it. Triton's gRPC
server runs each load in a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp

from emulator.supervision import RestartCallback

log = logging.getLogger(__name__)

# Flags that open Triton's gRPC endpoint for the emulator's control calls. Placed after every other
# flag (tritonserver takes the last of a repeated flag), so SageMaker's ``--allow-grpc=false``
# default does not turn it off [U]: on SageMaker nothing outside the container reaches it either.
def control_args(address: str, port: int) -> list[str]:
    return ["--allow-grpc=true", f"--grpc-address={address}", f"--grpc-port={port}"]


# The Python-based backend shims (``backends/<name>/model.py``); their shared module lives once in
# ``backends/_shared/`` and each shim folder links to it.
SHIMS_DIR = Path(__file__).parent / "backends"


@dataclass
class TritonOptions:
    """Flags for tritonserver that the emulator itself decides (not the user's model)."""

    repository: Path
    # Extra `--flag=value` arguments, e.g. from the SAGEMAKER_TRITON_* translation.
    extra_args: list[str] = field(default_factory=list)
    # Environment passed to Triton (and so to Python models), e.g. unknown SAGEMAKER_* keys.
    environment: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 120.0


class TritonAddresses:
    """The addresses a launcher answers for its Triton (``TritonLauncher``'s ``http_url``,
    ``repository``, ``grpc_address``): Triton listens on ``_host``, HTTP on ``_http_port`` and
    gRPC on ``_grpc_port`` (0: not known yet, or none), and serves ``options.repository``."""

    options: TritonOptions
    _host: str
    _http_port: int
    _grpc_port: int

    @property
    def http_url(self) -> str:
        return f"http://{self._host}:{self._http_port}"

    @property
    def repository(self) -> Path:
        return self.options.repository

    @property
    def grpc_address(self) -> str | None:
        return f"{self._host}:{self._grpc_port}" if self._grpc_port else None


class TritonLauncher(Protocol):
    @property
    def http_url(self) -> str:
        """Base URL of Triton's KServe v2 HTTP API, e.g. ``http://127.0.0.1:8000``."""
        ...

    @property
    def repository(self) -> Path:
        """The model repository folder on this machine that Triton serves."""
        ...

    @property
    def shared_memory_dir(self) -> Path | None:
        """Triton's ``/dev/shm`` as this process reaches it: files made there can be registered
        with Triton as system shared memory. None where Triton cannot map our memory."""
        ...

    @property
    def grpc_address(self) -> str | None:
        """``host:port`` of Triton's gRPC endpoint for load and unload calls; None where there
        is none (an external Triton): they then go over HTTP."""
        ...

    on_restart: RestartCallback | None

    async def recycle(self, reason: str) -> bool:
        """Replace a Triton that cannot recover (a load it cannot cancel): end it at once; the
        watchdog starts a new one and calls ``on_restart``. False where it cannot (external)."""
        ...

    async def start(self) -> None:
        """Start Triton and return once ``/v2/health/ready`` answers 200."""
        ...

    async def stop(self) -> None:
        """Stop Triton; no process or container may be left behind."""
        ...

    def is_running(self) -> bool: ...


def stage_shims(target: Path, source: Path = SHIMS_DIR) -> list[Path]:
    """Copy each shim folder of ``source`` into ``target`` (replacing what is there), links
    dereferenced so a folder stands alone when mounted; done on every start, so an edited shim
    is picked up. Returns the staged folders."""
    staged = []
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        for shim in sorted(source.iterdir()):
            if (shim / "model.py").is_file():
                shutil.rmtree(target / shim.name, ignore_errors=True)
                shutil.copytree(shim, target / shim.name,
                                ignore=shutil.ignore_patterns("__pycache__"))
                staged.append(target / shim.name)
    return staged


async def wait_until_ready(url: str, timeout_s: float,
                           still_starting: Callable[[], Awaitable[None]] | None = None,
                           interval_s: float = 0.1) -> bool:
    """Poll ``GET {url}/v2/health/ready`` until it answers 200 (True) or ``timeout_s`` passes.

    ``still_starting`` runs between polls and raises LauncherError when the server is gone
    (the process exited, the container died), so a crash is reported at once, with its log.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with aiohttp.ClientSession() as session:
        while loop.time() < deadline:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                async with session.get(f"{url}/v2/health/ready",
                                       timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    if resp.status == 200:
                        return True
            if still_starting is not None:
                await still_starting()
            await asyncio.sleep(interval_s)
    return False


@functools.cache
def count_gpus() -> int:
    """GPUs ``nvidia-smi -L`` lists on this machine (0 without the tool or a driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    if out.returncode != 0:
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
