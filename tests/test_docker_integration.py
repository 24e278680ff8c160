"""The runtime-contract and lifecycle suites again, through the emulator with ``launcher="docker"``.

The tests themselves are those of test_runtime_contract and test_lifecycle, collected here a
second time with this module's fixtures: ``served`` and ``start_emulator`` start the emulator
with the docker launcher and the CPU Triton test image. The two lifecycle tests that look at
the embedded Triton's process id have docker counterparts below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import emulator.triton.docker_launcher as docker_launcher
from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests import test_lifecycle as lifecycle
from tests import test_runtime_contract as contract
from tests.conftest import runtime_client
from tests.docker_support import docker_client, triton_cpu_image  # noqa: F401
from tests.support import package, write_scale_ensemble, write_scale_model

pytestmark = pytest.mark.docker

# The embedded launcher's process-id checks; replaced by the container checks at the end.
EMBEDDED_ONLY = {"test_triton_killed_mid_run_restarts_and_models_reload",
                 "test_stop_leaves_no_triton_behind"}

for _module in (contract, lifecycle):
    for _name in dir(_module):
        if _name.startswith("test_") and _name not in EMBEDDED_ONLY:
            globals()[_name] = getattr(_module, _name)


def docker_settings(image: str, **overrides: Any) -> Settings:
    overrides.setdefault("port", 0)
    return Settings.from_env(env={}, launcher="docker", image=image, **overrides)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,
           triton_cpu_image: str) -> Iterator[tuple[EmulatorServer, Any]]:  # noqa: F811
    """test_runtime_contract's store and emulator, on the docker launcher."""
    root = tmp_path_factory.mktemp("contract-docker")
    store = root / "store"
    package(write_scale_model(root / "m", "scale", 2.0), store / "scale.tar.gz", "folder")
    write_scale_ensemble(root / "e")
    package(root / "e", store / "nested" / "dir" / "ensemble.tar.gz", "dot")
    package(write_scale_model(root / "bad", "broken", fail_load="weights are corrupt"),
            store / "broken.tar.gz", "folder")
    (store / "garbage.tar.gz").write_bytes(b"not a tarball")
    settings = docker_settings(triton_cpu_image, model_data=str(store), cache_dir=root / "cache")
    with EmulatorServer(settings) as server:
        launcher = server.registry.get("local").instances[0].launcher
        assert isinstance(launcher, docker_launcher.DockerLauncher)
        yield server, runtime_client(server.url)


@pytest.fixture
def start_emulator(tmp_path: Path,
                   triton_cpu_image: str) -> Iterator[Callable[..., EmulatorServer]]:  # noqa: F811
    """conftest's start_emulator on the docker launcher.

    The lifecycle tests put gate files in tmp_path, outside the cache dir: tmp_path is mounted
    too (``docker_mounts``, at the same path), so the models in the container see the gates.
    """
    servers: list[EmulatorServer] = []

    def start(**overrides: Any) -> EmulatorServer:
        overrides.setdefault("cache_dir", tmp_path / f"cache{len(servers)}")
        overrides.setdefault("docker_mounts", [tmp_path])
        server = EmulatorServer(docker_settings(triton_cpu_image, **overrides)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_docker_triton_killed_mid_run_restarts_and_models_reload(
        start_emulator: Callable[..., EmulatorServer], store: Path, tmp_path: Path,
        docker_client: Any) -> None:  # noqa: F811
    lifecycle.make_store(store, tmp_path, 1)
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    lifecycle.invoke(rt, "m0.tar.gz")
    launcher = server.registry.get("local").instances[0].launcher
    first = launcher.container_name
    docker_client.containers.get(first).kill()
    lifecycle.wait_until(
        lambda: launcher.restarts == 1 and launcher.is_running()
        and not lifecycle.models_of(server)["m0.tar.gz"]["Loaded"],
        timeout=180, what="the Triton container to be replaced")
    assert launcher.container_name != first
    np.testing.assert_allclose(lifecycle.invoke(rt, "m0.tar.gz"), [1, 2, 3, 4])
    assert lifecycle.metrics_of(server)["ModelLoadingTime"]["SampleCount"] == 2


def test_docker_stop_leaves_no_container(start_emulator: Callable[..., EmulatorServer],
                                         store: Path, tmp_path: Path,
                                         docker_client: Any) -> None:  # noqa: F811
    lifecycle.make_store(store, tmp_path, 1)
    server = start_emulator(model_data=str(store))
    lifecycle.invoke(runtime_client(server.url), "m0.tar.gz")
    name = server.registry.get("local").instances[0].launcher.container_name
    assert docker_client.containers.list(all=True, filters={"name": f"^/{name}$"})
    server.stop()
    assert docker_client.containers.list(all=True, filters={"name": f"^/{name}$"}) == []
