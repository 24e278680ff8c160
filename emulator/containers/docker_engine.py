"""The Docker engine as the emulator uses it: a connected client, ownership labels, and the
removal of containers a killed emulator left behind.

Every container the emulator starts carries labels naming the emulator process that owns it; a
container whose owner is gone (a crashed or killed emulator) is removed when any docker launcher
starts on this host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from emulator.supervision import LauncherError

if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.models.containers import Container

log = logging.getLogger(__name__)

LABEL_PREFIX = "com.sagemaker-mme-emulator"
OWNER_LABEL = f"{LABEL_PREFIX}.owner"
OWNER_START_LABEL = f"{LABEL_PREFIX}.owner-start"
HOST_LABEL = f"{LABEL_PREFIX}.host"
NAME_LABEL = f"{LABEL_PREFIX}.launcher"
ENGINE_HINT = (
    "install a Docker engine (Debian/Ubuntu: apt-get install docker.io) and start dockerd "
    "(systemctl start docker; docker/setup-engine.sh does both as root), or set DOCKER_HOST"
)


def process_start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat), None if unknown.

    Stored next to the pid, so a recycled pid is not taken for the owner still being alive.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after its ')' are plain.
    return stat.rsplit(")", 1)[1].split()[19]


def owner_alive(pid: int, start_ticks: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    if start_ticks:
        current = process_start_ticks(pid)
        if current is not None and current != start_ticks:
            return False
    return True


def connect(client: DockerClient | None = None) -> DockerClient:
    """A docker client that has answered a ping, or LauncherError saying what to install."""
    try:
        import docker
    except ImportError as exc:
        raise LauncherError(
            "the docker launcher needs the docker SDK: pip install 'sagemaker-mme-emulator[docker]'"
            " (or pip install 'docker>=7')"
        ) from exc
    try:
        client = client or docker.from_env(timeout=120)  # type: ignore[attr-defined]  # docker re-exports it untyped
        client.ping()
    except Exception as exc:  # DockerException, requests' ConnectionError, a missing socket...
        raise LauncherError(f"no Docker engine answers ({exc}): {ENGINE_HINT}") from exc
    return client


def remove_leftover_containers(client: DockerClient) -> list[str]:
    """Remove this host's emulator containers whose owning process is gone; returns their names."""
    hostname = socket.gethostname()
    removed = []
    # Another emulator on this host (or docker's auto-remove) may remove a listed container
    # before it is inspected: a container that is gone is not a leftover.
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL},
                                            ignore_removed=True):
        labels = container.labels or {}
        if labels.get(HOST_LABEL) != hostname:
            continue  # another machine's (a shared engine): its pids mean nothing here
        try:
            pid = int(labels.get(OWNER_LABEL, ""))
        except ValueError:
            continue
        if owner_alive(pid, labels.get(OWNER_START_LABEL)):
            continue
        log.info("removing leftover container %s (owner pid %s is gone)",
                 container.name, pid)
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.name)
    return removed


def owner_labels(name: str) -> dict[str, str]:
    """The labels that tie a container to this emulator process (see the module doc)."""
    pid = os.getpid()
    return {
        OWNER_LABEL: str(pid),
        OWNER_START_LABEL: process_start_ticks(pid) or "",
        HOST_LABEL: socket.gethostname(),
        NAME_LABEL: name,
    }


def follow_logs(container: Container, on_line: Callable[[str], None]) -> threading.Thread:
    """A daemon thread handing each non-empty line of the container's output to ``on_line``,
    until the container is gone."""

    def follow() -> None:
        pending = b""
        try:
            for chunk in container.logs(stream=True, follow=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    _hand_over(raw, on_line)
        except Exception as exc:  # noqa: BLE001 - the container was removed under the stream
            log.debug("log stream of %s ended: %s", container.name, exc)
        _hand_over(pending, on_line)

    thread = threading.Thread(target=follow, daemon=True, name=f"{container.name}-logs")
    thread.start()
    return thread


async def exit_status(container: Container) -> str:
    """Waits for the container to end: its exit code, or why none can be had."""
    try:
        result = await asyncio.to_thread(container.wait)
        return str(result.get("StatusCode"))
    except Exception as exc:  # noqa: BLE001 - removed under us, or the engine went away
        return f"unknown ({exc})"


def _hand_over(raw: bytes, on_line: Callable[[str], None]) -> None:
    line = raw.decode(errors="replace").rstrip()
    if line:
        on_line(line)


def remove_container(container: Container, grace_s: float) -> None:
    """Stop (SIGTERM, then SIGKILL after ``grace_s``) and remove; a container already gone is
    not an error."""
    import docker.errors

    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        container.stop(timeout=grace_s)
    with contextlib.suppress(docker.errors.NotFound):
        container.remove(force=True)
