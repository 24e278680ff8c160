"""The default launcher: the ``tritonserver`` binary shipped in the ``nvidia-pytriton`` wheel.

It runs real Triton core (ensembles, dynamic batching, the Python backend, binary tensors) as a
child process on free ports. Framework backends missing from that build are provided as
Python-based backends from ``emulator/triton/backends/<name>/model.py``, which Triton picks for
``backend: "<name>"`` and for the matching ``platform:``.

Two things that are not obvious, both checked on a CPU machine:
- the Python backend stub embeds libpython in *isolated* mode, so ``PYTHONPATH`` is ignored. It
  finds its site-packages from the first ``python3`` on ``PATH`` (a venv's ``pyvenv.cfg`` is
  honoured), so we put the running interpreter's ``bin`` folder first on Triton's ``PATH``;
- the stub links ``libpython3.X.so``; we put the running interpreter's ``LIBDIR`` on
  ``LD_LIBRARY_PATH`` so the stub's libpython and the stdlib it loads are the same build.

Leftovers: Triton leads its own process group, which its stubs share, so ending the group ends
them all (a stub can outlive a SIGKILLed Triton and ignore SIGTERM). The stubs are started through
a recording wrapper (``emulator/triton/stubs.py``) so that, once the group is gone, the
``/dev/shm`` regions they used can be removed, and so the model manager can see a stub die. A
killed Triton also leaves its Python backend's ``/tmp/python_env_*`` folder: those no running
Triton can own are removed as each Triton exits (``emulator/triton/python_envs.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

from emulator.processes import dies_with_parent, free_ports
from emulator.supervision import (
    STOPPING_AT_ONCE,
    LauncherError,
    SupervisedLauncher,
    output_pipe,
    pump_output,
)
from emulator.triton import python_envs, stubs
from emulator.triton.launcher import (
    TritonAddresses,
    TritonOptions,
    control_args,
    stage_shims,
    wait_until_ready,
)

log = logging.getLogger(__name__)
# Triton's own grace period for in-flight work on stop, then ours before SIGKILL. Short: a model
# stuck loading (its stub died at import) would otherwise hold every stop for Triton's 10-15 s.
EXIT_TIMEOUT_S = 3
# The request headers Triton hands a model as request parameters: a stateful session's id.
SESSION_HEADER_PATTERN = "(?i)^x-amzn-sagemaker-session-id$"
KILL_AFTER_S = 5.0
PORT_ATTEMPTS = 3  # starts on fresh ports when the chosen one was taken meanwhile


@functools.cache
@functools.cache  # the machine's answer for this process's life: probed once
def private_shm_wrapper() -> tuple[str, ...]:
    """A command prefix that runs Triton with a /dev/shm of its own, or () where none can be made.

    Triton's Python backend names its shared-memory regions triton_<backend>_backend_shm_region_<n>
    with n counted from 1 in each Triton, so two Tritons on one machine (a fleet's instances, a
    pipeline's containers) create the same names and break each other's stubs ("unexpected
    response from Python backend stub"). Its shm-region-prefix-name option cannot separate them:
    the Python-based backends (our shims) read the python backend's options and count on their
    own, so the python and onnxruntime backends would then share names within one Triton. A
    private tmpfs on /dev/shm (a mount namespace; a user namespace too when not root) isolates
    each Triton completely, and its regions vanish with it, even when it is SIGKILLed.
    """
    userns = () if os.geteuid() == 0 else ("--user", "--map-root-user")
    wrapper = ("unshare", "--mount", "--propagation", "private", *userns, "sh", "-c",
               'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"', "triton-private-shm")
    try:
        probe = subprocess.run([*wrapper, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        probe = None
    if probe is None or probe.returncode != 0:
        log.warning("cannot give each Triton a private /dev/shm (unshare: %s); two embedded "
                    "Tritons loading Python models at the same time may clash",
                    probe.stderr.decode(errors="replace").strip() if probe else "not found")
        return ()
    return wrapper


def pytriton_root() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise LauncherError(
            "the embedded launcher needs the nvidia-pytriton wheel: pip install nvidia-pytriton "
            "(or pass --tritonserver PATH, or use --launcher docker)"
        )
    return Path(spec.origin).parent


def find_tritonserver(explicit: str | None = None) -> Path:
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise LauncherError(f"--tritonserver {explicit}: no such file")
        return path
    binary = pytriton_root() / "tritonserver" / "bin" / "tritonserver"
    if not binary.is_file():
        raise LauncherError(f"no tritonserver binary at {binary}; reinstall nvidia-pytriton")
    return binary


def assemble_backends(target: Path, stub_registry: Path | None = None) -> Path:
    """Build Triton's --backend-directory: the Python backend plus this project's shims.

    Rebuilt on every start so a shim edited in the source tree is picked up. With
    ``stub_registry``, the stub is started through the recording wrapper (see module docstring).
    """
    triton_dir = pytriton_root() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = triton_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise LauncherError(f"nvidia-pytriton ships no Python backend stub for Python {version}")
    if target.exists():
        shutil.rmtree(target)
    python_dir = target / "python"
    shutil.copytree(triton_dir / "backends" / "python", python_dir,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(stub, python_dir / "triton_python_backend_stub")
    link_interpreter_libpython(triton_dir.parent.parent / "nvidia_pytriton.libs", python_dir)
    if stub_registry is not None:
        stubs.install_wrapper(python_dir / "triton_python_backend_stub", stub_registry)
    stage_shims(target)
    return target


def link_interpreter_libpython(wheel_libs: Path, python_dir: Path) -> Path | None:
    """Have the stub load this interpreter's own ``libpython`` rather than the wheel's.

    The wheel's stub links a libpython grafted into the wheel (``libpython3-<hash>.3X.so.1.0``),
    built as python.org builds it: ``math`` and other modules as files of ``lib-dynload``. The
    stub runs it over the stdlib of the first ``python3`` on ``PATH``; where that is a Debian or
    Ubuntu Python, whose libpython has those modules built in and whose ``lib-dynload`` lacks
    them, every Python model fails to load with "No module named 'math'" (seen on Ubuntu 24.04's
    Python 3.12). A link under the grafted name to this interpreter's own shared libpython, in a
    folder put first on Triton's ``LD_LIBRARY_PATH`` (``child_environment``), makes the stub and
    the stdlib it loads one build. Nothing is linked where this Python has no shared libpython
    (the grafted one is used then). Returns the folder, or None.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    grafted = sorted(wheel_libs.glob(f"libpython3-*.{sys.version_info.minor}.so*"))
    soname = sysconfig.get_config_var("INSTSONAME") or f"libpython{version}.so.1.0"
    own = Path(sysconfig.get_config_var("LIBDIR") or "/nonexistent") / soname
    folder = python_dir / INTERPRETER_LIBS
    shutil.rmtree(folder, ignore_errors=True)
    if not grafted or not own.is_file():
        return None
    folder.mkdir()
    for library in grafted:
        os.symlink(own.resolve(), folder / library.name)
    return folder


# Beside the Python backend in --backend-directory: this interpreter's libpython for the stub.
INTERPRETER_LIBS = "interpreter-libpython"


def child_environment(extra: dict[str, str], backends: Path | None = None) -> dict[str, str]:
    """Triton's environment: the wheel's libraries and this interpreter's on its library path
    (its own libpython first where ``assemble_backends`` linked it), this interpreter's ``bin``
    first on ``PATH``, then ``extra``."""
    env = dict(os.environ)
    libs = [str(pytriton_root().parent / "nvidia_pytriton.libs")]
    if backends is not None and (backends / "python" / INTERPRETER_LIBS).is_dir():
        libs.insert(0, str(backends / "python" / INTERPRETER_LIBS))
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        libs.append(libdir)
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra)
    return env


# Triton flags given once per value; every other ``--flag=value`` holds one value.
REPEATABLE_FLAGS = frozenset({"--backend-config", "--load-model", "--host-policy",
                              "--rate-limit-resource", "--cache-config", "--model-load-gpu-limit",
                              "--model-repository"})


def last_of_each_flag(command: list[str]) -> list[str]:
    """``command`` with only the last of each single-valued ``--flag=value``: Triton takes the
    last anyway, and the command then no longer says contradictory things (``--allow-grpc=false
    ... --allow-grpc=true``) to whoever reads it."""
    names = [arg.partition("=")[0] if arg.startswith("--") and "=" in arg else None
             for arg in command]
    return [arg for i, (arg, name) in enumerate(zip(command, names, strict=True))
            if name is None or name in REPEATABLE_FLAGS or name not in names[i + 1:]]


class EmbeddedLauncher(SupervisedLauncher, TritonAddresses):
    """Runs the wheel's tritonserver as a child process; restarts it if it dies."""

    def __init__(self, options: TritonOptions, work_dir: Path, tritonserver: str | None = None,
                 host: str = "127.0.0.1", name: str = "triton") -> None:
        super().__init__(name)
        self.options = options
        self._work_dir = work_dir
        self._binary = find_tritonserver(tritonserver)
        self._host = host
        self._http_port = 0
        self._grpc_port = 0
        self._metrics_port = 0
        self._process: asyncio.subprocess.Process | None = None
        self._log_task: asyncio.Task[None] | None = None

    @property
    def shared_memory_dir(self) -> Path | None:
        # Triton's own mount namespace (its private /dev/shm, private_shm_wrapper) is reached
        # through /proc; without the wrapper this is the machine's /dev/shm.
        pid = self.pid
        return Path(f"/proc/{pid}/root/dev/shm") if pid and self.is_running() else None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    def command(self) -> list[str]:
        return last_of_each_flag([
            str(self._binary),
            f"--model-repository={self.options.repository}",
            "--model-control-mode=explicit",
            f"--backend-directory={self._work_dir / 'backends'}",
            f"--http-address={self._host}",
            f"--http-port={self._http_port}",
            "--allow-grpc=false",
            # A stateful session's id reaches the model as a request parameter (a Python
            # model reads it from ``request.parameters()``) [U].
            f"--http-header-forward-pattern={SESSION_HEADER_PATTERN}",
            "--allow-metrics=true",
            f"--metrics-port={self._metrics_port}",
            "--exit-on-error=false",
            f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
            *self.options.extra_args,
            *control_args(self._host, self._grpc_port),
        ])

    @property
    def stub_registry(self) -> Path:
        return stubs.registry_for(self.options.repository)

    async def start(self) -> None:
        self.options.repository.mkdir(parents=True, exist_ok=True)
        # A previous run's leftovers (this emulator may have been SIGKILLed mid-run).
        await asyncio.to_thread(stubs.clean_up, self.stub_registry, await self._regions_dir())
        stale = await asyncio.to_thread(stubs.sweep_stale, self._work_dir / "backends")
        if stale:
            log.warning("%s: killed %d process(es) a previous run left behind", self._name,
                        len(stale))
        await asyncio.to_thread(assemble_backends, self._work_dir / "backends", self.stub_registry)
        await self._spawn()
        self._start_watchdog()

    async def _spawn(self) -> None:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return await self._spawn_on_a_free_port()
            except LauncherError as exc:
                # Triton must be told its ports, so another process may take one between
                # free_port and Triton's bind; Triton then exits at once, saying so.
                if "already in use" not in str(exc) or attempt == PORT_ATTEMPTS:
                    raise
                log.warning("%s: a port chosen for it was taken before it started; trying "
                            "others", self._name)
                if self._process is not None:
                    await self._clean_up_after(self._process)

    async def _spawn_on_a_free_port(self) -> None:
        # Three distinct ports: Triton refuses two of its servers on one port (and prints its
        # whole usage, which hides why).
        self._http_port, self._grpc_port, self._metrics_port = free_ports(3, self._host)
        cmd, preexec_fn = dies_with_parent(
            [*await asyncio.to_thread(private_shm_wrapper), *self.command()])
        # The whole command is long (paths, a dozen flags): shown with --log-level DEBUG.
        log.info("starting %s on port %d", self._name, self._http_port)
        log.debug("%s command: %s", self._name, " ".join(cmd))
        read_end, write_end = output_pipe()
        try:
            self._process = await asyncio.create_subprocess_exec(
                *cmd,
                stdout=write_end,
                stderr=subprocess.STDOUT,
                env=child_environment(self.options.environment, self._work_dir / "backends"),
                cwd=str(self._work_dir),
                start_new_session=True,  # Ctrl-C reaches us, not Triton: we stop it in order
                preexec_fn=preexec_fn,  # None: the command sets it, and no Python runs
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the child has its copy: end of file comes when it exits
        self._log_task = asyncio.create_task(
            pump_output(read_end, self._log_tail, logging.getLogger(f"emulator.{self._name}")))
        await self._wait_ready()

    async def _still_starting(self) -> None:
        if self.is_running():
            return
        if self._log_task:  # let the log pump drain so the message shows why
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._log_task, 5)
        code = self._process.returncode if self._process else "?"
        raise LauncherError(f"tritonserver exited with code {code} while starting:\n"
                            + "\n".join(self._log_tail))

    async def _wait_ready(self) -> None:
        if await wait_until_ready(self.http_url, self.options.startup_timeout_s,
                                  self._still_starting):
            log.info("%s ready at %s (pid %s)", self._name, self.http_url, self.pid)
            return
        await self._terminate()
        raise LauncherError(f"tritonserver was not ready within {self.options.startup_timeout_s}s")

    async def _wait_for_exit(self) -> str | None:
        process = self._process
        return None if process is None else str(await process.wait())

    async def _after_exit(self) -> None:
        if self._process is not None:
            await self._clean_up_after(self._process)

    async def _clean_up_after(self, process: asyncio.subprocess.Process) -> None:
        """Triton has exited: end what is left of its process group, remove its shm regions."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # surviving stubs keep Triton's pgid
        removed = await asyncio.to_thread(stubs.clean_up, self.stub_registry,
                                          await self._regions_dir())
        if removed:
            log.info("%s: removed %d shared-memory region(s) left behind", self._name,
                     len(removed))
        envs = await asyncio.to_thread(python_envs.remove_orphans)
        if envs:
            log.info("%s: removed %d Python backend folder(s) left in /tmp by killed Tritons",
                     self._name, len(envs))

    @staticmethod
    async def _regions_dir() -> Path | None:
        """Where this Triton's stubs make their shm regions, as seen from here; None when it
        has a private /dev/shm: they go with it, and the machine's /dev/shm is other Tritons'."""
        return None if await asyncio.to_thread(private_shm_wrapper) else stubs.SHM_DIR

    async def _kill(self) -> None:
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    async def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.returncode is None:
            at_once = STOPPING_AT_ONCE.get()  # a reset: nothing of it is kept
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL if at_once else signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), KILL_AFTER_S)
            except asyncio.TimeoutError:
                log.warning("%s did not stop within %.0fs (a model stuck loading?); killing it",
                            self._name, KILL_AFTER_S)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        await self._clean_up_after(process)

    async def stop(self) -> None:
        await self._stop_watchdog()
        await self._terminate()
        if self._log_task:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._log_task, 5)
        log.info("%s stopped", self._name)
