"""``mme serve --watch`` on a folder store: the store served through a twin folder of tarballs,
kept in step with it while the server runs.

Each TargetModel of the folder (``harness.model_store.store_entries``: ``NAME.tar.gz`` as it is,
a model folder or repository ``NAME/`` packaged as ``NAME.tar.gz``) has its tarball in the twin.
Every ``--watch-interval`` the folder's files are looked at (modification times and sizes, no
file read); an entry whose figures changed, and then held still for one more look (a copy or an
editor's save has finished), is repackaged (a folder) or copied (a tarball) beside the twin's
copy and renamed over it: a download of the old one under way keeps reading the old bytes. The
emulator's own watch on the twin then serves the new version from the model's next call. A
folder that SageMaker's Triton would refuse is not repackaged: the log says why, and the last
good tarball keeps serving.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

from ensembles.packaging import package
from harness.model_store import (
    StoreError,
    file_digest,
    is_model_dir,
    is_tarball,
    store_entries,
)
from harness.package_checks import PackageProblem, check_folder

log = logging.getLogger("mme.store")

Fingerprint = tuple[tuple[str, int, int], ...]
STAGING = ".staging"  # hidden: the emulator's watch leaves it out


def fingerprint(source: Path) -> Fingerprint:
    """(path, mtime, size) of the tarball, or of every file and folder under a model folder."""
    if source.is_file():
        stat = source.stat()
        return (("", stat.st_mtime_ns, stat.st_size),)
    found: list[tuple[str, int, int]] = []
    for folder, subfolders, files in os.walk(source):
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith(".") and d != "__pycache__")
        for name in [*subfolders, *sorted(files)]:
            if name.startswith("."):
                continue
            path = Path(folder, name)
            try:
                stat = path.stat()
            except OSError:  # gone since it was listed
                continue
            size = stat.st_size if name in files else 0
            found.append((path.relative_to(source).as_posix(), stat.st_mtime_ns, size))
    return tuple(found)


class StoreTwin:
    """``folder``'s TargetModels as tarballs in ``twin``."""

    def __init__(self, folder: Path, twin: Path) -> None:
        self.folder = folder
        self.twin = twin
        self._applied: dict[str, Fingerprint] = {}  # what the twin's tarball was made from
        self._last: dict[str, Fingerprint] = {}  # the previous look

    def build(self) -> list[str]:
        """Fill the twin; the TargetModels packaged from folders. Raises StoreError for an
        entry that cannot be served (two entries with one name, a folder Triton refuses)."""
        self.twin.mkdir(parents=True, exist_ok=True)
        entries = store_entries(self.folder)
        packaged = []
        for target, source in entries.items():
            if not is_tarball(source):
                _check(target, source)
                packaged.append(target)
            fingerprint_now = fingerprint(source)
            self._write(target, source)
            self._applied[target] = self._last[target] = fingerprint_now
        return packaged

    def look(self) -> list[tuple[str, str]]:
        """One look at the folder: (TargetModel, what was done) for each entry applied."""
        try:
            entries = store_entries(self.folder)
        except StoreError as exc:
            log.warning("store: %s (nothing applied until it is fixed)", exc)
            return []
        now: dict[str, Fingerprint] = {}
        for target, source in entries.items():
            with contextlib.suppress(OSError):
                now[target] = fingerprint(source)
        done = []
        for target, figures in now.items():
            settled = self._last.get(target) == figures
            if settled and self._applied.get(target) != figures:
                done.append((target, self._apply(target, entries[target], figures)))
        for target in [t for t in self._applied if t not in now]:
            (self.twin / target).unlink(missing_ok=True)
            del self._applied[target]
            log.info("store: %s removed from %s", target, self.folder)
            done.append((target, "removed"))
        self._last = now
        return done

    def _apply(self, target: str, source: Path, figures: Fingerprint) -> str:
        name = source.name + ("/" if source.is_dir() else "")
        what = "changed" if target in self._applied else "added"
        self._applied[target] = figures  # a broken folder is retried when it changes again
        if not is_tarball(source):
            try:
                _check(target, source)
            except StoreError as exc:
                log.warning("store: %s %s but is not packaged: %s; %s", name, what, exc,
                            f"the last good {target} keeps serving" if what == "changed"
                            else f"{target} is not served until it is fixed")
                return "refused"
        try:
            written = self._write(target, source)
        except (OSError, ValueError) as exc:
            log.warning("store: %s %s but could not be %s: %s", name, what,
                        "copied" if is_tarball(source) else "repackaged", exc)
            return "failed"
        if not written:
            log.info("store: %s saved with the same content; %s is unchanged", name, target)
            return "same"
        log.info("store: %s %s; %s as %s", name, what,
                 "copied" if is_tarball(source) else "repackaged", target)
        return "written"

    def _write(self, target: str, source: Path) -> bool:
        """The twin's tarball for ``target`` written beside it and renamed over it; False when
        its bytes would be the same (the twin's is left as it is)."""
        destination = self.twin / target
        staged = self.twin / STAGING / target
        staged.parent.mkdir(parents=True, exist_ok=True)
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            if is_tarball(source):
                shutil.copyfile(source, staged)
            else:
                package(source, staged, layout="folder" if is_model_dir(source) else "flat")
            if destination.exists() and file_digest(staged) == file_digest(destination):
                return False
            os.replace(staged, destination)
            return True
        finally:
            staged.unlink(missing_ok=True)

    @contextlib.contextmanager
    def following(self, interval_s: float) -> Iterator[None]:
        """Look at the folder every ``interval_s`` in a thread, for as long as the block runs."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(interval_s):
                try:
                    self.look()
                except Exception:  # a failed look must not stop the next ones
                    log.exception("store: looking at %s failed", self.folder)

        thread = threading.Thread(target=run, name="store-twin", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def _check(target: str, source: Path) -> None:
    """What SageMaker's Triton would refuse in a folder, as a StoreError naming it."""
    try:
        check_folder(source, "folder" if is_model_dir(source) else "flat")
    except PackageProblem as exc:
        raise StoreError(f"{target}: {exc}") from None
