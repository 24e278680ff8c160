"""Accepted asynchronous requests in one SQLite file (``async-inference.sqlite3`` in the state
folder), so that a restart, or a ``kill -9``, loses none: a request is added before its 202 is
sent and removed once its result or failure is in S3. WAL mode: each add or removal is one
short transaction that a crash of the process cannot tear.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    endpoint TEXT NOT NULL,
    received REAL NOT NULL,
    received_wall REAL NOT NULL,
    doc TEXT NOT NULL,
    body BLOB
);
"""


@dataclass(frozen=True)
class StoredRequest:
    """One queued request: its key, endpoint, when it arrived (on the emulated clock's
    timeline, ``Clock.now``, for its TTL and age; and the wall clock, for the notification),
    the request and its inline body."""

    key: str
    endpoint: str
    received: float
    received_wall: float
    doc: dict[str, Any]
    body: bytes | None


class RequestStore:
    def __init__(self, path: Path | str = ":memory:") -> None:
        if isinstance(path, Path):
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            if str(path) != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
                # A process crash keeps every committed transaction in WAL mode with NORMAL.
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)

    def add(self, request: StoredRequest) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO requests (id, endpoint, received, received_wall, doc, body) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (request.key, request.endpoint, request.received, request.received_wall,
                 json.dumps(request.doc), request.body))

    def remove(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM requests WHERE id = ?", (key,))

    def pending(self) -> list[StoredRequest]:
        """Every queued request, in the order they were accepted."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, endpoint, received, received_wall, doc, body FROM requests "
                "ORDER BY seq").fetchall()
        return [StoredRequest(r[0], r[1], r[2], r[3], json.loads(r[4]),
                              None if r[5] is None else bytes(r[5])) for r in rows]

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM requests").fetchone()[0])

    def clear(self) -> int:
        with self._lock:
            return self._db.execute("DELETE FROM requests").rowcount

    def close(self) -> None:
        with self._lock:
            self._db.close()
