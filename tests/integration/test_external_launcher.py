"""ExternalLauncher against a real tritonserver that the test runs itself, as a user would."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import aiohttp
import pytest

from emulator.processes import free_port
from emulator.supervision import LauncherError
from emulator.triton.embedded import assemble_backends, child_environment, find_tritonserver
from emulator.triton.external import ExternalLauncher
from emulator.triton.launcher import TritonOptions
from harness.testmodels import write_vector_model
from tests.launcher_support import restarted_event
from tests.support import wait_for_async

MODEL = textwrap.dedent("""
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
            return out
    """)


class UserTriton:
    """A tritonserver on a fixed port, started and killed by hand like a user's own server."""

    def __init__(self, repository: Path, work: Path) -> None:
        self.repository = repository
        self.work = work
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.backends = assemble_backends(work / "backends")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [str(find_tritonserver()), f"--model-repository={self.repository}",
               "--model-control-mode=explicit", f"--backend-directory={self.backends}",
               "--http-address=127.0.0.1", f"--http-port={self.port}", "--allow-grpc=false",
               "--allow-metrics=false"]
        log = open(self.work / "triton.log", "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        env=child_environment({}, self.backends),
                                        start_new_session=True)
        log.close()

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def user_triton(tmp_path: Path):
    repository = tmp_path / "repo"
    write_vector_model(repository, "double", MODEL)
    server = UserTriton(repository, tmp_path)
    yield server
    server.kill()


def test_rejects_a_url_without_scheme(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="http"):
        ExternalLauncher(TritonOptions(repository=tmp_path), "127.0.0.1:8000")


def test_no_server_gives_a_clear_error(tmp_path: Path) -> None:
    options = TritonOptions(repository=tmp_path / "repo", startup_timeout_s=1)
    launcher = ExternalLauncher(options, f"http://127.0.0.1:{free_port()}")
    with pytest.raises(LauncherError, match="--model-control-mode=explicit") as info:
        asyncio.run(launcher.start())
    assert str(tmp_path / "repo") in str(info.value)
    assert not launcher.is_running()


def test_waits_for_the_server_then_serves_its_repository(user_triton: UserTriton) -> None:
    # The repository given explicitly wins over the one in the options (a --triton-repository).
    options = TritonOptions(repository=user_triton.work / "unused")
    launcher = ExternalLauncher(options, user_triton.url, repository=user_triton.repository,
                                poll_interval_s=0.2)
    assert launcher.repository == user_triton.repository

    async def scenario() -> list[float]:
        starting = asyncio.create_task(launcher.start())
        await asyncio.sleep(0.3)  # the user's server comes up after the emulator starts waiting
        assert not starting.done()
        user_triton.start()
        await asyncio.wait_for(starting, 120)
        try:
            assert launcher.is_running()
            async with aiohttp.ClientSession() as session:
                url = launcher.http_url
                async with session.post(f"{url}/v2/repository/models/double/load") as resp:
                    assert resp.status == 200, await resp.text()
                body = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32",
                                    "data": [1.5, -2]}]}
                async with session.post(f"{url}/v2/models/double/infer", json=body) as resp:
                    return (await resp.json())["outputs"][0]["data"]
        finally:
            await launcher.stop()

    assert asyncio.run(scenario()) == [3.0, -4.0]
    # stop() leaves the user's server alone.
    assert user_triton.process is not None and user_triton.process.poll() is None


def test_a_restarted_server_triggers_on_restart(user_triton: UserTriton) -> None:
    user_triton.start()
    launcher = ExternalLauncher(TritonOptions(repository=user_triton.repository), user_triton.url,
                                poll_interval_s=0.2)

    async def scenario() -> None:
        restarted = restarted_event(launcher)
        await launcher.start()
        try:
            user_triton.kill()
            await wait_for_async(lambda: not launcher.is_running(), 30,
                                 "the watcher to notice the server is gone")
            assert not restarted.is_set()
            user_triton.start()
            await asyncio.wait_for(restarted.wait(), 120)
            assert launcher.is_running()
        finally:
            await launcher.stop()

    asyncio.run(scenario())
    assert launcher.restarts == 1
