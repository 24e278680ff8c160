"""Where alarms and their history are kept: one SQLite file in the cache folder (``alarms.db``).

Every change writes only what changed (the alarms touched, the history items added) in one
transaction, so a PutMetricAlarm costs the same with 10 or 10,000 alarms stored, and a crash
mid-write leaves the previous state. WAL mode, ``synchronous=NORMAL``: a commit survives the
emulator's crash; a power cut may lose the last commits [U] (alarms are test fixtures, not
records). The history keeps the newest ``keep_history`` items.

A folder whose ``alarms.json`` (the JSON form of the same state) sits beside a database that is
still empty is imported once, and the JSON file renamed ``alarms.json.imported``.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS alarms (name TEXT PRIMARY KEY, doc TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS history (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)",
)
JSON_NAME = "alarms.json"


@dataclass
class PendingWrites:
    """What the next write carries (kept under the alarm store's lock): the alarms changed,
    those deleted, the history items added."""

    changed: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    history: list[Any] = field(default_factory=list)

    def touched(self, name: str) -> None:
        self.changed.add(name)
        self.deleted.discard(name)

    def removed(self, name: str) -> None:
        self.changed.discard(name)
        self.deleted.add(name)

    def clear(self) -> None:
        self.changed.clear()
        self.deleted.clear()
        self.history.clear()

    def take(self, alarms: dict[str, Any]) -> tuple[dict[str, str], list[str],
                                                   list[tuple[int, str]]]:
        """The rows to write (alarms as their JSON documents, from ``alarms``), then none."""
        changed = {name: json.dumps(asdict(alarms[name])) for name in self.changed
                   if name in alarms}
        history = [(h.id, json.dumps({k: v for k, v in asdict(h).items() if k != "id"}))
                   for h in self.history]
        deleted = sorted(self.deleted)
        self.clear()
        return changed, deleted, history


class AlarmDb:
    """Thread-safe; each ``write`` is one transaction."""

    def __init__(self, path: Path, keep_history: int) -> None:
        self.path = path
        self.keep_history = keep_history
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        for statement in _SCHEMA:
            self._conn.execute(statement)
        self._import_json(path.with_name(JSON_NAME))

    def _import_json(self, legacy: Path) -> None:
        if legacy == self.path or not legacy.exists():
            return
        if self._conn.execute("SELECT 1 FROM alarms LIMIT 1").fetchone() is not None:
            return
        try:
            saved = json.loads(legacy.read_text())
            alarms = [(a["name"], json.dumps(a)) for a in saved.get("alarms", [])]
            history = [json.dumps(h) for h in saved.get("history", [])][-self.keep_history:]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("alarms not imported: %s is unreadable (%s)", legacy, exc)
            return
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany("INSERT OR REPLACE INTO alarms VALUES (?, ?)", alarms)
            self._conn.executemany("INSERT INTO history (doc) VALUES (?)",
                                   [(h,) for h in history])
            self._conn.execute("COMMIT")
        os.replace(legacy, legacy.with_name(JSON_NAME + ".imported"))
        log.info("imported %d alarms from %s", len(alarms), legacy)

    def load(self) -> tuple[list[dict[str, Any]], list[tuple[int, dict[str, Any]]]]:
        """Every alarm's document, and the newest history items (id, document), oldest
        first; a row that does not parse is skipped with a warning."""
        with self._lock:
            alarm_rows = self._conn.execute("SELECT name, doc FROM alarms").fetchall()
            history_rows = self._conn.execute(
                "SELECT id, doc FROM history ORDER BY id DESC LIMIT ?",
                (self.keep_history,)).fetchall()
        alarms: list[dict[str, Any]] = []
        for name, doc in alarm_rows:
            try:
                alarms.append(json.loads(doc))
            except ValueError as exc:
                log.warning("alarm %s not restored: its stored document is unreadable (%s)",
                            name, exc)
        history: list[tuple[int, dict[str, Any]]] = []
        for item_id, doc in reversed(history_rows):
            try:
                history.append((int(item_id), json.loads(doc)))
            except ValueError:
                log.warning("alarm history item %s not restored: unreadable", item_id)
        return alarms, history

    def next_history_id(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT MAX(id) FROM history").fetchone()
        return int(row[0] or 0) + 1

    def write(self, alarms: dict[str, str], deleted: list[str],
              history: list[tuple[int, str]]) -> None:
        """``alarms``: name -> document of every alarm changed; ``deleted``: names gone;
        ``history``: (id, document) of the items added."""
        if not alarms and not deleted and not history:
            return
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if deleted:
                    self._conn.executemany("DELETE FROM alarms WHERE name = ?",
                                           [(n,) for n in deleted])
                if alarms:
                    self._conn.executemany("INSERT OR REPLACE INTO alarms VALUES (?, ?)",
                                           list(alarms.items()))
                if history:
                    self._conn.executemany("INSERT OR REPLACE INTO history VALUES (?, ?)",
                                           history)
                    self._conn.execute("DELETE FROM history WHERE id <= ?",
                                       (history[-1][0] - self.keep_history,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def clear(self) -> None:
        """Every alarm and history item removed, in one transaction."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("DELETE FROM alarms")
            self._conn.execute("DELETE FROM history")
            self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
