"""Any SageMaker inference container, run as SageMaker runs it.

The contract (SageMaker's "Use your own inference code with hosting services"):
  - ``docker run IMAGE serve``;
  - the model data extracted into ``/opt/ml/model`` (read-only here);
  - the container's ``Environment``;
  - the container answers ``GET /ping`` (200 when healthy) and ``POST /invocations`` on port
    8080 -- or, on a multi-container endpoint, on ``SAGEMAKER_BIND_TO_PORT`` when its image
    carries the label ``com.amazonaws.sagemaker.capabilities.accept-bind-to-port=true``
    (SageMaker then also gives it ``SAGEMAKER_SAFE_PORT_RANGE`` for any second port).

The container port is published on a free host port of 127.0.0.1; the emulator calls it there.
A container that dies is replaced by a new one (the watchdog of ``SupervisedLauncher``, as for
Triton); requests in flight, and those that arrive before the new one answers ``/ping``, fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from emulator.containers import docker_engine as engine
from emulator.containers.images import ensure_image
from emulator.contract import sessions
from emulator.supervision import LauncherError, SupervisedLauncher

if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.models.containers import Container

log = logging.getLogger(__name__)

DEFAULT_PORT = 8080
MODEL_DIR = "/opt/ml/model"
BIND_TO_PORT_LABEL = "com.amazonaws.sagemaker.capabilities.accept-bind-to-port"
# [U] SageMaker does not publish the ports it hands out; each container of a multi-container
# endpoint gets its own, and its own range of 1000 spare ports.
FIRST_BOUND_PORT = 8081
SAFE_PORT_BASE = 20000


@dataclass(frozen=True)
class PortPlan:
    """Where a container listens: 8080, or the ports SageMaker sets on a multi-container
    endpoint (only for an image that declares it honours them)."""

    port: int = DEFAULT_PORT
    environment: tuple[tuple[str, str], ...] = ()

    @classmethod
    def for_member(cls, index: int | None, image_labels: dict[str, str]) -> PortPlan:
        if index is None or image_labels.get(BIND_TO_PORT_LABEL, "").lower() != "true":
            return cls()
        port = FIRST_BOUND_PORT + index
        low = SAFE_PORT_BASE + 1000 * index
        return cls(port, (("SAGEMAKER_BIND_TO_PORT", str(port)),
                          ("SAGEMAKER_SAFE_PORT_RANGE", f"{low}-{low + 999}")))


@dataclass(frozen=True)
class ContainerResponse:
    status: int
    body: bytes
    content_type: str | None
    custom_attributes: str | None
    # The stateful-session contract: the session the container opened ("<id>; Expires=<time>",
    # from X-Amzn-SageMaker-Session-Id or X-Amzn-SageMaker-New-Session-Id) and the one it closed.
    new_session: str | None = None
    closed_session: str | None = None


class ContainerUnreachable(Exception):
    """The container gave no HTTP answer: it died, closed the connection, refused it, or sent
    bytes that are not HTTP. The message names the container, never its address."""


class SageMakerContainer(SupervisedLauncher):
    """One running inference container: start (ping-healthy), invoke, stop; restarted if it
    dies."""

    def __init__(self, *, image: str, label: str, environment: dict[str, str],
                 model_dir: Path | None, member_index: int | None = None,
                 name: str = "container", ping_timeout_s: float = 120.0,
                 client: DockerClient | None = None, host: str = "127.0.0.1") -> None:
        super().__init__(name)
        self.image = image
        self.label = label  # how messages name it: its ContainerHostname or container-N
        self.environment = dict(environment)
        self.model_dir = model_dir
        self.member_index = member_index  # its position on a multi-container endpoint
        self.ping_timeout_s = ping_timeout_s
        self._client = client
        self._owns_client = client is None  # then it is closed at stop, reopened at start
        self._host = host
        self._host_port = 0
        self._container: Container | None = None
        self._session: aiohttp.ClientSession | None = None
        self.ports = PortPlan()

    @property
    def http_url(self) -> str:
        return f"http://{self._host}:{self._host_port}"

    @property
    def container_name(self) -> str | None:
        return self._container.name if self._container is not None else None

    def is_running(self) -> bool:
        return self._container is not None

    def log_tail(self) -> str:
        return "\n".join(self._log_tail)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self._client = await asyncio.to_thread(engine.connect, self._client)
        await asyncio.to_thread(engine.remove_leftover_containers, self._client)
        image = await asyncio.to_thread(ensure_image, self._client, self.image)
        self.ports = PortPlan.for_member(self.member_index, dict(image.labels or {}))
        self._session = aiohttp.ClientSession()
        try:
            await self._spawn()
        except BaseException:
            await self.stop()
            raise
        self._start_watchdog()

    # -- what the watchdog of SupervisedLauncher calls ----------------------------------------

    async def _spawn(self) -> None:
        """A new container, returned once it answers ``GET /ping`` with 200."""
        self._log_tail.clear()
        started = time.monotonic()
        container = await asyncio.to_thread(self._run)
        self._container = container
        engine.follow_logs(container, self._log_line)
        try:
            await self._wait_healthy()
        except BaseException:
            await asyncio.to_thread(self._remove)
            raise
        log.info("%s (%s) healthy at %s in %.1fs", self.label, self.image, self.http_url,
                 time.monotonic() - started)

    async def _wait_for_exit(self) -> str | None:
        return None if self._container is None else await engine.exit_status(self._container)

    async def _after_exit(self) -> None:
        await asyncio.to_thread(self._remove)

    def _describe(self) -> str:
        return f"{self.label} (container {self.container_name})"

    def _run(self) -> Container:
        import docker.errors

        assert self._client is not None
        environment = {**self.environment, **dict(self.ports.environment)}
        volumes = {}
        if self.model_dir is not None:
            volumes[str(self.model_dir.resolve())] = {"bind": MODEL_DIR, "mode": "ro"}
        name = f"mme-{self._name}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        log.info("starting %s: docker run %s serve", self.label, self.image)
        try:
            container = self._client.containers.run(
                self.image, command=["serve"], name=name, detach=True,
                labels=engine.owner_labels(self._name), environment=environment,
                ports={f"{self.ports.port}/tcp": (self._host, None)}, volumes=volumes)
        except docker.errors.APIError as exc:
            raise LauncherError(f"docker could not start {self.image}: {exc}") from exc
        container.reload()
        bindings = container.attrs["NetworkSettings"]["Ports"].get(f"{self.ports.port}/tcp")
        if not bindings:
            logs = container.logs(tail=30).decode(errors="replace")
            with contextlib.suppress(Exception):
                container.remove(force=True)
            raise LauncherError(f"{self.image} exited at once:\n{logs}")
        self._host_port = int(bindings[0]["HostPort"])
        return container

    def _log_line(self, line: str) -> None:
        self._log_tail.append(line)
        log.debug("[%s] %s", self.label, line)

    async def _wait_healthy(self) -> None:
        """``GET /ping`` until 200; a container that exits or never answers fails the start."""
        assert self._session is not None and self._container is not None
        deadline = time.monotonic() + self.ping_timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                async with self._session.get(f"{self.http_url}/ping",
                                             timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    if resp.status == 200:
                        return
            await asyncio.to_thread(self._container.reload)
            if self._container.status in ("exited", "dead"):
                code = self._container.attrs.get("State", {}).get("ExitCode")
                logs = (await asyncio.to_thread(self._container.logs, tail=20)).decode(
                    errors="replace").strip()
                raise LauncherError(f"{self.image} exited with code {code} before answering "
                                    f"/ping; last lines:\n{logs}")
            await asyncio.sleep(0.2)
        raise LauncherError(f"{self.image} did not answer GET /ping with 200 within "
                            f"{self.ping_timeout_s:.0f}s; last lines:\n{self.log_tail()}")

    async def stop(self) -> None:
        await self._stop_watchdog()
        if self._session is not None:
            await self._session.close()
            self._session = None
        await asyncio.to_thread(self._remove)
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await asyncio.to_thread(client.close)

    def _remove(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            engine.remove_container(container, grace_s=5)

    # -- the request path ---------------------------------------------------------------------

    async def invoke(self, body: bytes, content_type: str | None, accept: str | None,
                     custom_attributes: str | None, timeout_s: float,
                     session_id: str | None = None) -> ContainerResponse:
        """``POST /invocations`` with the request's headers, as SageMaker forwards them
        (``session_id``: an open stateful session's, in X-Amzn-SageMaker-Session-Id)."""
        if self._session is None:
            raise ContainerUnreachable(f"{self.label} is not running")
        headers: dict[str, Any] = {}
        if content_type:
            headers["Content-Type"] = content_type
        if accept:
            headers["Accept"] = accept
        if custom_attributes is not None:
            headers["X-Amzn-SageMaker-Custom-Attributes"] = custom_attributes
        if session_id is not None:
            headers[sessions.H_CONTAINER_SESSION_ID] = session_id
        try:
            async with self._session.post(f"{self.http_url}/invocations", data=body,
                                          headers=headers,
                                          timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                return ContainerResponse(
                    resp.status, await resp.read(), resp.headers.get("Content-Type"),
                    resp.headers.get("X-Amzn-SageMaker-Custom-Attributes"),
                    sessions.container_new_session(resp.headers),
                    resp.headers.get(sessions.H_CLOSED_SESSION_ID))
        except asyncio.TimeoutError:
            raise  # the caller's ModelError for a timeout (aiohttp's own are TimeoutErrors too)
        except aiohttp.ClientResponseError as exc:
            # What came back is not HTTP (a status line or header aiohttp cannot parse). Its text
            # names the container's address on this machine, which is nobody's business.
            reason = (str(exc.message).strip().splitlines() or ["unreadable"])[0].rstrip(":")
            raise ContainerUnreachable(f"{self.label} did not answer with an HTTP response "
                                       f"({reason})") from exc
        except aiohttp.ClientConnectorError as exc:
            # The OS's words for it ("Connection refused"); asyncio's text names this machine's
            # address, which is nobody's business either.
            why = os.strerror(exc.errno) if exc.errno else "connection failed"
            raise ContainerUnreachable(f"{self.label} is unreachable: it refused the connection "
                                       f"on its port {self.ports.port} ({why})") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ContainerUnreachable(f"{self.label} is unreachable: {exc}") from exc
