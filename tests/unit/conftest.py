"""Unit tests start no Triton: a test that tries belongs in tests/integration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from emulator.triton.docker_launcher import DockerLauncher
from emulator.triton.embedded import EmbeddedLauncher
from emulator.triton.external import ExternalLauncher


@pytest.fixture(autouse=True)
def no_triton(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    async def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a unit test started Triton ({type(self).__name__}); "
                             "tests that need a Triton belong in tests/integration")

    for launcher in (EmbeddedLauncher, DockerLauncher, ExternalLauncher):
        monkeypatch.setattr(launcher, "start", refuse)
    yield
