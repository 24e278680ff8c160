"""The emulator's whole state from Python: reset it, save it, restore it.

``ServerState(url)`` speaks ``/_emulator/reset`` and ``/_emulator/snapshot`` (docs/testing.md)::

    state = ServerState("http://127.0.0.1:8080")
    state.reset()                              # every endpoint, alarm, policy, rule: gone
    doc = state.snapshot(with_models=True)     # the state as a snapshot document
    state.save("snapshots/fleet", with_models=True)   # the same, as a folder
    state.reset(); state.load("snapshots/fleet")      # back, its models loaded again

In a pytest suite, the plugin's ``mme_clean_server`` fixture resets the session's emulator
before each test that asks for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from emulator.state import snapshot_format
from harness.emulator_routes import RouteRefused, call

RESET = "/_emulator/reset"
SNAPSHOT = "/_emulator/snapshot"


class StateRequestRefused(RouteRefused):
    """The emulator refused a reset or a restore; the message is its word on what to fix."""


class ServerState:
    def __init__(self, url: str, timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s  # a restore starts endpoints and loads models: minutes

    def reset(self, keep_cache: bool = False) -> dict[str, Any]:
        """Empty the server; what was removed, by kind (answered once it is empty)."""
        return self._call("POST", RESET, {"keep_cache": True} if keep_cache else None)

    def snapshot(self, with_models: bool = False) -> dict[str, Any]:
        """The state as a snapshot document."""
        return self._call("GET", SNAPSHOT + ("?with_models=true" if with_models else ""))

    def restore(self, doc: dict[str, Any]) -> dict[str, Any]:
        """A snapshot document restored into the (empty) server; what came back."""
        return self._call("POST", SNAPSHOT, doc)

    def save(self, folder: Path | str, with_models: bool = False) -> list[str]:
        """The state saved as a snapshot folder (written whole, then renamed into place)."""
        return snapshot_format.write_folder(self.snapshot(with_models), Path(folder))

    def load(self, folder: Path | str) -> dict[str, Any]:
        """A snapshot folder restored into the (empty) server."""
        return self.restore(snapshot_format.read_folder(Path(folder)))

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        return call(self.url, method, path, body, self.timeout_s, StateRequestRefused)
