"""Where ``mme ci up`` leaves what ``mme ci down`` (a later CI step, another process) needs.

One folder per running emulator (``--state-dir``, ``$MME_STATE_DIR``, else
``$RUNNER_TEMP/mme-ci`` on a GitHub runner, else ``<tmp>/mme-ci-<uid>``):

- ``server.json``       the server: pid and its start time (so a reused pid is never signalled),
                        URL, region, whether auth is on, the cache folder and whether it is ours
- ``server.log``        everything the server wrote
- ``cache/``            its cache folder, unless the user gave one (a server locks its cache
                        folder: a per-run folder never collides with another server's)
- ``model-stats.json``  per-model figures, written by the server as it stops (``stats.py``)
- ``exit.json``         the server's exit status, written as it stops
- ``results/``          what pytest runs against it reported (goldens, budgets), one file each
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

STATE_ENV = "MME_STATE_DIR"  # MME_ + --state-dir
# Its former name: still read (with a warning) and still exported by ``mme ci up``, for the
# workflows that read it.
FORMER_STATE_ENV = "MME_CI_STATE"


def default_state_dir(env: Mapping[str, str]) -> Path:
    if env.get(STATE_ENV):
        return Path(env[STATE_ENV])
    if env.get(FORMER_STATE_ENV):
        from emulator.settings import DeprecatedVariable

        warnings.warn(f"{FORMER_STATE_ENV} is deprecated: set {STATE_ENV} instead (same value)",
                      DeprecatedVariable, stacklevel=2)
        return Path(env[FORMER_STATE_ENV])
    if env.get("RUNNER_TEMP"):  # a GitHub runner: emptied after each job
        return Path(env["RUNNER_TEMP"]) / "mme-ci"
    return Path(tempfile.gettempdir()) / f"mme-ci-{os.getuid()}"


@dataclass
class ServerRecord:
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells a reused pid from our server
    url: str
    region: str
    auth: str
    endpoint_name: str
    cache_dir: str
    own_cache: bool  # a folder mme ci up made: removed by mme ci down
    started_at: float  # epoch seconds


def process_start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot), or None if there is no such live
    process (a zombie counts as gone: it has exited, its parent just has not reaped it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


class _InState:
    """A file or folder of the state folder, by its name (the list above says what each holds)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, state: StateDir, owner: type[StateDir] | None = None) -> Path:
        return state.path / self.name


class StateDir:
    record_path = _InState("server.json")
    log_path = _InState("server.log")
    stats_path = _InState("model-stats.json")
    exit_path = _InState("exit.json")
    results_dir = _InState("results")
    own_cache_dir = _InState("cache")

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self) -> ServerRecord | None:
        try:
            data = json.loads(self.record_path.read_text())
            return ServerRecord(**data)
        except (OSError, ValueError, TypeError):
            return None

    def save(self, record: ServerRecord) -> None:
        _write_json(self.record_path, asdict(record))

    def forget(self) -> None:
        self.record_path.unlink(missing_ok=True)

    def remove(self) -> None:
        """``mme ci down`` is done with it (the report holds what was worth keeping)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def alive(self, record: ServerRecord) -> bool:
        return process_start_ticks(record.pid) == record.start_ticks

    def start_fresh(self) -> None:
        """Before a new server: what an earlier run left (its figures, results, exit) goes."""
        self.path.mkdir(parents=True, exist_ok=True)
        for stale in (self.stats_path, self.exit_path, self.log_path):
            stale.unlink(missing_ok=True)
        if self.results_dir.is_dir():
            for item in self.results_dir.iterdir():
                item.unlink(missing_ok=True)

    def write_exit(self, code: int) -> None:
        _write_json(self.exit_path, {"code": code})

    def exit_code(self) -> int | None:
        try:
            return int(json.loads(self.exit_path.read_text())["code"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def model_stats(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.stats_path.read_text())["Models"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def results(self) -> list[dict[str, Any]]:
        """What pytest sessions against this server reported (``harness.ci_results``)."""
        found = []
        for path in sorted(self.results_dir.glob("*.json")) if self.results_dir.is_dir() else []:
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return found


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").rstrip()
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(the log is empty)"
