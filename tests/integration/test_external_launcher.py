"""ExternalLauncher against a real tritonserver that the test runs itself, as a user would."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import textwrap
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from emulator.processes import dies_with_parent, free_port
from emulator.supervision import LauncherError
from emulator.triton import python_envs, stubs
from emulator.triton.embedded import (
    EmbeddedLauncher,
    assemble_backends,
    child_environment,
    find_tritonserver,
    private_shm_wrapper,
)
from emulator.triton.external import ExternalLauncher
from emulator.triton.launcher import TritonOptions
from harness.testmodels import write_vector_model
from tests.fault_support import SHM, process_group_members
from tests.launcher_support import restarted_event
from tests.support import wait_for_async, wait_until

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
# A call to the user's Triton (a model's load, an inference). Loading this model takes about two
# seconds, on a 2-core machine beside six CPU-bound processes too (Triton starts the Python
# stub, which imports numpy); the bound is far above that and well below aiohttp's default five
# minutes, so a load that never ends (a stub that died: Triton keeps the model LOADING) fails
# with Triton's log.
CALL_TIMEOUT_S = 120


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
        # It ends with the test's process even when that is killed (no teardown runs then).
        cmd, preexec_fn = dies_with_parent(cmd)
        log = open(self.work / "triton.log", "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        env=child_environment({}, self.backends),
                                        start_new_session=True, preexec_fn=preexec_fn)
        log.close()

    def log_tail(self) -> str:
        return (self.work / "triton.log").read_text(errors="replace")[-3000:]

    def regions(self) -> list[str]:
        """The shm regions its Python stubs use: in the machine's /dev/shm, as any Triton
        started without a /dev/shm of its own makes them."""
        names = []
        for pid in process_group_members(self.process.pid) if self.process else []:
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            names += [a.decode() for a in args if a.startswith(stubs.SHM_PREFIX.encode())]
        return names

    def kill(self) -> None:
        """SIGKILL its process group (its stubs too), as a crash would; then remove what a
        killed Triton leaves on the machine (its stubs' shm regions, its python_env folder in
        /tmp), which other Tritons and tests on this machine would meet."""
        if self.process and self.process.poll() is None:
            regions = self.regions()
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            for name in regions:
                (SHM / name).unlink(missing_ok=True)
            python_envs.remove_orphans()


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
            timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                url = launcher.http_url
                async with session.post(f"{url}/v2/repository/models/double/load") as resp:
                    assert resp.status == 200, await resp.text()
                body = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32",
                                    "data": [1.5, -2]}]}
                async with session.post(f"{url}/v2/models/double/infer", json=body) as resp:
                    return (await resp.json())["outputs"][0]["data"]
        except asyncio.TimeoutError:
            pytest.fail(f"the user's Triton did not answer within {CALL_TIMEOUT_S}s; its log "
                        f"ends:\n{user_triton.log_tail()}")
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


def _post(url: str) -> int:
    request = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as resp:
        return int(resp.status)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=5) as resp:
            return int(resp.status) == 200
    except OSError:
        return False


def test_an_emulators_triton_leaves_the_users_shared_memory_alone(user_triton: UserTriton,
                                                                 tmp_path: Path) -> None:
    """The user's Triton and the emulator's number their stubs' shm regions alike
    (``triton_python_backend_shm_region_<n>``), the user's in the machine's /dev/shm, the
    emulator's in a /dev/shm of its own Triton's. Cleaning up after its Triton, the emulator
    must not unlink those names in the machine's: a user's stub whose region is gone before it
    opens it dies, and Triton then keeps that model LOADING for ever."""
    if not private_shm_wrapper():
        pytest.skip("no private /dev/shm for the emulator's Triton here (unshare): the two "
                    "Tritons' regions share one folder and clash anyway")
    user_triton.start()
    wait_until(lambda: _ready(user_triton.url), 120, "the user's Triton ready")
    assert _post(f"{user_triton.url}/v2/repository/models/double/load") == 200
    regions = user_triton.regions()
    assert regions and all((SHM / name).exists() for name in regions)

    repository = tmp_path / "emulator" / "repo"
    shutil.copytree(user_triton.repository, repository)
    launcher = EmbeddedLauncher(TritonOptions(repository=repository), tmp_path / "emulator")

    async def start_load_stop() -> None:
        await launcher.start()
        try:
            status = await asyncio.to_thread(
                _post, f"{launcher.http_url}/v2/repository/models/double/load")
            assert status == 200
            # Its stubs took the same numbers as the user's.
            assert {s.shm_region for s in stubs.read(launcher.stub_registry)} & set(regions)
        finally:
            await launcher.stop()

    asyncio.run(start_load_stop())
    assert [name for name in regions if not (SHM / name).exists()] == []
