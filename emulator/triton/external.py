"""``--launcher external --triton-url URL``: a Triton you run yourself.

The emulator does not start or stop that server; ``start()`` waits until its
``/v2/health/ready`` answers 200 and ``stop()`` only stops watching it.

Requirements on that server (the emulator cannot check them all up front):
- it serves the KServe v2 HTTP API at ``URL`` and runs with ``--model-control-mode=explicit``
  (the emulator loads and unloads models by name);
- its ``--model-repository`` is the folder given as ``repository`` here, seen by both at the
  SAME absolute path. The model manager writes model folders there whose files are absolute
  symlinks into the emulator's cache, so in practice share the whole cache dir at the same
  path, e.g. ``docker run -v $CACHE:$CACHE ... tritonserver --model-repository=$CACHE/...``,
  or the shared volume of ``docker/compose.yaml``.

A restart of that server is noticed by polling its liveness: when it answers again after a
failure, ``on_restart`` is called so the model manager forgets what it had loaded (models then
reload on demand, as with the other launchers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import aiohttp

from emulator.background import cancel_and_wait
from emulator.supervision import LauncherError, RestartCallback
from emulator.triton.launcher import TritonOptions, wait_until_ready

log = logging.getLogger(__name__)


class ExternalLauncher:
    def __init__(self, options: TritonOptions, url: str, *, repository: Path | None = None,
                 poll_interval_s: float = 2.0, name: str = "triton") -> None:
        """``repository`` (e.g. ``--triton-repository``) overrides ``options.repository``: it
        is the folder the user's server was started with. ``options.extra_args`` cannot be
        applied to a running server and are logged as ignored."""
        if not url.startswith(("http://", "https://")):
            raise LauncherError(f"--triton-url must be an http(s) URL, not {url!r}")
        self._url = url.rstrip("/")
        self._repository = repository if repository is not None else options.repository
        self.startup_timeout_s = options.startup_timeout_s
        if options.extra_args:
            log.info("%s: Triton flags %s are not applied to an external Triton (set them where "
                     "you start it)", name, " ".join(options.extra_args))
        self.poll_interval_s = poll_interval_s
        self._name = name
        self._alive = False
        self._watchdog: asyncio.Task[None] | None = None
        self.on_restart: RestartCallback | None = None
        self.restarts = 0

    @property
    def http_url(self) -> str:
        return self._url

    @property
    def repository(self) -> Path:
        return self._repository

    @property
    def shared_memory_dir(self) -> Path | None:
        return None  # a Triton of the user's, perhaps on another machine: bodies go over HTTP

    @property
    def grpc_address(self) -> str | None:
        return None  # loads go over HTTP: a stuck load can stall inferences (docs/isolation.md)

    async def recycle(self, reason: str) -> bool:
        log.error("%s at %s cannot recover (%s) and is not the emulator's to restart: restart "
                  "it yourself", self._name, self._url, reason)
        return False

    def is_running(self) -> bool:
        return self._alive

    async def _probe(self, session: aiohttp.ClientSession, path: str) -> bool:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
            async with session.get(f"{self._url}{path}",
                                   timeout=aiohttp.ClientTimeout(total=2)) as resp:
                return resp.status == 200
        return False

    async def start(self) -> None:
        self._repository.mkdir(parents=True, exist_ok=True)
        if not await wait_until_ready(self._url, self.startup_timeout_s, interval_s=0.2):
            raise LauncherError(
                f"no ready Triton at {self._url} within {self.startup_timeout_s}s: start "
                "it with --model-control-mode=explicit and "
                f"--model-repository={self._repository} (the same path on both sides)"
            )
        self._alive = True
        log.info("%s: using the Triton at %s (repository %s)", self._name, self._url,
                 self._repository)
        self._watchdog = asyncio.create_task(self._watch(), name=f"{self._name}-external-watch")

    async def _watch(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                await asyncio.sleep(self.poll_interval_s)
                live = await self._probe(session, "/v2/health/live")
                if live and not self._alive:
                    self.restarts += 1
                    self._alive = True
                    log.warning("%s at %s answers again; treating it as restarted",
                                self._name, self._url)
                    if self.on_restart is not None:
                        await self.on_restart()
                elif not live and self._alive:
                    self._alive = False
                    log.warning("%s at %s stopped answering", self._name, self._url)

    async def stop(self) -> None:
        if self._watchdog is not None:
            await cancel_and_wait(self._watchdog)
            self._watchdog = None
        self._alive = False
