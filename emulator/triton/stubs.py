"""The Python backend's stub processes of one Triton, as the embedded launcher records them.

Why: Triton does not notice every stub death. A stub that dies while importing ``model.py``
(segfault, ``os._exit``) stays an unreaped zombie and Triton keeps the model LOADING for ever;
Triton's log says nothing. And after Triton is SIGKILLed its stubs can outlive it and leave their
``/dev/shm/triton_python_backend_shm_region_*`` regions behind.

How: the embedded launcher installs a tiny wrapper in place of ``triton_python_backend_stub``
that writes its arguments, one per line, to ``<registry>/<pid>`` and then ``exec``s the real stub
(same pid). Triton 2.51 starts the stub as ``<stub> <repo>/<model>/<version>/model.py
<shm region> <shm size> <shm growth> <parent pid> <backend dir> <ipc handle> <instance> <kind>``;
the model-level stub (auto-complete, exits once the model is loaded) has the model's own name as
its instance name. Other launchers have no registry: every function here is then a no-op.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

SHM_PREFIX = "triton_python_backend_shm_region"
SHM_DIR = Path("/dev/shm")  # the machine's, as a Triton without a private one uses it


def registry_for(repository: Path) -> Path:
    """The registry folder of the Triton serving ``repository`` (beside it, never inside it)."""
    return repository.with_name(repository.name + ".stubs")


@dataclass(frozen=True)
class Stub:
    pid: int
    model: str  # the Triton model name: the model's folder in the repository
    instance: str
    shm_region: str | None


def read(registry: Path) -> list[Stub]:
    stubs = []
    with contextlib.suppress(OSError):
        for file in registry.iterdir():
            if not file.name.isdigit():
                continue
            with contextlib.suppress(OSError, UnicodeDecodeError):
                args = file.read_text().splitlines()
                if len(args) < 3:  # the backend also runs the stub without a model: ignore
                    continue
                parts = PurePosixPath(args[0]).parts
                model = parts[-3] if len(parts) >= 3 else ""
                region = next((a for a in args if a.startswith(SHM_PREFIX)), None)
                stubs.append(Stub(int(file.name), model, args[-2], region))
    return stubs


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state (``Z`` for a zombie), or None when the pid is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]


def zombies(registry: Path, models: Iterable[str]) -> list[Stub]:
    """Stubs of ``models`` that exited and were not reaped by Triton (see the module docstring)."""
    wanted = set(models)
    return [s for s in read(registry) if s.model in wanted and process_state(s.pid) == "Z"]


def forget(registry: Path, models: Iterable[str]) -> None:
    """Drop the records of ``models`` (before loading them again, a pid may be reused; after
    unloading them, their stubs are gone), and those of the argument-less stub runs that have
    exited: the registry then holds about two files per loaded model, not two per load ever."""
    wanted = set(models)
    for stub in read(registry):
        if stub.model in wanted:
            (registry / str(stub.pid)).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        for file in registry.iterdir():
            if not file.name.isdigit() or process_state(int(file.name)) not in (None, "Z"):
                continue
            with contextlib.suppress(OSError):
                if len(file.read_text(errors="replace").splitlines()) < 3:
                    file.unlink()


def _is_stub(pid: int) -> bool:
    try:
        return b"triton_python_backend_stub" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def clean_up(registry: Path, shm_dir: Path | None = SHM_DIR) -> list[str]:
    """After its Triton is gone: kill surviving stubs, unlink their shm regions. Returns them.

    ``shm_dir`` is the ``/dev/shm`` the stubs made their regions in, as this process sees it;
    None where their Triton had a private one (``embedded.private_shm_wrapper``): the regions
    went with it, and the same names in the machine's ``/dev/shm`` are then another Triton's
    (a user's own server numbers its regions the same way, and its stub dies, leaving the
    model LOADING for ever, when its region is unlinked before the stub opens it).

    Only call this when the Triton that started these stubs has exited: a live stub's region is
    in use. Surviving stubs are checked to still be stubs (a pid may have been reused).
    """
    removed = []
    for stub in read(registry):
        if process_state(stub.pid) not in (None, "Z") and _is_stub(stub.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(stub.pid, signal.SIGKILL)
        if stub.shm_region and shm_dir is not None:
            with contextlib.suppress(FileNotFoundError):
                (shm_dir / stub.shm_region).unlink()
                removed.append(stub.shm_region)
        (registry / str(stub.pid)).unlink(missing_ok=True)
    return removed


def names_folder(arg: bytes, folder: Path) -> bool:
    """``arg`` is ``folder``, a path inside it, or ``--flag=`` one of those: a substring match
    would also take ``/x/a/b`` of another server's cache folder for ``/a/b``."""
    path = str(folder).encode()
    value = arg.partition(b"=")[2] if arg.startswith(b"-") else arg
    return value == path or value.startswith(path + b"/")


def sweep_stale(backends_dir: Path) -> list[int]:
    """Kill what a previous run with the same folders left (its Triton, its stubs); unlink the
    shm regions named on the stubs' command lines. Call before starting a Triton there.

    The emulator may have been SIGKILLed: its Triton then gets SIGTERM (parent-death signal) but
    a stub can outlive it, and the next run deletes the folder holding the stub records.
    Only a server that holds its cache folder's lock (emulator/cache_lock.py) may call this:
    what it finds there is then a dead server's, never a live one's.
    """
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(names_folder(arg, backends_dir) for arg in args):
            continue
        # Through the process's own root, while it lives: a stub of a Triton with a private
        # /dev/shm has its region there, and the same name in the machine's /dev/shm may be
        # another Triton's.
        for region in (a.decode() for a in args if a.startswith(SHM_PREFIX.encode())):
            with contextlib.suppress(FileNotFoundError, PermissionError):
                (entry / "root" / "dev" / "shm" / region).unlink()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(int(entry.name))
    return killed


WRAPPER = """#!/bin/sh
# Written by the emulator (emulator/triton/stubs.py): record this stub, then become it.
printf '%s\\n' "$@" > "{registry}/$$" 2>/dev/null
exec "{real}" "$@"
"""


def install_wrapper(stub_path: Path, registry: Path) -> None:
    """Replace the stub binary at ``stub_path`` by the recording wrapper (the binary is kept)."""
    real = stub_path.with_name(stub_path.name + ".real")
    stub_path.replace(real)
    registry.mkdir(parents=True, exist_ok=True)
    stub_path.write_text(WRAPPER.format(registry=registry, real=real))
    stub_path.chmod(0o755)
