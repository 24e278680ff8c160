"""The uvicorn internals that emulator/http_protocol.py and shutdown_protocol.py build on."""

from __future__ import annotations

import pytest

from emulator import http_protocol
from emulator.server import uvicorn_config
from emulator.settings import Settings
from emulator.shutdown_protocol import ShutdownHttpProtocol


def test_the_installed_uvicorn_is_the_one_the_protocol_was_written_against() -> None:
    moved = http_protocol.uvicorn_internals_moved()
    assert not moved, "\n".join(moved)


def test_a_uvicorn_whose_internals_moved_is_named_and_not_used(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    sources = dict(http_protocol._UVICORN_SOURCES)
    sources["HttpToolsProtocol.on_body"] = "0" * 16  # as if uvicorn had rewritten on_body
    monkeypatch.setattr(http_protocol, "_UVICORN_SOURCES", sources)
    [moved] = http_protocol.uvicorn_internals_moved()
    assert "changed HttpToolsProtocol.on_body" in moved and "pyproject.toml" in moved
    assert uvicorn_config(object(), Settings()).http == "httptools"  # type: ignore[arg-type]
    assert "serving with uvicorn's own HTTP protocol" in caplog.text
    monkeypatch.undo()
    assert uvicorn_config(object(), Settings()).http is ShutdownHttpProtocol  # type: ignore[arg-type]
