"""One scenario, every launcher: the ``triton_launcher`` fixture's parameters.

A test module whose scenarios must hold on the docker launcher too requests ``triton_launcher``
(or ``start_emulator`` together with it, see conftest): pytest then runs each of its tests once
per launcher, the docker run marked ``docker`` (skipped with ``--no-docker``, required in CI).
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

EMBEDDED = "embedded"
DOCKER = "docker"

LAUNCHER_PARAMS = [pytest.param(EMBEDDED, id=EMBEDDED),
                   pytest.param(DOCKER, id=DOCKER, marks=[pytest.mark.docker])]

LAUNCHER_CLASSES = {EMBEDDED: "EmbeddedLauncher", DOCKER: "DockerLauncher"}


@dataclass(frozen=True)
class TritonLauncher:
    """How the emulator under test runs Triton: settings to start it with, checks on it."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict)
    docker_client: Any = None

    def overrides(self, mounts: list[Path] | None = None, **settings: Any) -> dict[str, Any]:
        """Settings for an emulator on this launcher; ``mounts`` are folders models read.

        In a container only the cache dir is mounted; a test that puts files a model reads
        (gate files) elsewhere names their folder, mounted at the same path.
        """
        if self.name == DOCKER and mounts:
            settings.setdefault("docker_mounts", mounts)
        return {**self.settings, **settings}

    def of(self, server: Any, endpoint: str = "local") -> Any:
        """The launcher object of ``server``'s endpoint, checked to be of this kind."""
        launcher = server.registry.get(endpoint).instances[0].launcher
        assert type(launcher).__name__ == LAUNCHER_CLASSES[self.name]
        return launcher

    def identity(self, launcher: Any) -> Any:
        """What names the running Triton: its process id, or its container's name."""
        return launcher.container_name if self.name == DOCKER else launcher.pid

    def kill(self, launcher: Any) -> None:
        """Kill Triton from outside, as the OOM killer or ``docker kill`` would."""
        if self.name == DOCKER:
            self.docker_client.containers.get(launcher.container_name).kill()
        else:
            os.kill(launcher.pid, signal.SIGKILL)

    def exists(self, identity: Any) -> bool:
        """Whether the Triton named by ``identity`` (process or container) still exists."""
        if self.name == DOCKER:
            return bool(self.docker_client.containers.list(
                all=True, filters={"name": f"^/{identity}$"}))
        try:
            os.kill(identity, 0)
        except ProcessLookupError:
            return False
        return True


def restarted_event(launcher: Any) -> asyncio.Event:
    """An event set once ``launcher`` has restarted its Triton (it becomes the launcher's
    ``on_restart``)."""
    restarted = asyncio.Event()

    async def on_restart() -> None:
        restarted.set()

    launcher.on_restart = on_restart
    return restarted
