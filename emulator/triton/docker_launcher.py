"""``--launcher docker``: an official Triton image (NGC, SageMaker's, or any) as a container.

The emulator talks KServe v2 HTTP to the container's port 8000, published on a free host port.

The model manager writes namespaced model folders into ``repository`` and those folders hold
symlinks into the artifact cache (absolute paths). So every folder in ``mounts`` (normally the
whole cache dir) is bind-mounted at the SAME absolute path inside the container and Triton gets
``--model-repository=<that same path>``: the symlinks resolve in the container as they do here.
This needs the engine to run on this machine (or to share its file system at the same paths).

Containers carry labels naming the emulator process that owns them
(``emulator.containers.docker_engine``); leftovers of a killed emulator are removed when any docker
launcher starts on this host.

Images labelled ``com.sagemaker-mme-emulator.shims-dir`` (the CPU test image built by
``docker/build-test-image.sh``) get the emulator's Python-based backend shims bind-mounted into
that backend folder; official images keep their native backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator.containers.docker_engine import (
    connect,
    exit_status,
    follow_logs,
    owner_labels,
    remove_container,
    remove_leftover_containers,
)
from emulator.containers.images import SHIMS_DIR_LABEL, ensure_image
from emulator.supervision import STOPPING_AT_ONCE, LauncherError, SupervisedLauncher
from emulator.triton.launcher import (
    SHIMS_DIR,
    TritonAddresses,
    TritonOptions,
    control_args,
    count_gpus,
    stage_shims,
    wait_until_ready,
)

if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.models.containers import Container

log = logging.getLogger(__name__)


CPU_ONLY_NOISE = "CudaDriverHelper has not been initialized"
TRITON_HTTP_PORT = 8000
TRITON_GRPC_PORT = 8001  # the emulator's control channel (load, unload), published on loopback
TRITON_METRICS_PORT = 8002


def _excerpt(text: str, head: int = 10, tail: int = 30) -> str:
    """First and last lines: Triton names a bad flag on line 1, then prints its whole usage."""
    lines = text.splitlines()
    if len(lines) <= head + tail:
        return text
    return "\n".join([*lines[:head], f"... ({len(lines) - head - tail} lines) ...", *lines[-tail:]])


def _mount_roots(paths: Iterable[Path]) -> list[Path]:
    """Resolved, de-duplicated folders with those inside another one dropped."""
    roots: list[Path] = []
    for path in sorted({Path(p).resolve() for p in paths}, key=lambda p: len(p.parts)):
        if not any(path == root or root in path.parents for root in roots):
            roots.append(path)
    return sorted(roots)


class DockerLauncher(SupervisedLauncher, TritonAddresses):
    """Runs Triton in a container from ``image``; restarts it (a new container) if it dies
    (the watchdog of ``SupervisedLauncher``)."""

    def __init__(
        self,
        options: TritonOptions,
        work_dir: Path | None = None,
        *,
        image: str | None,
        cache_dir: Path | None = None,
        mounts: Sequence[Path] = (),
        shm_size: str = "1g",
        gpus: str = "auto",
        gpu_device: str | None = None,
        pull: bool = True,
        host: str = "127.0.0.1",
        name: str = "triton",
        client: DockerClient | None = None,
        shims_dir: Path | None = SHIMS_DIR,
        memory_limit: int | None = None,
    ) -> None:
        """``cache_dir`` and ``mounts`` are bind-mounted at the same paths (the repository always
        is); ``work_dir`` holds the staged backend shims (a temporary folder if None)."""
        if not image:
            raise LauncherError(
                "--launcher docker needs --image: an NGC image such as "
                "nvcr.io/nvidia/tritonserver:24.08-py3, the SageMaker Triton image, or the CPU "
                "test image mme-triton-cpu:test built by docker/build-test-image.sh"
            )
        if gpus not in ("auto", "all", "none"):
            raise ValueError(f"gpus must be auto, all or none, not {gpus!r}")
        super().__init__(name)
        self.options = options
        self.image = image
        self.mounts = [*([cache_dir] if cache_dir is not None else []), *mounts]
        self.shm_size = shm_size
        self.gpus = gpus
        self.gpu_device = gpu_device  # one GPU of several for this instance, or all of them
        self.pull = pull
        self._host = host
        self._client = client
        self._owns_client = client is None  # then it is closed at stop, reopened at start
        self._shims_dir = shims_dir
        # The instance type's memory: the kernel kills a process past it, as on the instance.
        self.memory_limit = memory_limit
        self._work_dir = work_dir
        self._staged_shims: Path | None = None
        self._image_labels: dict[str, str] = {}
        self._http_port = 0  # the host's ports the container's are published on
        self._grpc_port = 0
        self._container_pid: int | None = None  # on this machine, as the engine reports it
        self._container: Container | None = None
        self._alive = False

    # -- the TritonLauncher protocol (the addresses: TritonAddresses) ------------------------
    @property
    def shared_memory_dir(self) -> Path | None:
        # The container's own /dev/shm, reached through its process on this machine: only
        # where the engine runs here (its socket) and this process may look into the
        # container (root, for a rootful engine's containers). Else bodies go over HTTP.
        pid = self._container_pid
        if not pid or not self._alive or self._client is None:
            return None
        if not str(self._client.api.base_url).startswith("http+docker://"):
            return None  # an engine over TCP: its process ids are another machine's
        folder = Path(f"/proc/{pid}/root/dev/shm")
        return folder if os.access(folder, os.W_OK) else None

    @property
    def container_name(self) -> str | None:
        return self._container.name if self._container is not None else None

    @property
    def container_id(self) -> str | None:
        return self._container.id if self._container is not None else None

    @property
    def container_pid(self) -> int | None:
        """The container's first process on this machine (its cgroup is the container's);
        None when the engine is another machine's (over TCP)."""
        if self._client is None or not str(self._client.api.base_url).startswith(
                "http+docker://"):
            return None
        return self._container_pid

    def is_running(self) -> bool:
        return self._alive

    async def start(self) -> None:
        self.options.repository.mkdir(parents=True, exist_ok=True)
        self._client = await asyncio.to_thread(connect, self._client)
        await asyncio.to_thread(remove_leftover_containers, self._client)
        image = await asyncio.to_thread(ensure_image, self._client, self.image, self.pull)
        self._image_labels = dict(image.labels or {})
        if self._image_labels.get(SHIMS_DIR_LABEL):
            self._staged_shims = await asyncio.to_thread(self._stage_shims)
        self._stopping = False
        await self._spawn()
        self._start_watchdog()

    async def stop(self) -> None:
        await self._stop_watchdog()
        # A reset keeps nothing of it: no grace (the context is read here, not in the thread).
        await asyncio.to_thread(self._remove_container, 0 if STOPPING_AT_ONCE.get() else 10)
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await asyncio.to_thread(client.close)
        if self._staged_shims is not None and self._work_dir is None:
            shutil.rmtree(self._staged_shims.parent, ignore_errors=True)
        self._staged_shims = None
        log.info("%s stopped", self._name)

    # -- container ------------------------------------------------------------------------
    def command(self) -> list[str]:
        return [
            "tritonserver",
            f"--model-repository={self.options.repository.resolve()}",
            "--model-control-mode=explicit",
            f"--http-port={TRITON_HTTP_PORT}",
            "--allow-http=true",
            "--allow-grpc=false",
            "--allow-metrics=true",
            f"--metrics-port={TRITON_METRICS_PORT}",
            "--exit-on-error=false",
            *self.options.extra_args,
            *control_args("0.0.0.0", TRITON_GRPC_PORT),  # in the container; published on loopback
        ]

    def _stage_shims(self) -> Path | None:
        """The shims, staged to stand alone once each folder is mounted (``stage_shims``)."""
        if self._shims_dir is None or not self._shims_dir.is_dir():
            return None
        if self._work_dir is not None:
            staged = self._work_dir / "backends"
            shutil.rmtree(staged, ignore_errors=True)
        else:
            staged = Path(tempfile.mkdtemp(prefix="mme-docker-shims-")) / "backends"
        stage_shims(staged, self._shims_dir)
        staged.mkdir(parents=True, exist_ok=True)
        return staged

    def volumes(self) -> dict[str, dict[str, str]]:
        repository = self.options.repository.resolve()
        roots = _mount_roots([*self.mounts, repository])
        volumes = {str(root): {"bind": str(root), "mode": "rw"} for root in roots}
        target = self._image_labels.get(SHIMS_DIR_LABEL)
        if target and self._staged_shims is not None:
            for shim in sorted(self._staged_shims.iterdir()):
                volumes[str(shim.resolve())] = {"bind": f"{target}/{shim.name}", "mode": "ro"}
        return volumes

    def _device_requests(self) -> list[Any]:
        import docker.types

        if self.gpus == "none" or (self.gpus == "auto" and count_gpus() == 0):
            return []
        if self.gpu_device is not None:
            return [docker.types.DeviceRequest(device_ids=[self.gpu_device],
                                               capabilities=[["gpu"]])]
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]

    def _labels(self) -> dict[str, str]:
        return owner_labels(self._name)

    def _run_container(self) -> Container:
        import docker.errors

        assert self._client is not None
        name = f"mme-{self._name}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        device_requests = self._device_requests()
        log.info("starting %s: docker run %s %s", self._name, self.image, " ".join(self.command()))
        try:
            container = self._client.containers.run(
                self.image,
                command=self.command(),
                name=name,
                detach=True,
                labels=self._labels(),
                environment=dict(self.options.environment),
                # Port None: the engine picks a free host port, so parallel runs never collide.
                ports={f"{TRITON_HTTP_PORT}/tcp": (self._host, None),
                       f"{TRITON_GRPC_PORT}/tcp": (self._host, None)},
                volumes=self.volumes(),
                shm_size=self.shm_size,
                device_requests=device_requests or None,
                **({"mem_limit": self.memory_limit} if self.memory_limit else {}),
            )
        except docker.errors.APIError as exc:
            hint = ""
            if device_requests and "gpu" in str(exc).lower():
                hint = (" (GPUs need the NVIDIA Container Toolkit on the engine's host; "
                        "or run with --gpus none)")
            raise LauncherError(f"docker could not start {self.image}: {exc}{hint}") from exc
        container.reload()
        bindings = container.attrs["NetworkSettings"]["Ports"].get(f"{TRITON_HTTP_PORT}/tcp")
        if not bindings:  # it exited before its port was published (a bad flag, say)
            code = container.attrs.get("State", {}).get("ExitCode")
            logs = container.logs().decode(errors="replace")
            with contextlib.suppress(Exception):
                container.remove(force=True)
            raise LauncherError(f"tritonserver in {self.image} exited with code {code} at "
                                "once:\n" + _excerpt(logs))
        self._http_port = int(bindings[0]["HostPort"])
        grpc = container.attrs["NetworkSettings"]["Ports"].get(f"{TRITON_GRPC_PORT}/tcp")
        self._grpc_port = int(grpc[0]["HostPort"]) if grpc else 0
        self._container_pid = container.attrs.get("State", {}).get("Pid") or None
        return container

    def _log_line(self, prefix: str, line: str) -> None:
        self._log_tail.append(line)
        # Triton prefixes lines with their severity (E1121 12:00:00...); errors are worth seeing,
        # except the one every CPU-only start prints.
        is_error = line[:1] == "E" and line[1:2].isdigit() and CPU_ONLY_NOISE not in line
        level = logging.WARNING if is_error else logging.DEBUG
        log.log(level, "%s %s", prefix, line)

    async def _spawn(self) -> None:
        self._log_tail.clear()
        started = time.monotonic()
        container = await asyncio.to_thread(self._run_container)
        self._container = container
        prefix = f"[{self._name} {container.name}]"
        follow_logs(container, functools.partial(self._log_line, prefix))
        await self._wait_ready(container)
        self._alive = True
        log.info("%s ready at %s (container %s, %.1fs)", self._name, self.http_url,
                 container.name, time.monotonic() - started)

    async def _wait_ready(self, container: Container) -> None:
        async def still_starting() -> None:
            await asyncio.to_thread(container.reload)
            if container.status in ("exited", "dead"):
                code = container.attrs.get("State", {}).get("ExitCode")
                logs = await asyncio.to_thread(container.logs)
                await asyncio.to_thread(self._remove_container)
                raise LauncherError(
                    f"tritonserver in {self.image} exited with code {code} while "
                    "starting:\n" + _excerpt(logs.decode(errors="replace"))
                )

        if await wait_until_ready(self.http_url, self.options.startup_timeout_s, still_starting,
                                  interval_s=0.2):
            return
        await asyncio.to_thread(self._remove_container)
        raise LauncherError(
            f"Triton in {self.image} was not ready within {self.options.startup_timeout_s}s; "
            "last lines:\n" + "\n".join(self._log_tail)
        )

    # -- what the watchdog of SupervisedLauncher calls --------------------------------------
    async def _wait_for_exit(self) -> str | None:
        if self._container is None:
            return None
        code = await exit_status(self._container)
        self._alive = False
        return code

    async def _after_exit(self) -> None:
        await asyncio.to_thread(self._remove_container)

    def _describe(self) -> str:
        return f"{self._name} (container {self.container_name})"

    async def _kill(self) -> None:
        container = self._container
        if container is not None:
            with contextlib.suppress(Exception):  # already gone: the watchdog sees it anyway
                await asyncio.to_thread(container.kill)

    def _remove_container(self, grace_s: float = 10) -> None:
        container, self._container = self._container, None
        self._alive = False
        if container is not None:
            remove_container(container, grace_s=grace_s)
