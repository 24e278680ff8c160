"""DockerLauncher on a real Docker engine with the CPU Triton test image (mme-triton-cpu:test).

The image is built from local material by docker/build-test-image.sh; see docker_support for
how these tests skip locally and fail in CI when the engine or image is missing.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import subprocess
import textwrap
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from emulator.containers.docker_engine import (
    HOST_LABEL,
    OWNER_LABEL,
    OWNER_START_LABEL,
    connect,
    remove_leftover_containers,
)
from emulator.containers.images import PullProgress, split_image
from emulator.processes import free_port
from emulator.supervision import LauncherError
from emulator.triton.docker_launcher import TRITON_GRPC_PORT, DockerLauncher, _mount_roots
from emulator.triton.launcher import TritonOptions, control_args
from tests.launcher_support import restarted_event

T = TypeVar("T")

ADD_ONE_CONFIG = """
name: "{name}"
backend: "{backend}"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def add_model_py(increment: float) -> str:
    return textwrap.dedent(f"""
        import os
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                responses = []
                for request in requests:
                    x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                    y = (x + {increment}).astype(np.float32)
                    responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
                return responses
        """)


def install_model(cache: Path, repository: Path, model: str, key: str, *,
                  backend: str = "python", model_py: str | None = None) -> str:
    """Lay a model out as the model manager does: artifact in the cache, symlinks from the repo."""
    artifact = cache / "artifacts" / key / "model" / model
    version = artifact / "1"
    version.mkdir(parents=True)
    if model_py is not None:
        (version / "model.py").write_text(model_py)
    name = f"{model}--{key}"
    target = repository / name
    target.mkdir(parents=True)
    (target / "config.pbtxt").write_text(ADD_ONE_CONFIG.format(name=name, backend=backend))
    # An absolute symlink into the cache: it resolves in the container only if the cache is
    # mounted at the same path.
    os.symlink(version.resolve(), target / "1")
    return name


async def load(session: aiohttp.ClientSession, url: str, model: str) -> tuple[int, str]:
    async with session.post(f"{url}/v2/repository/models/{model}/load") as resp:
        return resp.status, await resp.text()


async def infer(session: aiohttp.ClientSession, url: str, model: str,
                values: list[float]) -> list[float]:
    body = {"inputs": [{"name": "INPUT0", "shape": [len(values)], "datatype": "FP32",
                        "data": values}]}
    async with session.post(f"{url}/v2/models/{model}/infer", json=body) as resp:
        payload = await resp.json()
        assert resp.status == 200, payload
        return [float(v) for v in payload["outputs"][0]["data"]]


def run(factory: Callable[[], Awaitable[T]], timeout: float = 300) -> T:
    async def main() -> T:
        return await asyncio.wait_for(factory(), timeout)

    return asyncio.run(main())


def options_for(tmp_path: Path, **kwargs: Any) -> TritonOptions:
    return TritonOptions(repository=tmp_path / "cache" / "repository", startup_timeout_s=120,
                         **kwargs)


def containers_named(client: Any, name: str | None) -> list[Any]:
    return client.containers.list(all=True, filters={"name": f"^/{name}$"}) if name else []


# -- engine-free unit tests -----------------------------------------------------------------

def test_missing_engine_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(LauncherError, match="apt-get install docker.io") as info:
        connect()
    assert "dockerd" in str(info.value)
    # The docker SDK leaves the socket of its failed connection to the garbage collector (it is
    # held by the error's traceback): collected here, it is not reported against a later test.
    del info
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("nvcr.io/nvidia/tritonserver:24.08-py3", ("nvcr.io/nvidia/tritonserver", "24.08-py3")),
        ("localhost:5000/triton", ("localhost:5000/triton", "latest")),
        ("localhost:5000/triton:x", ("localhost:5000/triton", "x")),
        ("ubuntu", ("ubuntu", "latest")),
    ],
)
def test_image_names_split_into_repository_and_tag(image: str, expected: tuple[str, str]) -> None:
    assert split_image(image) == expected


def test_mount_roots_drop_nested_folders(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "repository").mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    assert _mount_roots([cache / "repository", cache, other, cache]) == [
        cache.resolve(), other.resolve()
    ]


def test_gpus_are_requested_only_when_asked_or_present(tmp_path: Path) -> None:
    options = options_for(tmp_path)
    assert DockerLauncher(options, image="img", gpus="none")._device_requests() == []
    requests = DockerLauncher(options, image="img", gpus="all")._device_requests()
    assert len(requests) == 1
    assert requests[0]["Capabilities"] == [["gpu"]]
    assert requests[0]["Count"] == -1
    with pytest.raises(ValueError):
        DockerLauncher(options, image="img", gpus="some")


def test_no_image_says_which_to_use(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="needs --image.*mme-triton-cpu:test"):
        DockerLauncher(options_for(tmp_path), tmp_path, image=None)


def test_pull_progress_logs_every_tenth_without_a_terminal(
        caplog: pytest.LogCaptureFixture) -> None:
    class NotATerminal:
        def write(self, text: str) -> None:
            raise AssertionError("no bar without a terminal")

        def isatty(self) -> bool:
            return False

    progress = PullProgress("img:1", stream=NotATerminal())
    with caplog.at_level(logging.INFO, logger="emulator.containers"):
        for current in range(0, 101, 5):
            progress.update({"status": "Downloading", "id": "a",
                             "progressDetail": {"current": current, "total": 100}})
        progress.update({"status": "Pull complete", "id": "a"})
    messages = [r.getMessage() for r in caplog.records if "pulling img:1" in r.getMessage()]
    assert len(messages) == 11  # 0%, 10%, ..., 100%
    assert messages[-1].startswith("pulling img:1: 100%")


# -- on the engine --------------------------------------------------------------------------

@pytest.mark.docker
def test_start_load_infer_through_a_symlinked_version_folder(
        tmp_path: Path, docker_client: Any, triton_cpu_image: str,
        caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    options = options_for(tmp_path, environment={"MME_TEST_MARKER": "42"})
    model = install_model(cache, options.repository, "add_one", "k1", model_py=add_model_py(1))
    launcher = DockerLauncher(options, image=triton_cpu_image, cache_dir=cache, shm_size="256m")

    async def scenario() -> tuple[int, list[float], dict[str, Any]]:
        await launcher.start()
        try:
            assert launcher.is_running()
            attrs = docker_client.containers.get(launcher.container_id).attrs
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{launcher.http_url}/v2/health/ready") as resp:
                    ready = resp.status
                status, text = await load(session, launcher.http_url, model)
                assert status == 200, text
                return ready, await infer(session, launcher.http_url, model, [1.0, 2.5]), attrs
        finally:
            await launcher.stop()

    with caplog.at_level(logging.DEBUG, logger="emulator.triton"):
        ready, output, attrs = run(scenario)
    assert ready == 200
    assert output == [2.0, 3.5]
    # The cache is mounted at the same absolute path, read-write.
    mounts = {m["Source"]: m for m in attrs["Mounts"]}
    assert mounts[str(cache.resolve())]["Destination"] == str(cache.resolve())
    assert f"--model-repository={options.repository.resolve()}" in attrs["Args"]
    assert attrs["HostConfig"]["ShmSize"] == 256 * 1024 * 1024
    assert "MME_TEST_MARKER=42" in attrs["Config"]["Env"]
    labels = attrs["Config"]["Labels"]
    assert labels[OWNER_LABEL] == str(os.getpid())
    assert labels[HOST_LABEL] == socket.gethostname()
    # Triton's own lines arrive in the emulator's log, prefixed with the container's name.
    prefix = f"[triton {attrs['Name'].lstrip('/')}]"
    streamed = [r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix)]
    assert any("successfully loaded" in line for line in streamed), streamed[-20:]


@pytest.mark.docker
def test_without_the_cache_mounted_the_symlinked_model_cannot_load(
        tmp_path: Path, triton_cpu_image: str) -> None:
    """The counter-test: only the repository mounted, so the symlinks dangle in the container."""
    cache = tmp_path / "cache"
    options = options_for(tmp_path)
    model = install_model(cache, options.repository, "add_one", "k1", model_py=add_model_py(1))
    launcher = DockerLauncher(options, image=triton_cpu_image)

    async def scenario() -> tuple[int, str]:
        await launcher.start()
        try:
            async with aiohttp.ClientSession() as session:
                return await load(session, launcher.http_url, model)
        finally:
            await launcher.stop()

    status, _ = run(scenario)
    assert status != 200


@pytest.mark.docker
def test_stop_leaves_no_container(tmp_path: Path, docker_client: Any,
                                  triton_cpu_image: str) -> None:
    launcher = DockerLauncher(options_for(tmp_path), image=triton_cpu_image)

    async def scenario() -> str:
        await launcher.start()
        name = launcher.container_name
        assert name and containers_named(docker_client, name)
        await launcher.stop()
        return name

    name = run(scenario)
    assert containers_named(docker_client, name) == []
    assert not launcher.is_running()


@pytest.mark.docker
def test_a_killed_container_is_replaced_and_on_restart_called(
        tmp_path: Path, docker_client: Any, triton_cpu_image: str) -> None:
    cache = tmp_path / "cache"
    options = options_for(tmp_path)
    model = install_model(cache, options.repository, "add_one", "k1", model_py=add_model_py(1))
    launcher = DockerLauncher(options, image=triton_cpu_image, cache_dir=cache)

    async def scenario() -> tuple[str, str, list[float]]:
        restarted = restarted_event(launcher)
        await launcher.start()
        try:
            first = launcher.container_name
            assert first is not None
            docker_client.containers.get(first).kill()
            await asyncio.wait_for(restarted.wait(), 180)
            second = launcher.container_name
            assert second is not None
            assert launcher.is_running()
            async with aiohttp.ClientSession() as session:
                # A new Triton knows no model: the manager reloads on demand, as here.
                status, text = await load(session, launcher.http_url, model)
                assert status == 200, text
                return first, second, await infer(session, launcher.http_url, model, [1.0])
        finally:
            await launcher.stop()

    first, second, output = run(scenario)
    assert first != second
    assert launcher.restarts == 1
    assert output == [2.0]
    assert containers_named(docker_client, first) == []
    assert containers_named(docker_client, second) == []


@pytest.mark.docker
def test_leftovers_of_dead_owners_are_removed_at_start(
        tmp_path: Path, docker_client: Any, triton_cpu_image: str) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    hostname = socket.gethostname()
    own_start = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    cases = {
        "dead_owner": {OWNER_LABEL: str(dead.pid), HOST_LABEL: hostname},
        "recycled_pid": {OWNER_LABEL: str(os.getpid()), OWNER_START_LABEL: "1",
                         HOST_LABEL: hostname},
        "live_owner": {OWNER_LABEL: str(os.getpid()), OWNER_START_LABEL: own_start,
                       HOST_LABEL: hostname},
        "other_host": {OWNER_LABEL: str(dead.pid), HOST_LABEL: f"not-{hostname}"},
    }
    created = {
        case: docker_client.containers.create(triton_cpu_image, ["sleep", "600"], labels=labels,
                                              name=f"mme-leftover-{case}-{os.getpid()}")
        for case, labels in cases.items()
    }
    try:
        launcher = DockerLauncher(options_for(tmp_path), image=triton_cpu_image)

        async def scenario() -> None:
            await launcher.start()
            await launcher.stop()

        run(scenario)
        remaining = {case for case, c in created.items() if containers_named(docker_client, c.name)}
        assert remaining == {"live_owner", "other_host"}
        # Called again, nothing else goes.
        assert remove_leftover_containers(docker_client) == []
    finally:
        for container in created.values():
            for leftover in containers_named(docker_client, container.name):
                leftover.remove(force=True)


@pytest.mark.docker
def test_a_container_removed_while_listing_leftovers_is_not_an_error(
        docker_client: Any, triton_cpu_image: str) -> None:
    """Two emulators starting on one host: the other one removes a container between our listing
    and our inspection of it (a race CI met)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    doomed = docker_client.containers.create(
        triton_cpu_image, ["sleep", "600"], name=f"mme-vanishing-{os.getpid()}",
        labels={OWNER_LABEL: str(dead.pid), HOST_LABEL: socket.gethostname()})
    real_listing = docker_client.api.containers

    def listing_then_the_other_emulator_removes(*args: Any, **kwargs: Any) -> Any:
        listed = real_listing(*args, **kwargs)
        doomed.remove(force=True)
        return listed

    docker_client.api.containers = listing_then_the_other_emulator_removes
    try:
        assert doomed.name not in remove_leftover_containers(docker_client)
    finally:
        del docker_client.api.containers
        for leftover in containers_named(docker_client, doomed.name):
            leftover.remove(force=True)


@pytest.mark.docker
def test_missing_image_without_pull_says_what_to_build(
        tmp_path: Path, docker_client: Any) -> None:
    launcher = DockerLauncher(options_for(tmp_path), image="mme-no-such-image:never", pull=False)
    with pytest.raises(LauncherError, match="build-test-image.sh") as info:
        run(launcher.start)
    assert "docker pull mme-no-such-image:never" in str(info.value)


@pytest.mark.docker
def test_missing_image_from_an_unreachable_registry_fails_clearly(
        tmp_path: Path, docker_client: Any) -> None:
    image = f"127.0.0.1:{free_port()}/mme-no-such-image:never"
    launcher = DockerLauncher(options_for(tmp_path), image=image)
    with pytest.raises(LauncherError, match="pulling it failed|pulling .* failed") as info:
        run(launcher.start)
    assert "build-test-image.sh" in str(info.value)


@pytest.mark.docker
def test_a_triton_that_cannot_start_reports_its_output(
        tmp_path: Path, docker_client: Any, triton_cpu_image: str) -> None:
    options = options_for(tmp_path, extra_args=["--no-such-flag=1"])
    launcher = DockerLauncher(options, image=triton_cpu_image)
    with pytest.raises(LauncherError, match="exited with code") as info:
        run(launcher.start)
    assert "no-such-flag" in str(info.value)
    leftover = docker_client.containers.list(
        all=True, filters={"label": f"{OWNER_LABEL}={os.getpid()}"})
    assert [c.name for c in leftover if c.name.startswith("mme-triton-")] == []


@pytest.mark.docker
def test_shims_are_mounted_into_images_that_ask_for_them(
        tmp_path: Path, triton_cpu_image: str) -> None:
    """A Python-based backend from the shims folder serves a model whose config names it."""
    shims = tmp_path / "shims"
    (shims / "_shared").mkdir(parents=True)
    (shims / "_shared" / "model_source.py").write_text(add_model_py(10))
    (shims / "plusten").mkdir()
    # Shims share code through relative symlinks, as emulator/triton/backends does.
    os.symlink("../_shared/model_source.py", shims / "plusten" / "model.py")
    cache = tmp_path / "cache"
    options = options_for(tmp_path)
    model = install_model(cache, options.repository, "uses_shim", "k2", backend="plusten")
    launcher = DockerLauncher(options, tmp_path / "work", image=triton_cpu_image,
                              cache_dir=cache, shims_dir=shims)

    async def scenario() -> list[float]:
        await launcher.start()
        try:
            targets = {v["bind"] for v in launcher.volumes().values()}
            assert "/opt/tritonserver/backends/plusten" in targets
            assert "/opt/tritonserver/backends/_shared" not in targets  # no model.py
            async with aiohttp.ClientSession() as session:
                status, text = await load(session, launcher.http_url, model)
                assert status == 200, text
                return await infer(session, launcher.http_url, model, [1.0])
        finally:
            await launcher.stop()

    assert run(scenario) == [11.0]


@pytest.mark.docker
def test_sagemaker_environment_reaches_the_container_command(
        tmp_path: Path, docker_client: Any, triton_cpu_image: str) -> None:
    from emulator.triton.sagemaker_env import triton_args_from_environment

    env = {"SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE": "33554432",
           "SAGEMAKER_TRITON_LOG_VERBOSE": "0", "MY_MODEL_SETTING": "x"}
    translated = triton_args_from_environment(env)
    options = options_for(tmp_path, extra_args=translated.args,
                          environment=translated.passthrough_env)
    launcher = DockerLauncher(options, image=triton_cpu_image)

    async def scenario() -> dict[str, Any]:
        await launcher.start()
        try:
            return docker_client.containers.get(launcher.container_id).attrs
        finally:
            await launcher.stop()

    attrs = run(scenario)
    # The model's flags come after the launcher's own, so they win where both set one; only the
    # emulator's gRPC control channel (load, unload: docs/isolation.md) comes after them.
    control = control_args("0.0.0.0", TRITON_GRPC_PORT)
    assert attrs["Args"][-len(control):] == control
    assert attrs["Args"][-len(control) - len(translated.args):-len(control)] == translated.args
    assert "--backend-config=python,shm-default-byte-size=33554432" in attrs["Args"]
    assert "MY_MODEL_SETTING=x" in attrs["Config"]["Env"]
