"""One live server per cache folder: an exclusive lock held for the server's whole life.

Why: everything under ``--cache-dir`` belongs to the server using it: the instance folders
(``endpoints/<name>/<variant>/i-<n>/``, with Triton's repository and backend folder), the
control plane's SQLite state, and the processes started from those folders. At start an
instance deletes its folder and kills what a *previous* run left there (a SIGKILLed emulator's
Triton and stubs); a second server on the same folder would take the first's live Triton for
such a leftover and delete the backend folder under it.

How: ``fcntl.flock`` on ``<cache dir>/.server.lock``, taken before anything under the folder is
touched. The kernel drops it when the holder exits, however it exits (SIGKILL included), so a
stale lock cannot outlive its server and a held one always means a live server. The lock file
holds the owner's pid and URL for the refusal message. A second server on the folder is refused
(``mme serve`` exits 2 with one line saying what to do), rather than given a folder of its own:
the folder is also the control plane's state, and a server that silently used another folder
would come up without the endpoints the user created.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

LOCK_NAME = ".server.lock"


class CacheDirInUse(RuntimeError):
    """Another live server holds the cache folder."""


class CacheDirLock:
    """The lock on one cache folder; ``acquire`` raises ``CacheDirInUse`` when it is held."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.path = cache_dir / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, url: str) -> None:
        """Take the folder for this process (serving at ``url``) or raise ``CacheDirInUse``."""
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            # O_CLOEXEC (Python's default, explicit here): a child (Triton) must not inherit the
            # lock, or an orphaned child would keep the folder locked after its server died.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise CacheDirInUse(
                f"cannot use the cache folder {self.cache_dir} ({exc.strerror}); give a folder "
                "you can write with --cache-dir DIR (MME_CACHE_DIR)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _owner(fd)
            os.close(fd)
            raise CacheDirInUse(
                f"the cache folder {self.cache_dir} is in use by another running server"
                f"{owner}; stop that one, or give this one a folder of its own with "
                "--cache-dir DIR (MME_CACHE_DIR)") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "url": url}).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the folder up (the record stays: it is read only while the lock is held)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def _owner(fd: int) -> str:
    """`` (pid 123, http://127.0.0.1:8080)`` from the holder's record, or ``""``."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
        parts = [f"pid {int(record['pid'])}"] if "pid" in record else []
        if record.get("url"):
            parts.append(str(record["url"]))
        return f" ({', '.join(parts)})" if parts else ""
    return ""
