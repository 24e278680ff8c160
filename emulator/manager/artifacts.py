"""Disk and artifacts: the cache folder of downloaded, extracted models, under the disk budget.

One job: what is on disk. A TargetModel is downloaded from its store (``sources.py``) and
extracted (``extract.py``) into ``<cache>/artifacts/<key>/model``, as it arrives by default; the
disk budget (``--disk-budget``, an ``LruIndex`` of the artifacts) deletes the least recently used
artifacts that are not loaded, waited for or being brought in, and caps what one archive may
expand to. A failure outside the model (no disk, the store down) becomes a ModelError that says
what to fix (``failures.py``). Same key, new bytes: the store is asked now and then whether a
served model's object was overwritten (an emulator-only warning; SageMaker keeps serving its copy).

Why apart: the disk's rules (what may be deleted, all-or-nothing extraction, folders renamed away
before removal) touch neither memory nor Triton; the coordinator says when a model is in use.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from emulator.faults.rules import DownloadFault
from emulator.manager import failures
from emulator.manager.events import Events, log
from emulator.manager.extract import ArchiveTooLarge, extract_archive, extract_stream, tree_size
from emulator.manager.failures import DiskFull, StoreUnavailable
from emulator.manager.lru import DoesNotFit, LruIndex
from emulator.manager.records import ModelLoadFailed, ModelRecord, ModelState, Records
from emulator.manager.sources import ModelSource
from emulator.metrics import InstanceMetrics

# How often a stalled download looks whether its fault rule is still in force.
STALL_POLL_S = 0.05


@dataclass(frozen=True)
class InjectedDownload:
    """A fault rule's download: broken (a connection reset) or stalled after so many bytes;
    a stall lasts while ``in_force()`` (the rule removed or expired: the download goes on)."""

    fault: DownloadFault
    in_force: Callable[[], bool]

    def reached(self) -> None:
        """At ``fault.after_bytes``: raise the reset, or wait out the stall (in a thread)."""
        if not self.fault.stall:
            raise StoreUnavailable(f"connection reset by peer after {self.fault.after_bytes} "
                                   "bytes")
        while self.in_force():
            time.sleep(STALL_POLL_S)


class _FaultyStream:
    """A store's object stream that meets its injected download fault at its byte."""

    def __init__(self, stream: IO[bytes], injected: InjectedDownload) -> None:
        self._stream = stream
        self._injected = injected
        self._read = 0
        self._met = False

    def read(self, size: int = -1) -> bytes:
        if self._met:
            return self._stream.read(size)
        left = self._injected.fault.after_bytes - self._read
        if left <= 0:
            self._injected.reached()  # raises, or returns once the stall is over
            self._met = True
            return self._stream.read(size)
        chunk = self._stream.read(left if size < 0 else min(size, left))
        self._read += len(chunk)
        return chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class ArtifactCache:
    def __init__(self, *, source: ModelSource, cache_dir: Path, records: Records,
                 events: Events, metrics: InstanceMetrics, disk_budget: int | None,
                 max_extracted_bytes: int | None, bringing_in: Callable[[str], bool]) -> None:
        self.source = source
        self.dir = cache_dir / "artifacts"
        self.records = records
        self.events = events
        self.metrics = metrics
        self.index = LruIndex(disk_budget)
        self.max_extracted_bytes = max_extracted_bytes
        # Is a load of this TargetModel under way (its files are read until Triton has them)?
        self._bringing_in = bringing_in
        self.downloads = 0
        self._background: set[asyncio.Task[None]] = set()

    def _wanted(self, record: ModelRecord) -> frozenset[str]:
        """Artifacts no disk eviction for ``record`` may take: those a request waits for, and
        those being brought in (their waiters may have given up; the load goes on, reading the
        files until Triton has loaded them, and then they are pinned)."""
        return frozenset(t for t, r in self.records.items()
                         if t != record.target and (r.demand or self._bringing_in(t)))

    def _room(self, record: ModelRecord) -> int | None:
        """Bytes ``record`` may take on disk once every evictable artifact is deleted."""
        capacity = self.index.capacity_bytes
        if capacity is None:
            return None
        wanted = self._wanted(record)
        return max(capacity - self.index.unevictable_bytes(wanted | {record.target}), 0)

    # --- bringing an artifact in ------------------------------------------------------------

    async def bring_to_disk(self, record: ModelRecord, stream: bool,
                            leaving: Iterable[asyncio.Task[None]],
                            fault: InjectedDownload | None = None) -> None:
        """Download ``record`` unless its files are here. ``leaving``: the unloads under way."""
        if record.artifact_dir is not None and record.artifact_dir.is_dir():
            return
        leaving = list(leaving)
        if self.index.capacity_bytes is not None and leaving:
            # A victim still leaving Triton (a load overlapped its teardown) holds its files
            # until it is gone; under a disk budget they may be the room this download needs.
            await asyncio.gather(*map(asyncio.shield, leaving), return_exceptions=True)
        await self.download(record, stream, fault)

    async def download(self, record: ModelRecord, stream: bool,
                       fault: InjectedDownload | None = None) -> None:
        """Download and extract ``record``'s object; then make room on disk for it.

        ``stream``: extract as it arrives (``open`` + ``extract_stream``); else copy the archive
        to disk, then extract it (``mme bench coldstart`` measures both). ``fault``: a fault
        rule's broken or stalled download.
        """
        record.state = ModelState.DOWNLOADING
        self.events.emit("downloading", record.target)
        destination = self.dir / record.key
        archive = self.dir / f"{record.key}.tar.gz"
        started = time.monotonic()
        room = self._room(record)
        limit = self.max_extracted_bytes
        if room is not None and (limit is None or room < limit):
            limit = room
        step = "downloading and extracting" if stream else "downloading"
        try:
            if destination.exists():
                await asyncio.to_thread(shutil.rmtree, destination)
            if stream:
                record.version = await asyncio.to_thread(
                    self._stream_in, record.target or None, destination / "model", limit, fault)
            else:
                record.version = await asyncio.to_thread(self.store_version, record.target)
                await asyncio.to_thread(self.source.fetch, record.target or None, archive)
                if fault is not None:  # the archive copied whole: the fault meets it at its end
                    await asyncio.to_thread(fault.reached)
                step = "extracting"
                await asyncio.to_thread(extract_archive, archive, destination / "model", limit)
        except BaseException as exc:
            record.state = ModelState.NEW
            await asyncio.to_thread(shutil.rmtree, destination, True)  # nothing half-written
            self._raise_download_failure(record, exc, step, limit, room)
            raise
        finally:
            archive.unlink(missing_ok=True)
        elapsed = time.monotonic() - started
        self.metrics.record("ModelDownloadingTime", elapsed * 1e6)
        self.downloads += 1
        record.artifact_dir = destination
        record.store_version, record.store_checked = record.version, time.monotonic()
        record.size = await asyncio.to_thread(tree_size, destination)
        record.state = ModelState.ON_DISK
        # The one line per model a download logs when no terminal shows a bar (sources.py).
        log.info("model=%s step=download seconds=%.3f size=%d", self.events.name_of(record.target),
                 elapsed, record.size)
        self.events.emit("downloaded", record.target, seconds=elapsed, size=record.size)
        await self._make_room(record)

    def _stream_in(self, target: str | None, destination: Path, limit: int | None,
                   fault: InjectedDownload | None = None) -> str | None:
        """Extract the object while it downloads: no ``.tar.gz`` on disk, no wait between steps.

        The temporary folder sits in the artifacts folder as ``.download-<key>-*`` until the
        archive is complete, then becomes ``<key>/model``; on any failure it is deleted.
        Returns the version of the object read (``sources``), when the store says it.
        """
        with self.source.open(target) as stream:
            faulty = stream if fault is None else cast(IO[bytes], _FaultyStream(stream, fault))
            extract_stream(faulty,
                           destination, limit, staging_parent=self.dir,
                           staging_prefix=f".download-{destination.parent.name}-")
            version = getattr(stream, "version", None)
        return version if isinstance(version, str) else None

    def store_version(self, target: str) -> str | None:
        """The store's object's version now (None: gone, or a store that cannot say)."""
        version_of = getattr(self.source, "version", None)
        return version_of(target or None) if version_of is not None else None

    def _raise_download_failure(self, record: ModelRecord, exc: BaseException, step: str,
                                limit: int | None, room: int | None) -> None:
        """Turn a failure outside the model into a ModelError that says what to fix."""
        target = record.target or "(the endpoint's model)"
        if isinstance(exc, ArchiveTooLarge) and room is not None and limit == room:
            assert self.index.capacity_bytes is not None
            raise ModelLoadFailed(failures.INSUFFICIENT_STORAGE, failures.body(
                failures.over_disk_budget(target, limit, self.index.capacity_bytes))) from None
        if isinstance(exc, DiskFull) or failures.is_no_space(exc):
            raise ModelLoadFailed(failures.INSUFFICIENT_STORAGE, failures.body(
                failures.disk_full(target, str(self.dir), step, str(exc)))) from None
        if isinstance(exc, StoreUnavailable):
            raise ModelLoadFailed(failures.STORE_UNAVAILABLE, failures.body(
                failures.store_unavailable(target, self.source.location, str(exc)))) from None

    async def _make_room(self, record: ModelRecord) -> None:
        wanted = self._wanted(record)
        try:
            victims = self.index.victims(record.size, exclude=wanted) or []
        except DoesNotFit:
            victims = None
        if victims is None:
            log.warning("model=%s step=disk-evict outcome=over-budget (everything else is in use)",
                        self.events.name_of(record.target))
            victims = []
        # Every victim is forgotten before the first await: a victim list chosen here must not
        # meet a victim that another request has pinned, or another deletion has taken, since.
        doomed = [self.forget(self.records[target]) for target in victims]
        self.index.add(record.target, record.size)
        for folder in doomed:
            await self.remove_folder(folder)

    # --- taking an artifact out -------------------------------------------------------------

    async def delete(self, record: ModelRecord) -> None:
        await self.remove_folder(self.forget(record))

    def forget(self, record: ModelRecord) -> Path | None:
        """Take ``record`` off the disk at once (no await); returns the folder to remove.

        The folder is renamed out of the way first: a request for the same model meanwhile
        downloads it afresh into ``<key>`` without the removal deleting what it writes.
        """
        self.index.remove(record.target)
        folder, record.artifact_dir = record.artifact_dir, None
        record.state = ModelState.NEW
        log.info("model=%s step=disk-evict size=%d", self.events.name_of(record.target),
                 record.size)
        self.events.emit("deleted", record.target, size=record.size)
        if not record.demand:
            self.records.pop(record.target, None)
        if folder is None:
            return None
        doomed = folder.with_name(f".deleting-{folder.name}-{secrets.token_hex(4)}")
        try:
            folder.rename(doomed)
        except OSError:
            return folder
        return doomed

    async def remove_folder(self, folder: Path | None) -> None:
        if folder is not None:
            await asyncio.to_thread(shutil.rmtree, folder, True)

    # --- same key, new bytes ----------------------------------------------------------------

    def check_store_soon(self, record: ModelRecord, every_s: float) -> None:
        """Same key, new bytes: ask the store (off the request path, at most once per
        ``every_s``) whether the object behind a model it serves has changed. SageMaker keeps
        serving the copy it loaded until that copy is evicted (unloaded and deleted from the
        instance's disk), so does the emulator; it says so in the log and on the page."""
        now = time.monotonic()
        if record.version is None or now - record.store_checked < every_s:
            return
        record.store_checked = now
        task = asyncio.get_running_loop().create_task(self._check_store(record))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _check_store(self, record: ModelRecord) -> None:
        try:
            found = await asyncio.to_thread(self.store_version, record.target)
        except Exception:  # noqa: BLE001 - a failed check changes nothing; the next one retries
            return
        if found is None or found == record.store_version:
            return
        record.store_version = found
        if not record.store_changed:
            return
        log.warning("model=%s step=store-changed served=%s store=%s (the object in the model "
                    "store was overwritten; as on SageMaker the endpoint keeps serving the copy "
                    "it loaded until that copy is evicted from memory and deleted from disk; "
                    "upload new bytes under a new TargetModel name to serve them at once)",
                    self.events.name_of(record.target), record.version, found)
        self.events.emit("store-changed", record.target, served=record.version, store=found)

    def close(self) -> None:
        for task in list(self._background):
            task.cancel()
