"""Control-plane state (models, endpoint configs, endpoints, inference components) in one
SQLite file.

Why SQLite: every change is one transaction, so a crash mid-write leaves the previous state, not
a torn file; WAL mode lets readers proceed while a writer commits. Names are unique without
regard to case, because the service keys resources by their (lowercased) ARN.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS endpoint_configs (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS inference_components (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS endpoints (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created REAL NOT NULL,
    doc TEXT NOT NULL
);
"""


MODELS = "models"
CONFIGS = "endpoint_configs"
INFERENCE_COMPONENTS = "inference_components"
ENDPOINTS = "endpoints"
# Every table, in the order a whole state is loaded (an endpoint names its config, a component
# its endpoint).
TABLES = (MODELS, CONFIGS, ENDPOINTS, INFERENCE_COMPONENTS)


class AlreadyExists(Exception):
    pass


@dataclass
class Resource:
    """A model or an endpoint config: the request that created it, as sent."""

    name: str
    created: float
    doc: dict[str, Any]


@dataclass
class Deployment:
    """What an endpoint runs: a config snapshot, so deleting the config later changes nothing."""

    config_name: str
    variants: list[dict[str, Any]]
    # Keyword arguments of the runtime's EndpointSpec (JSON-safe).
    spec: dict[str, Any]
    images: list[str | None] = field(default_factory=list)
    started: float = 0.0
    # The config's MetricsConfig as sent (an endpoint for inference components runs it; an
    # endpoint for models has it in its spec).
    metrics_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class EndpointRecord:
    name: str
    created: float
    modified: float
    status: str
    current: Deployment
    failure_reason: str | None = None
    # Set while an UpdateEndpoint is in progress.
    pending: Deployment | None = None
    # Set while an UpdateEndpointWeightsAndCapacities is in progress: the spec it moves to.
    desired: dict[str, Any] | None = None
    tags: list[dict[str, str]] = field(default_factory=list)
    # Set while a guarded UpdateEndpoint (a DeploymentConfig) runs: its progress
    # (``emulator.control.deployments.Progress``), so a restart resumes it.
    deployment: dict[str, Any] | None = None
    # The DeploymentConfig of the most recent UpdateEndpoint that had one (LastDeploymentConfig).
    last_deployment_config: dict[str, Any] | None = None

    def to_doc(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> EndpointRecord:
        doc = dict(doc)
        doc["current"] = Deployment(**doc["current"])
        if doc.get("pending"):
            doc["pending"] = Deployment(**doc["pending"])
        return cls(**doc)


class ControlStore:
    """Thread-safe; each public method is one transaction."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit is on disk before it returns, so an acknowledged Create survives a crash.
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        with self._tx() as cur:
            for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                cur.execute(statement)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")
            finally:
                cur.close()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- models and endpoint configs ---------------------------------------------------------

    def add(self, table: str, resource: Resource) -> None:
        _check_table(table)
        try:
            with self._tx() as cur:
                cur.execute(
                    f"INSERT INTO {table} (key, name, created, doc) VALUES (?, ?, ?, ?)",
                    (
                        resource.name.lower(),
                        resource.name,
                        resource.created,
                        json.dumps(resource.doc),
                    ),
                )
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(resource.name) from exc

    def get(self, table: str, name: str) -> Resource | None:
        _check_table(table)
        with self._lock:
            row = self._conn.execute(
                f"SELECT name, created, doc FROM {table} WHERE key = ?", (name.lower(),)
            ).fetchone()
        return Resource(row[0], row[1], json.loads(row[2])) if row else None

    def all(self, table: str) -> list[Resource]:
        _check_table(table)
        with self._lock:
            rows = self._conn.execute(f"SELECT name, created, doc FROM {table}").fetchall()
        return [Resource(r[0], r[1], json.loads(r[2])) for r in rows]

    def save(self, table: str, resource: Resource) -> bool:
        """Overwrite a stored document (an inference component's state); False if it was
        deleted meanwhile."""
        _check_table(table)
        with self._tx() as cur:
            cur.execute(f"UPDATE {table} SET doc = ? WHERE key = ?",
                        (json.dumps(resource.doc), resource.name.lower()))
            return cur.rowcount > 0

    def remove(self, table: str, name: str) -> bool:
        _check_table(table)
        with self._tx() as cur:
            cur.execute(f"DELETE FROM {table} WHERE key = ?", (name.lower(),))
            return cur.rowcount > 0

    # -- endpoints ---------------------------------------------------------------------------

    def add_endpoint(self, record: EndpointRecord) -> None:
        try:
            with self._tx() as cur:
                cur.execute(
                    "INSERT INTO endpoints (key, name, created, doc) VALUES (?, ?, ?, ?)",
                    (record.name.lower(), record.name, record.created, json.dumps(record.to_doc())),
                )
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(record.name) from exc

    def save_endpoint(self, record: EndpointRecord) -> bool:
        """Overwrite an endpoint's state; False if it was deleted meanwhile."""
        with self._tx() as cur:
            cur.execute(
                "UPDATE endpoints SET doc = ? WHERE key = ?",
                (json.dumps(record.to_doc()), record.name.lower()),
            )
            return cur.rowcount > 0

    def get_endpoint(self, name: str) -> EndpointRecord | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT doc FROM endpoints WHERE key = ?", (name.lower(),)
            ).fetchone()
        return EndpointRecord.from_doc(json.loads(row[0])) if row else None

    def endpoints(self) -> list[EndpointRecord]:
        with self._lock:
            rows = self._conn.execute("SELECT doc FROM endpoints").fetchall()
        return [EndpointRecord.from_doc(json.loads(r[0])) for r in rows]

    def remove_endpoint(self, name: str) -> bool:
        with self._tx() as cur:
            cur.execute("DELETE FROM endpoints WHERE key = ?", (name.lower(),))
            return cur.rowcount > 0

    # -- the whole state at once (reset, snapshots) ------------------------------------------

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        with self._lock:
            return {table: int(self._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
                    for table in TABLES}

    def clear(self) -> dict[str, int]:
        """Every row of every table removed in one transaction; how many there were, by table."""
        with self._tx() as cur:
            removed = {}
            for table in TABLES:
                cur.execute(f"DELETE FROM {table}")
                removed[table] = cur.rowcount
        return removed

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        """Every row, by table, as ``{"name", "created", "doc"}`` (an endpoint's ``doc`` is its
        record's), oldest first."""
        with self._lock:
            return {table: [{"name": r[0], "created": r[1], "doc": json.loads(r[2])}
                            for r in self._conn.execute(
                                f"SELECT name, created, doc FROM {table} ORDER BY created, key")]
                    for table in TABLES}

    def load(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        """``dump``'s rows added in one transaction (AlreadyExists if one is there already:
        nothing is added then)."""
        try:
            with self._tx() as cur:
                for table in TABLES:
                    cur.executemany(
                        f"INSERT INTO {table} (key, name, created, doc) VALUES (?, ?, ?, ?)",
                        [(str(r["name"]).lower(), str(r["name"]), float(r["created"]),
                          json.dumps(r["doc"])) for r in rows.get(table, [])])
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(str(exc)) from exc




def _check_table(table: str) -> None:
    # Table names are interpolated into SQL, so only the known ones are allowed.
    if table not in (MODELS, CONFIGS, INFERENCE_COMPONENTS):  # endpoints: their own methods
        raise ValueError(f"unknown table {table!r}")
