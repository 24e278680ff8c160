"""What every way of running Triton (embedded, docker, external) offers the model manager.

A launcher owns one Triton process (or container) serving the KServe v2 HTTP API on
``http_url`` with ``--model-control-mode=explicit`` over ``repository``: the model manager
writes model folders into ``repository`` and asks Triton to load them by name.

A launcher watches its Triton and restarts it if it dies; it then calls ``on_restart`` so the
model manager can forget what was loaded (models reload on demand, as on a replaced instance).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import socket
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp

RestartCallback = Callable[[], Awaitable[None]]


class LauncherError(RuntimeError):
    """Triton could not be started; the message says what to install, pull or fix."""


@dataclass
class TritonOptions:
    """Flags for tritonserver that the emulator itself decides (not the user's model)."""

    repository: Path
    # Extra `--flag=value` arguments, e.g. from the SAGEMAKER_TRITON_* translation.
    extra_args: list[str] = field(default_factory=list)
    # Environment passed to Triton (and so to Python models), e.g. unknown SAGEMAKER_* keys.
    environment: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 120.0


class TritonLauncher(Protocol):
    @property
    def http_url(self) -> str:
        """Base URL of Triton's KServe v2 HTTP API, e.g. ``http://127.0.0.1:8000``."""
        ...

    @property
    def repository(self) -> Path:
        """The model repository folder on this machine that Triton serves."""
        ...

    on_restart: RestartCallback | None

    async def start(self) -> None:
        """Start Triton and return once ``/v2/health/ready`` answers 200."""
        ...

    async def stop(self) -> None:
        """Stop Triton; no process or container may be left behind."""
        ...

    def is_running(self) -> bool: ...


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now (the OS picks it); good enough for child servers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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
