"""Where TargetModel objects come from: a local folder or an S3 (or S3-compatible) prefix.

Both are read with blocking calls; the model manager runs them in threads. A download goes to a
temporary file renamed into place, so a failed download leaves nothing behind. A full disk is
``DiskFull``; a store that does not answer is ``StoreUnavailable`` (failures.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

from emulator.manager.failures import DiskFull, StoreUnavailable, is_no_space

log = logging.getLogger("emulator.store")


class ObjectNotFound(Exception):
    """No object for this TargetModel in the model store."""


class ModelSource(Protocol):
    location: str  # shown in messages: "s3://bucket/prefix/" or a folder

    def fetch(self, target: str | None, destination: Path) -> int:
        """Copy the object for ``target`` (None: the model data itself) to ``destination``."""
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


def _atomic_copy(write: callable, destination: Path) -> int:  # type: ignore[valid-type]
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".download-", dir=destination.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, destination)
        return destination.stat().st_size
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if is_no_space(exc):
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
        try:
            path = self.root.joinpath(*parts).resolve()
        except OSError as exc:  # e.g. a component too long for the file system: no such object
            raise ObjectNotFound(target) from exc
        if self.root not in path.parents:  # TargetModel "../x" must not escape the store
            raise ObjectNotFound(target)
        return path

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


class _Progress:
    """Logs a long download every 10% (boto3 calls it from several threads)."""

    def __init__(self, name: str, total: int) -> None:
        self.name, self.total, self.done, self.next_mark = name, total, 0, 10
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, chunk: int) -> None:
        with self._lock:
            self.done += chunk
            percent = 100 * self.done // max(self.total, 1)
            if percent >= self.next_mark and self.total > 64 * 1024**2:
                log.info("downloading %s: %d%% of %.1f MiB", self.name, percent,
                         self.total / 1024**2)
                self.next_mark = percent // 10 * 10 + 10


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

    def fetch(self, target: str | None, destination: Path) -> int:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError
        from s3transfer.exceptions import RetriesExceededError, S3DownloadFailedError

        key = self.prefix if target is None else object_key(self.prefix, target)
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=key)
            progress = _Progress(key, int(head.get("ContentLength", 0)))
            return _atomic_copy(
                lambda tmp: self._client.download_file(self.bucket, key, tmp, Callback=progress),
                destination,
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code"))
            if code in ("404", "NoSuchKey", "NotFound", "403", "AccessDenied", "NoSuchBucket"):
                raise ObjectNotFound(target or key) from exc  # SageMaker: "Failed to download"
            raise StoreUnavailable(f"{code}: {exc}") from exc
        except (BotoCoreError, Boto3Error, RetriesExceededError, S3DownloadFailedError,
                ConnectionError) as exc:
            # Connection refused or reset, a read that timed out, retries exhausted.
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc


def source_for(model_data: str, s3_endpoint_url: str | None = None,
               region: str | None = None) -> ModelSource:
    if model_data.startswith("s3://"):
        return S3Source(model_data, s3_endpoint_url, region)
    if model_data.startswith("file://"):
        model_data = urlparse(model_data).path
    return FolderSource(Path(model_data))
