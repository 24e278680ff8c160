"""Run the emulator in-process, in a background thread: for tests, notebooks and the demo.

    with EmulatorServer(Settings(model_data="./models")) as server:
        boto3.client("sagemaker-runtime", endpoint_url=server.url, ...)
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from emulator.app import build_app
from emulator.cache_lock import CacheDirLock
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.http_protocol import uvicorn_internals_moved
from emulator.processes import bound_socket, wait_until
from emulator.settings import Settings
from emulator.shutdown_protocol import ShutdownHttpProtocol

log = logging.getLogger(__name__)


def uvicorn_config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
    """How uvicorn serves the emulator, in-process or as ``mme serve``."""
    return uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="warning", lifespan="on",
        timeout_keep_alive=75,  # botocore keeps connections; SageMaker's front end does too
        # The peer is the client: X-Forwarded-For from a local process must not become
        # aws:SourceIp for IAM conditions (and the rewrite costs every request).
        proxy_headers=False,
        # Never printed (uvicorn logs at warning), yet formatted for every request when on.
        access_log=False,
        # SageMaker's answers carry no Server header; uvicorn's would be one more per response.
        server_header=False,
        # a response in one send; a stop that no client can hold up (uvicorn's own protocol
        # if the uvicorn installed is not the one these were written against)
        http=ShutdownHttpProtocol if _uvicorn_as_expected() else "httptools",
    )


def _uvicorn_as_expected() -> bool:
    moved = uvicorn_internals_moved()
    for problem in moved:
        log.warning("%s; serving with uvicorn's own HTTP protocol meanwhile", problem)
    return not moved


class EmulatorServer:
    def __init__(self, settings: Settings, startup_timeout_s: float = 180.0) -> None:
        # Bound here, before the app is built: port 0 becomes a port no other server can take
        # between its choice and the bind.
        self._socket = bound_socket(settings.host, settings.port)
        settings.port = self._socket.getsockname()[1]
        self.settings = settings
        # One live server per cache folder (CacheDirInUse otherwise), taken before build_app
        # touches the folder and held until the server has stopped its Tritons.
        self._cache_lock = CacheDirLock(settings.cache_dir)
        try:
            self._cache_lock.acquire(self.url)
            self.app = build_app(settings)
        except BaseException:
            self._cache_lock.release()
            self._socket.close()
            raise
        self._server = uvicorn.Server(uvicorn_config(self.app, settings))
        self._thread = threading.Thread(target=self._server.run, args=([self._socket],),
                                        name="mme-emulator", daemon=True)
        self._startup_timeout_s = startup_timeout_s

    @property
    def page_url(self) -> str:
        """The live page's address; with ``--auth sigv4`` it carries the page's key."""
        key = getattr(self.app.state, "page_key", None)
        return f"{self.url}/_emulator/" + (f"?key={key}" if key else "")

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    @property
    def registry(self) -> EndpointRegistry:
        registry: EndpointRegistry = self.app.state.registry
        return registry

    def start(self) -> EmulatorServer:
        self._thread.start()

        def still_starting() -> None:
            if not self._thread.is_alive():
                raise RuntimeError("the emulator failed to start; see the log above")

        if not wait_until(lambda: self._server.started, self._startup_timeout_s,
                          still_starting=still_starting, interval_s=0.02):
            self.stop()
            raise TimeoutError("the emulator did not start in time")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        self._socket.close()
        if not self._thread.is_alive():  # a server still stopping keeps its folder
            self._cache_lock.release()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
