"""Safe extraction of a model ``.tar.gz``: all or nothing.

Refused, with a message naming the member: absolute paths, ``..`` components, links that lead
out of the folder, device files and FIFOs, and archives whose extracted size exceeds the cap
(``max_bytes``: the smaller of ``--max-extracted-bytes`` and the room the disk budget leaves).
The sizes are the members' declared sizes, checked before anything is written: tarfile writes
exactly that many bytes per member, so a gzip bomb is refused without being expanded on disk.
A full disk is ``DiskFull``, not an unreadable archive.
Extraction goes to a temporary sibling folder that is renamed into place only when complete, so a
failure never leaves a half-extracted model behind.

``extract_stream`` reads the archive as it arrives (tarfile's stream mode), so a download can be
extracted while it is still under way and never lands on disk as a ``.tar.gz``. It cannot see every
member before writing the first, so it checks each member (and the running total of declared
sizes) before writing that member: the cap still bounds what is written, and a refused archive
still leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO, Literal, TypedDict

from emulator.manager.failures import DiskFull, is_no_space


class UnsafeArchive(Exception):
    """The archive is malformed or tries to write outside its folder."""


class ArchiveTooLarge(UnsafeArchive):
    """The archive expands to more than ``limit`` bytes."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


def _check_member(member: tarfile.TarInfo) -> None:
    name = member.name
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith(("/", "\\")):
        raise UnsafeArchive(f"member {name!r} has an absolute path")
    if ".." in path.parts:
        raise UnsafeArchive(f"member {name!r} leads out of the model folder ('..')")
    if member.isdev() or member.isfifo():
        raise UnsafeArchive(f"member {name!r} is a device file or FIFO")
    if member.issym() or member.islnk():
        target = PurePosixPath(member.linkname)
        base = path.parent if member.issym() else PurePosixPath()
        if target.is_absolute():
            raise UnsafeArchive(f"link {name!r} points to an absolute path {member.linkname!r}")
        depth = 0
        for part in (base / target).parts:
            depth += -1 if part == ".." else (0 if part == "." else 1)
            if depth < 0:
                raise UnsafeArchive(f"link {name!r} -> {member.linkname!r} leads out of the folder")


def _too_large(max_bytes: int) -> ArchiveTooLarge:
    return ArchiveTooLarge(
        f"archive expands to more than the {max_bytes}-byte cap "
        "(raise --max-extracted-bytes if this model is really that large)", max_bytes)


class _Filter(TypedDict, total=False):
    filter: Literal["data"]  # tarfile's extraction filter, by name


# The stdlib "data" filter enforces the same rules again (defence in depth).
# (Python 3.10.12+/3.11.4+; older patch releases rely on the checks above.)
_SAFE: _Filter = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def extract_archive(archive: Path, destination: Path, max_bytes: int | None) -> int:
    """Extract ``archive`` into ``destination`` (created; must not exist). Returns bytes written."""
    def unpack(staging: Path) -> int:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            total = 0
            for member in members:
                _check_member(member)
                total += max(member.size, 0)
                if max_bytes is not None and total > max_bytes:
                    raise _too_large(max_bytes)
            tar.extractall(staging, members=members, **_SAFE)
            return total

    return _staged(destination, destination.parent, ".extract-", unpack)


def extract_stream(stream: IO[bytes], destination: Path, max_bytes: int | None,
                   staging_parent: Path | None = None, staging_prefix: str = ".extract-") -> int:
    """Extract a tar (any compression) read sequentially from ``stream`` into ``destination``.

    The temporary folder is made in ``staging_parent`` (default: beside ``destination``), on the
    same file system. Errors of the stream itself (e.g. the store going away) pass through as
    raised; a stream that ends early is an unreadable archive.
    """
    def unpack(staging: Path) -> int:
        total = 0
        with tarfile.open(fileobj=stream, mode="r|*") as tar:
            for member in tar:
                _check_member(member)
                total += max(member.size, 0)
                if max_bytes is not None and total > max_bytes:
                    raise _too_large(max_bytes)
                # Directories keep default modes: a read-only one would refuse the files that
                # follow it (extractall defers directory modes; stream mode cannot).
                tar.extract(member, staging, set_attrs=not member.isdir(), **_SAFE)
        return total

    return _staged(destination, staging_parent or destination.parent, staging_prefix, unpack)


def _staged(destination: Path, staging_parent: Path, prefix: str,
            unpack: Callable[[Path], int]) -> int:
    """Run ``unpack`` into a fresh temporary folder, renamed to ``destination`` when it succeeds."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging_parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=staging_parent))
    try:
        try:
            total = unpack(staging)
        except getattr(tarfile, "FilterError", ()) as exc:
            raise UnsafeArchive(f"refused by the safe-extraction filter: {exc}") from exc
        except OSError as exc:
            if is_no_space(exc):
                raise DiskFull(f"{exc.strerror} while extracting") from exc
            raise UnsafeArchive(f"not a readable .tar.gz archive: {exc}") from exc
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            raise UnsafeArchive(f"not a readable .tar.gz archive: {exc}") from exc
        os.replace(staging, destination)
        return total
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            file = Path(root, name)
            if not file.is_symlink():
                total += file.stat().st_size
    return total
