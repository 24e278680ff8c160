"""The SAGEMAKER_* -> tritonserver translation applied to a real tritonserver.

The translation itself, variable by variable, is tests/unit/test_sagemaker_env.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from emulator.triton.sagemaker_env import triton_args_from_environment


def test_real_tritonserver_accepts_every_translated_flag(tmp_path: Path) -> None:
    """Triton 2.51 (the embedded binary) starts with the flags of a fully populated environment."""
    from emulator.processes import free_port
    from emulator.triton.embedded import EmbeddedLauncher
    from emulator.triton.launcher import TritonOptions

    env = {
        "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "false",
        "SAGEMAKER_TRITON_ALLOW_GRPC": "true",
        "SAGEMAKER_TRITON_GRPC_PORT": str(free_port()),
        "SAGEMAKER_TRITON_ALLOW_METRICS": "true",
        "SAGEMAKER_TRITON_METRICS_PORT": str(free_port()),
        "SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT": "2",
        "SAGEMAKER_TRITON_LOG_VERBOSE": "0",
        "SAGEMAKER_TRITON_LOG_INFO": "true",
        "SAGEMAKER_TRITON_LOG_WARNING": "true",
        "SAGEMAKER_TRITON_LOG_ERROR": "true",
        "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE": "8388608",
        "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE": "2097152",
        "SAGEMAKER_TRITON_TENSORFLOW_VERSION": "2",
        "SAGEMAKER_TRITON_ADDITIONAL_ARGS": "--exit-timeout-secs=5",
    }
    translated = triton_args_from_environment(env)
    options = TritonOptions(repository=tmp_path / "repo", extra_args=translated.args,
                            environment=translated.passthrough_env, startup_timeout_s=60)

    async def run() -> int:
        launcher = EmbeddedLauncher(options, work_dir=tmp_path)
        await launcher.start()
        try:
            metrics_url = f"http://127.0.0.1:{env['SAGEMAKER_TRITON_METRICS_PORT']}/metrics"
            async with aiohttp.ClientSession() as session:
                # Readiness is answered on the HTTP port; the metrics port is polled rather
                # than tried once (a single refused connection failed this on a loaded runner).
                for _ in range(300):
                    try:
                        async with session.get(metrics_url) as resp:
                            return resp.status
                    except aiohttp.ClientConnectorError:
                        await asyncio.sleep(0.1)
            raise AssertionError(f"nothing listened on {metrics_url} within 30 s of ready")
        finally:
            await launcher.stop()

    # The metrics port answering proves the translated flags were applied, not just parsed.
    assert asyncio.run(run()) == 200


def test_a_port_taken_before_triton_binds_it_is_replaced(tmp_path: Path,
                                                         monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """free_ports' choice can be taken by another process before Triton binds it: Triton then
    exits at once ("already in use"), and the launcher starts it again on other ports."""
    import socket

    from emulator.triton import embedded
    from emulator.triton.launcher import TritonOptions

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    taken_port = taken.getsockname()[1]
    starts: list[list[int]] = []
    real_free_ports = embedded.free_ports

    def ports_with_the_taken_one_first(count: int, host: str = "127.0.0.1") -> list[int]:
        ports = real_free_ports(count, host)
        if not starts:  # the first start's HTTP port is the taken one
            ports[0] = taken_port
        starts.append(ports)
        return ports

    monkeypatch.setattr(embedded, "free_ports", ports_with_the_taken_one_first)
    options = TritonOptions(repository=tmp_path / "repo", startup_timeout_s=60)

    async def run() -> tuple[str, int]:
        launcher = embedded.EmbeddedLauncher(options, work_dir=tmp_path)
        await launcher.start()
        try:
            async with aiohttp.ClientSession() as session, \
                    session.get(f"{launcher.http_url}/v2/health/ready") as resp:
                return launcher.http_url, resp.status
        finally:
            await launcher.stop()

    with taken:
        url, status = asyncio.run(run())
    assert status == 200
    assert not url.endswith(f":{taken_port}")
    assert len(starts) == 2  # started again, on other ports
