"""``mme serve``: checks made before anything starts, then the emulator under uvicorn.

A start-up mistake (the cache folder another server owns, a port in use, a model folder that
does not exist, an S3 store boto3 cannot reach or has no credentials for) is one line on stderr
saying what to fix, and exit status 2, before the cache folder is touched or a Triton started.
Any other failure while starting is one line too (exit 1); ``--log-level DEBUG`` shows the
traceback.
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
from collections.abc import Callable
from typing import Any

import uvicorn

from emulator.cache_lock import CacheDirInUse, CacheDirLock
from emulator.processes import bound_socket
from emulator.settings import Settings

log = logging.getLogger("mme.cli")


class StartupMistake(Exception):
    """What the user must fix before the server can start (one line, exit 2)."""


def listening_socket(settings: Settings) -> socket.socket:
    """The socket to serve on: the inherited ``--listen-fd`` or a new one bound now, so that a
    port in use is reported before anything starts (uvicorn binds only after the app has
    started its Tritons)."""
    if settings.listen_fd is not None:
        return inherited_socket(settings.listen_fd)
    try:
        return bound_socket(settings.host, settings.port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise StartupMistake(
                f"port {settings.port} on {settings.host} is in use (another server?); choose "
                "another with --port N (MME_PORT)") from None
        raise StartupMistake(f"cannot listen on {settings.host}:{settings.port} "
                             f"({exc.strerror}); check --host and --port") from None


def inherited_socket(fd: int) -> socket.socket:
    """The listening socket ``--listen-fd`` names (family and type read from the descriptor)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise StartupMistake(f"--listen-fd {fd}: not an open socket ({exc.strerror})") from None
    if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        sock.detach()  # not ours to close
        raise StartupMistake(f"--listen-fd {fd}: the socket is not listening (bind and listen "
                             "before handing it over)")
    return sock


def check_model_data(settings: Settings) -> None:
    """The default endpoint's store can be read, or StartupMistake saying what to fix."""
    if not settings.model_data:
        return
    from emulator.manager.sources import FolderSource, ModelDataUnreachable, source_for

    flag = f"--model-data {settings.model_data}"
    source = source_for(settings.model_data, settings.s3_endpoint_url, settings.region)
    if isinstance(source, FolderSource):
        if source.root.is_file():
            raise StartupMistake(f"{flag}: {source.root} is a file; give the folder that holds "
                                 "your .tar.gz models (or an s3://bucket/prefix/)")
        if not source.root.is_dir():
            raise StartupMistake(f"{flag}: no such folder ({source.root}); create it and put "
                                 "your .tar.gz models in it, or give an s3://bucket/prefix/")
        return
    try:
        source.check(single_object=False)
    except ModelDataUnreachable as exc:
        raise StartupMistake(f"{flag}: {_s3_problem(exc.__cause__, settings)}") from None


def check_recording(settings: Settings) -> None:
    """``--record FILE`` can be written (its folder exists, the file may be created), or
    StartupMistake naming it; ``--record-bodies`` without ``--record`` records nothing."""
    if settings.record is None:
        if settings.record_bodies:
            raise StartupMistake("--record-bodies adds the bodies to a recording: give "
                                 "--record FILE too")
        return
    from mme.arguments import writable_file

    problem = writable_file(settings.record, "--record")
    if problem:
        raise StartupMistake(problem)


def check_inner_loop(settings: Settings) -> None:
    """``--watch``, ``--preload``, ``--init`` and ``--transitions`` can be honoured, or
    StartupMistake saying what to fix: a preload target the store does not hold is named beside
    the ones it does."""
    from emulator.init_file import read_init_file
    from emulator.manager.sources import FolderSource, source_for
    from emulator.settings import StartRefused

    for flag, given in (("--watch", settings.watch), ("--preload", settings.preload)):
        if given and not settings.model_data:
            raise StartupMistake(f"{flag} works on the default endpoint's store: give "
                                 "--model-data DIR too")
    if settings.init is not None:
        try:
            read_init_file(settings.init)
        except StartRefused as exc:
            raise StartupMistake(str(exc)) from None
    if settings.transitions is not None:
        from emulator.transitions import TransitionError, read_rules_file

        try:
            read_rules_file(settings.transitions)
        except TransitionError as exc:
            raise StartupMistake(str(exc)) from None
    if not settings.model_data:
        return
    source = source_for(settings.model_data, settings.s3_endpoint_url, settings.region)
    if settings.watch and not isinstance(source, FolderSource):
        raise StartupMistake(f"--watch looks at a local folder; --model-data "
                             f"{settings.model_data} is not one (copy the models to a folder, "
                             "or leave --watch out)")
    if not settings.preload:
        return
    known = source.listing() if isinstance(source, FolderSource) else _s3_listing(settings)
    unknown = [t for t in settings.preload if t not in known]
    if unknown:
        held = ", ".join(known[:50]) + (" ..." if len(known) > 50 else "") if known else "nothing"
        raise StartupMistake(f"--preload {', '.join(unknown)}: not in the store "
                             f"{settings.model_data}; it holds: {held}")


def _s3_listing(settings: Settings) -> list[str]:
    """The keys under an S3 store's prefix, as TargetModels (at most 1000)."""
    from emulator.manager.sources import S3Source

    assert settings.model_data is not None
    source = S3Source(settings.model_data, settings.s3_endpoint_url, settings.region)
    return source.listing()


def _s3_problem(cause: BaseException | None, settings: Settings) -> str:
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    where = settings.s3_endpoint_url or "AWS S3"
    if isinstance(cause, NoCredentialsError):
        return ("boto3 found no AWS credentials to read the store with; set AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE). A local S3 server (MinIO, moto) "
                "takes whatever keys it was started with: moto takes any")
    if isinstance(cause, EndpointConnectionError):
        hint = ("; for a local S3-compatible server pass --s3-endpoint-url http://HOST:PORT"
                if not settings.s3_endpoint_url else "; is the S3 server running?")
        return f"cannot reach {where} ({cause}){hint}"
    if isinstance(cause, ClientError):
        error = cause.response.get("Error", {})
        return (f"{where} answered {error.get('Code', '?')}: {error.get('Message', cause)}; "
                "check the bucket, the prefix and the credentials' access to them")
    return f"cannot read the store at {where}: {cause}"


class _Server(uvicorn.Server):
    """uvicorn's server, saying where the endpoint and the live page are once it serves."""

    def __init__(self, config: uvicorn.Config, url: str, page_key: str | None = None) -> None:
        super().__init__(config)
        self.url = url
        # With --auth sigv4 the page's address carries the key a browser reads its data with.
        self.page = f"{url}/_emulator/" + (f"?key={page_key}" if page_key else "")

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and not self.should_exit:
            log.info("ready on %s; live page %s", self.url, self.page)


class _OneLineStartupErrors(logging.Filter):
    """uvicorn logs a failed start as the app's whole traceback; keep its last line (what went
    wrong) unless DEBUG is on. ``failure`` keeps that line for the exit message."""

    def __init__(self) -> None:
        super().__init__()
        self.failure: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            self.failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
        elif text.startswith("Traceback (most recent call last)"):
            self.failure = _last_line(text)
        else:  # a startup failure: the exit message says it
            return "Application startup failed" not in text
        return False


def _last_line(traceback_text: str) -> str:
    """``pkg.mod.SomeError: message`` -> ``SomeError: message`` (the traceback's last line)."""
    last = traceback_text.strip().splitlines()[-1]
    name, sep, message = last.partition(": ")
    return f"{name.rpartition('.')[2]}{sep}{message}"


def serve(settings: Settings, stderr: Any,
          prepare_app: Callable[[Any], None] | None = None) -> int:
    """Run the emulator until Ctrl-C or SIGTERM; the exit status. ``prepare_app`` is given the
    built app before it serves (``mme ci up`` installs its per-model figures there)."""
    try:
        listening = listening_socket(settings)
    except StartupMistake as exc:
        print(f"mme serve: {exc}", file=stderr)
        return 2
    host, port = listening.getsockname()[:2]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    lock = CacheDirLock(settings.cache_dir)
    try:
        lock.acquire(url)  # before anything under the cache folder is read or written
        check_model_data(settings)
        check_inner_loop(settings)
        check_recording(settings)
    except (CacheDirInUse, StartupMistake) as exc:
        lock.release()
        listening.close()
        print(f"mme serve: {exc}", file=stderr)
        return 2
    try:
        return _run(settings, listening, url, stderr, prepare_app)
    finally:
        listening.close()
        lock.release()  # after the lifespan's end: every Triton of this server has stopped


def _run(settings: Settings, listening: socket.socket, url: str, stderr: Any,
         prepare_app: Callable[[Any], None] | None = None) -> int:
    from emulator.app import build_app
    from emulator.auth import AuthConfigError
    from emulator.server import uvicorn_config
    from emulator.state.snapshot_format import SnapshotError

    try:
        app = build_app(settings)
    except (AuthConfigError, SnapshotError) as exc:  # a file that cannot be used
        prefix = f"--restore {settings.restore}: " if isinstance(exc, SnapshotError) else ""
        print(f"mme serve: {prefix}{exc}", file=stderr)  # the one line: nothing said before it
        return 2
    log.info("serving endpoint %r from %s on %s (launcher %s)", settings.endpoint_name,
             settings.model_data or "(no model data: use the control plane)", url,
             settings.launcher)
    if settings.launcher == "embedded":
        from harness.lint.releases import embedded_notice

        log.info("%s", embedded_notice(list(settings.image)))  # once, at start
    if prepare_app is not None:
        prepare_app(app)
    # uvicorn captures SIGINT/SIGTERM, shuts down cleanly, then restores the handlers it found
    # and re-raises the signal: with Python's defaults that would end the process with 143 (or a
    # KeyboardInterrupt). No-op handlers make the re-raise harmless, so a clean stop exits 0.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    config = uvicorn_config(app, settings)
    errors = _OneLineStartupErrors()
    uvicorn_log = logging.getLogger("uvicorn.error")
    if settings.log_level.upper() != "DEBUG":
        uvicorn_log.addFilter(errors)
    server = _Server(config, url, getattr(app.state, "page_key", None))
    try:
        server.run(sockets=[listening])
    except SystemExit:  # uvicorn exits (status 3) when the app's start fails: say why below
        pass
    finally:
        uvicorn_log.removeFilter(errors)
    refused = getattr(app.state, "start_refused", None)
    if not server.started and refused is not None:  # --init or --preload: what to fix
        print(f"mme serve: {refused}", file=stderr)
        return 2
    if not server.started:
        print(f"mme serve: could not start: {errors.failure or 'see the log above'} "
              "(--log-level DEBUG shows the traceback)", file=stderr)
        return 1
    return 0
