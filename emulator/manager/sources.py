"""Where TargetModel objects come from: a local folder or an S3 (or S3-compatible) prefix.

Both are read with blocking calls; the model manager runs them in threads. ``open`` streams an
object (the model manager extracts it as it arrives); ``fetch`` copies one to a temporary file
renamed into place, so a failed download leaves nothing behind. A full disk is ``DiskFull``; a
store that does not answer is ``StoreUnavailable`` (failures.py).

Progress: on a terminal, a download that lasts more than half a second shows a tqdm bar; anywhere
else nothing is logged here (the model manager logs one line per model when it is on disk).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import urlparse

from emulator.manager.failures import DiskFull, StoreUnavailable, is_no_space

log = logging.getLogger(__name__)


class ObjectNotFound(Exception):
    """No object for this TargetModel in the model store."""


class ModelSource(Protocol):
    location: str  # shown in messages: "s3://bucket/prefix/" or a folder

    def fetch(self, target: str | None, destination: Path) -> int:
        """Copy the object for ``target`` (None: the model data itself) to ``destination``."""
        ...

    def open(self, target: str | None) -> contextlib.AbstractContextManager[IO[bytes]]:
        """The object for ``target`` as a stream read front to back (ObjectNotFound if none)."""
        ...

    def check(self, single_object: bool) -> None:
        """Raise ModelDataUnreachable unless the store (or its one object) can be read."""
        ...


class ModelDataUnreachable(Exception):
    """The ModelDataUrl cannot be read: the endpoint fails to be created."""


def object_key(prefix: str, target: str) -> str:
    """ModelDataUrl prefix + TargetModel. [U] A '/' is inserted when the prefix lacks one."""
    if not prefix or prefix.endswith("/"):
        return prefix + target
    return f"{prefix}/{target}"


def _atomic_copy(write: Callable[[str], object], destination: Path) -> int:
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".download-", dir=destination.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, destination)
        return destination.stat().st_size
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and is_no_space(exc):
            raise DiskFull(f"{exc.strerror} while copying the archive") from exc
        raise


class FolderSource:
    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        self.location = str(self.root)

    def _path(self, target: str | None) -> Path:
        if target is None:
            return self.root
        # S3 keys are literal: "a/../b.tar.gz", "/abs/b.tar.gz", "b.tar.gz/" and "a//b.tar.gz" name
        # no object there, so here they name none either (a file system would normalise them and
        # serve one object under several TargetModels).
        parts = target.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise ObjectNotFound(target)
        # No part is "..", so the key stays under the root as written; a link the store's owner
        # put there (a tarball linked in from a build folder, as mme serve's packaged stores
        # do) is followed where it points.
        return self.root.joinpath(*parts)

    def listing(self, limit: int = 1000) -> list[str]:
        """The paths (keys) of the files under the folder, sorted; at most ``limit`` looked at."""
        found: list[str] = []
        try:
            for path in self.root.rglob("*"):
                if len(found) >= limit:
                    break
                if path.is_file() and not path.name.startswith("."):
                    found.append(path.relative_to(self.root).as_posix())
        except OSError:
            pass
        return sorted(found)

    def check(self, single_object: bool) -> None:
        ok = self.root.is_file() if single_object else self.root.is_dir()
        if not ok:
            kind = "model archive" if single_object else "model folder"
            raise ModelDataUnreachable(f"Could not access model data at {self.location}: "
                                       f"no such {kind}.")

    def fetch(self, target: str | None, destination: Path) -> int:
        source = self._path(target)
        try:
            found = source.is_file()
        except OSError:  # ENAMETOOLONG and the like: S3 would have no such key either
            found = False
        if not found:
            raise ObjectNotFound(target or str(source))
        return _atomic_copy(lambda tmp: shutil.copyfile(source, tmp), destination)

    @contextlib.contextmanager
    def open(self, target: str | None) -> Iterator[IO[bytes]]:
        source = self._path(target)
        try:
            file = source.open("rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise ObjectNotFound(target or str(source)) from exc
        except OSError as exc:  # ENAMETOOLONG and the like: S3 would have no such key either
            raise ObjectNotFound(target or str(source)) from exc
        stat = os.fstat(file.fileno())
        with file, progress_bar(target or source.name, stat.st_size) as tick:
            yield _ProgressReader(file, tick,  # type: ignore[misc]  # read() is all tarfile uses
                                  _file_version(stat))

    def version(self, target: str | None) -> str | None:
        """What changes when the object is overwritten: its mtime and size (None: gone)."""
        try:
            return _file_version(self._path(target).stat())
        except (OSError, ObjectNotFound):
            return None

    def versions(self) -> dict[str, str]:
        """Every object's ``version`` by its key (TargetModel); hidden files and folders (a
        name that starts with ``.``: partial writes, editors' swap files) are left out."""
        found: dict[str, str] = {}
        for folder, subfolders, files in os.walk(self.root, followlinks=True):
            subfolders[:] = [d for d in subfolders if not d.startswith(".")]
            under = Path(folder).relative_to(self.root)
            for name in files:
                if name.startswith("."):
                    continue
                try:
                    found[(under / name).as_posix()] = _file_version(os.stat(Path(folder, name)))
                except OSError:  # gone since it was listed
                    continue
        return found


ProgressCallback = Callable[[int], None]

# Bars appear only for downloads that outlast this (tqdm's ``delay``): small models stay quiet.
BAR_DELAY_S = 0.5


@contextlib.contextmanager
def progress_bar(name: str, total: int | None, stream: Any = None) -> Iterator[ProgressCallback]:
    """A callback told each chunk's bytes: a tqdm bar on a terminal, otherwise nothing."""
    out = stream if stream is not None else sys.stderr
    bar = None
    if getattr(out, "isatty", lambda: False)():
        from tqdm import tqdm  # imported only when a bar is drawn

        bar = tqdm(total=total or None, desc=f"downloading {name}", unit="B",
                   unit_scale=True, unit_divisor=1024, delay=BAR_DELAY_S, leave=False,
                   file=out, dynamic_ncols=True)
    try:
        yield (bar.update if bar is not None else (lambda _n: None))
    finally:
        if bar is not None:
            bar.close()


def _file_version(stat: os.stat_result) -> str:
    return f"{stat.st_mtime_ns}:{stat.st_size}"


class _ProgressReader:
    """A readable stream that reports the bytes read through it."""

    def __init__(self, raw: IO[bytes], progress: ProgressCallback,
                 version: str | None = None) -> None:
        self._raw, self._progress = raw, progress
        self.version = version  # of the object being read (see ``version``)

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(size)
        self._progress(len(chunk))
        return chunk


class S3Source:
    def __init__(self, url: str, endpoint_url: str | None = None, region: str | None = None):
        import boto3
        from botocore.config import Config

        parsed = urlparse(url)
        self.bucket = parsed.netloc
        self.prefix = parsed.path.lstrip("/")
        self.location = url
        self._client = boto3.client(
            "s3", endpoint_url=endpoint_url, region_name=region,
            config=Config(retries={"max_attempts": 3, "mode": "standard"},
                          max_pool_connections=32),
        )

    def check(self, single_object: bool) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            if single_object:
                self._client.head_object(Bucket=self.bucket, Key=self.prefix)
            else:
                self._client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        except (ClientError, BotoCoreError) as exc:
            raise ModelDataUnreachable(
                f"Could not access model data at {self.location}. Please ensure that the bucket "
                f"and the object or prefix exist and can be read: {exc}") from exc

    def _key(self, target: str | None) -> str:
        return self.prefix if target is None else object_key(self.prefix, target)

    def listing(self, limit: int = 1000) -> list[str]:
        """The keys under the prefix as TargetModels (relative to it), sorted; at most
        ``limit``; empty when the store cannot be listed."""
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = self.prefix if not self.prefix or self.prefix.endswith("/") else self.prefix + "/"
        try:
            page = self._client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=limit)
        except (ClientError, BotoCoreError):
            return []
        return sorted(str(item["Key"])[len(prefix):] for item in page.get("Contents", [])
                      if not str(item["Key"]).endswith("/"))

    def fetch(self, target: str | None, destination: Path) -> int:
        key = self._key(target)
        with _s3_errors(target or key):
            head = self._client.head_object(Bucket=self.bucket, Key=key)
            with progress_bar(key, int(head.get("ContentLength", 0))) as tick:
                return _atomic_copy(
                    lambda tmp: self._client.download_file(self.bucket, key, tmp, Callback=tick),
                    destination,
                )

    def version(self, target: str | None) -> str | None:
        """What changes when the object is overwritten: its ETag (None: gone or unreadable)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            head = self._client.head_object(Bucket=self.bucket, Key=self._key(target))
        except (ClientError, BotoCoreError):
            return None
        etag = head.get("ETag")
        return str(etag) if etag is not None else None

    @contextlib.contextmanager
    def open(self, target: str | None) -> Iterator[IO[bytes]]:
        key = self._key(target)
        with _s3_errors(target or key):
            response = self._client.get_object(Bucket=self.bucket, Key=key)
        stream = _ResumableBody(self._client, self.bucket, key, response)
        try:
            with progress_bar(key, stream.total) as tick:
                # Both have the read() that tarfile streams from, not all of IO.
                yield _ProgressReader(stream, tick,  # type: ignore[arg-type,misc]  # read() is all tarfile uses
                                      response.get("ETag"))
        finally:
            stream.close()


@contextlib.contextmanager
def _s3_errors(name: str) -> Iterator[None]:
    """botocore's and s3transfer's failures as ObjectNotFound or StoreUnavailable."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError
    from s3transfer.exceptions import RetriesExceededError, S3DownloadFailedError

    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code"))
        if code in ("404", "NoSuchKey", "NotFound", "403", "AccessDenied", "NoSuchBucket"):
            raise ObjectNotFound(name) from exc  # SageMaker: "Failed to download"
        raise StoreUnavailable(f"{code}: {exc}") from exc
    except (BotoCoreError, Boto3Error, RetriesExceededError, S3DownloadFailedError,
            ConnectionError) as exc:
        # Connection refused or reset, a read that timed out, retries exhausted.
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc


class _ResumableBody:
    """A GetObject body read front to back; a read that fails resumes where it stopped.

    boto3's ``download_file`` retries a broken transfer; a stream read by hand must do the same:
    a failed read asks again for the rest (``Range``), of the same version (``IfMatch`` on the
    ETag), up to RESUMES times, then it is ``StoreUnavailable``.
    """

    RESUMES = 3

    def __init__(self, client: Any, bucket: str, key: str, response: dict[str, Any]) -> None:
        self._client, self._bucket, self._key = client, bucket, key
        self._body = response["Body"]
        self._etag = response.get("ETag")
        self.total = int(response.get("ContentLength", 0))
        self.offset = 0

    def read(self, size: int = -1) -> bytes:
        import urllib3.exceptions
        from botocore.exceptions import BotoCoreError

        failures = 0
        while True:
            try:
                chunk: bytes = self._body.read(size if size >= 0 else None)
                if chunk or self.offset >= self.total or size == 0:
                    self.offset += len(chunk)
                    return chunk
                problem = f"the connection closed after {self.offset} of {self.total} bytes"
            except (BotoCoreError, urllib3.exceptions.HTTPError, OSError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            failures += 1
            if failures > self.RESUMES:
                raise StoreUnavailable(f"{problem} (resumed {self.RESUMES} times)")
            log.info("download of %s broke at byte %d (%s); resuming", self._key, self.offset,
                     problem)
            self._resume()

    def _resume(self) -> None:
        self.close()
        extra = {"IfMatch": self._etag} if self._etag else {}
        with _s3_errors(self._key):
            response = self._client.get_object(Bucket=self._bucket, Key=self._key,
                                               Range=f"bytes={self.offset}-", **extra)
        self._body = response["Body"]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._body.close()


def source_for(model_data: str, s3_endpoint_url: str | None = None,
               region: str | None = None) -> ModelSource:
    if model_data.startswith("s3://"):
        return S3Source(model_data, s3_endpoint_url, region)
    if model_data.startswith("file://"):
        model_data = urlparse(model_data).path
    return FolderSource(Path(model_data))
