"""Two ``mme serve`` on one machine with the default settings: the second is refused before it
touches anything, and the first goes on serving.

Before the cache folder's lock, the second took the first's Triton and stubs for a dead run's
leftovers and killed them, then deleted the instance folder on its way out: the first still
answered /ping, and every load then failed with "unable to find backend library".
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.live_endpoint import EmulatorProcess
from tests.client_support import runtime_client
from tests.support import output_of, package, scale_request, write_scale_model

REFUSAL_TIMEOUT_S = 60  # a refusal takes an import's time; a Triton start would take far more


def _environment(home: Path) -> dict[str, str]:
    """Only the defaults: the cache folder is ``~/.cache/sagemaker-mme-emulator`` under ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MME_")}
    env["HOME"] = str(home)
    return env


def _tree(root: Path) -> set[str]:
    """What is in a cache folder (not the stub records, which the first server may tidy)."""
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.name != ".server.lock" and ".stubs" not in p.parts[-2:-1]}


def _descendants(pid: int) -> set[int]:
    children: dict[int, set[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, set()).add(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatorProcess, Path]]:
    root = tmp_path_factory.mktemp("two-servers")
    store = root / "models"
    store.mkdir()
    for name, scale in (("a", 2.0), ("b", 3.0), ("c", 4.0)):
        package(write_scale_model(root / "repos" / name, name, scale), store / f"{name}.tar.gz",
                "folder")
    home = root / "home"
    home.mkdir()
    server = EmulatorProcess({}, root / "first.log")
    server.settings = {**_environment(home), "MME_MODEL_DATA": str(store)}
    server.start()
    try:
        yield server, root
    finally:
        server.stop()


def _serve_again(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mme", "serve", "--model-data", str(root / "models"), *flags],
        env=_environment(root / "home"), capture_output=True, text=True,
        timeout=REFUSAL_TIMEOUT_S, check=False)


def _invoke(url: str, target: str) -> list[float]:
    resp = runtime_client(url).invoke_endpoint(EndpointName="local", TargetModel=target,
                                               Body=scale_request([1, 2, 3, 4]))
    return list(output_of(resp["Body"].read()))


@pytest.mark.parametrize(("port", "new_model", "scale"),
                         [("another", "b", 3.0), ("the same", "c", 4.0)])
def test_a_second_server_on_the_default_cache_folder_is_refused_and_the_first_serves_on(
        first: tuple[EmulatorProcess, Path], port: str, new_model: str, scale: float) -> None:
    server, root = first
    assert _invoke(server.url, "a.tar.gz") == [2, 4, 6, 8]
    cache = root / "home" / ".cache" / "sagemaker-mme-emulator"
    before, processes = _tree(cache), _descendants(server.pid or 0)
    assert processes, "the first server runs its Triton"

    second = _serve_again(root, "--port", "0" if port == "another" else str(server.port))

    assert second.returncode == 2, second.stderr
    assert "Traceback" not in second.stderr
    if port == "another":
        (line,) = [x for x in second.stderr.splitlines() if x.startswith("mme serve:")]
        assert f"{cache} is in use by another running server (pid {server.pid}, {server.url})" \
            in line and "--cache-dir" in line
    else:
        assert f"port {server.port} on 127.0.0.1 is in use" in second.stderr
    assert _tree(cache) == before, "the second server touched the first's folder"
    assert processes <= _descendants(server.pid or 0), "the first's Triton or stubs were killed"
    # A model already loaded, and one loaded only now: the backend folder is still there
    assert _invoke(server.url, "a.tar.gz") == [2, 4, 6, 8]
    np.testing.assert_allclose(_invoke(server.url, f"{new_model}.tar.gz"),
                               [scale * x for x in (1, 2, 3, 4)])


def test_a_second_server_with_a_folder_of_its_own_serves_beside_the_first(
        first: tuple[EmulatorProcess, Path]) -> None:
    server, root = first
    second = EmulatorProcess({**_environment(root / "home"),
                              "MME_MODEL_DATA": str(root / "models"),
                              "MME_CACHE_DIR": str(root / "own-cache")}, root / "second.log")
    second.start()
    try:
        assert _invoke(second.url, "c.tar.gz") == [4, 8, 12, 16]
        assert _invoke(server.url, "a.tar.gz") == [2, 4, 6, 8]
    finally:
        assert second.stop() == 0
    assert _invoke(server.url, "a.tar.gz") == [2, 4, 6, 8]
