"""The emulator's own image and docker/compose.yaml's arrangement, run for real on CPU.

compose.yaml itself needs a GPU and registry images; this runs the same arrangement with the
local images: the emulator container (non-root, ``--launcher external``) and a Triton container
(the CPU test image) on one network, sharing a cache volume at the same path, started in
compose's order with compose's Triton command. The store is a folder instead of MinIO.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from emulator.containers.docker_engine import HOST_LABEL, OWNER_LABEL, process_start_ticks
from emulator.processes import wait_until
from harness.live_endpoint import ping
from tests.client_support import runtime_client
from tests.docker_support import require_image
from tests.support import output_of, package, scale_request, write_scale_model

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "compose.yaml"
EMULATOR_IMAGE = os.environ.get("MME_EMULATOR_IMAGE", "sagemaker-mme-emulator:local")


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_shares_the_cache_at_the_same_path_and_uses_the_external_launcher() -> None:
    services = compose()["services"]
    assert set(services) >= {"emulator", "triton", "s3"}
    emulator, triton = services["emulator"], services["triton"]
    assert emulator["volumes"] == triton["volumes"] == ["mme-cache:/var/cache/mme"]
    env = emulator["environment"]
    assert env["MME_LAUNCHER"] == "external"
    assert env["MME_TRITON_URL"] == "http://triton:8000"
    assert env["MME_CACHE_DIR"] == "/var/cache/mme"
    assert env["MME_S3_ENDPOINT_URL"] == "http://s3:9000"
    command = " ".join(triton["command"])
    assert "--model-control-mode=explicit" in command
    assert env["MME_TRITON_REPOSITORY"] == "/var/cache/mme/triton-repo"
    assert "/var/cache/mme/triton-repo" in command
    gpu = triton["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["capabilities"] == ["gpu"]
    assert triton["shm_size"] == "1g"


@pytest.fixture
def emulator_image(docker_client: Any) -> str:
    return require_image(docker_client, EMULATOR_IMAGE)


@pytest.fixture
def stack_resources(docker_client: Any) -> Iterator[dict[str, Any]]:
    """A network and a volume of our own; everything created on them is removed at the end."""
    suffix = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    network = docker_client.networks.create(f"mme-stack-{suffix}")
    volume = docker_client.volumes.create(f"mme-stack-cache-{suffix}")
    created: dict[str, Any] = {"suffix": suffix, "network": network, "volume": volume,
                               "containers": []}
    yield created
    for container in created["containers"]:
        with contextlib.suppress(Exception):  # already gone
            container.remove(force=True)
    network.remove()
    volume.remove(force=True)


def labels() -> dict[str, str]:
    import socket

    return {OWNER_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname(),
            f"{OWNER_LABEL}-start": process_start_ticks(os.getpid()) or ""}


def wait_for_ping(url: str, container: Any, triton: Any, timeout: float = 180) -> None:
    def running() -> None:
        container.reload()
        assert container.status != "exited", (
            container.logs().decode(errors="replace")[-3000:]
            + "\n--- triton ---\n" + triton.logs().decode(errors="replace")[-2000:])

    if not wait_until(lambda: ping(url), timeout, still_starting=running, interval_s=0.2):
        raise AssertionError("the emulator container did not answer /ping:\n"
                             + container.logs().decode(errors="replace")[-3000:])


@pytest.mark.docker
def test_emulator_image_and_triton_container_serve_boto3(
        tmp_path: Path, docker_client: Any, triton_cpu_image: str,
        emulator_image: str, stack_resources: dict[str, Any]) -> None:
    store = tmp_path / "store"
    package(write_scale_model(tmp_path / "m", "scale", 3.0), store / "scale.tar.gz", "folder")
    # The emulator runs as a non-root user: the store must be readable by others.
    store.chmod(0o755)
    (store / "scale.tar.gz").chmod(0o644)

    suffix = stack_resources["suffix"]
    network = stack_resources["network"].name
    volume = stack_resources["volume"].name
    triton_name = f"mme-stack-triton-{suffix}"
    emulator = docker_client.containers.run(
        emulator_image, name=f"mme-stack-emulator-{suffix}", detach=True, network=network,
        labels=labels(),
        environment={"MME_LAUNCHER": "external", "MME_TRITON_URL": f"http://{triton_name}:8000",
                     "MME_MODEL_DATA": "/models", "MME_CACHE_DIR": "/var/cache/mme",
                     "MME_TRITON_REPOSITORY": "/var/cache/mme/triton-repo"},
        volumes={volume: {"bind": "/var/cache/mme", "mode": "rw"},
                 str(store): {"bind": "/models", "mode": "ro"}},
        ports={"8080/tcp": ("127.0.0.1", None)},
    )
    stack_resources["containers"].append(emulator)
    triton_service = compose()["services"]["triton"]
    # compose turns "$$" into a literal "$" before the shell sees the command.
    command = [part.replace("$$", "$") for part in triton_service["command"]]
    triton = docker_client.containers.run(
        triton_cpu_image, command, name=triton_name, detach=True,
        network=network, labels=labels(), shm_size=triton_service["shm_size"],
        volumes={volume: {"bind": "/var/cache/mme", "mode": "rw"}},
    )
    stack_resources["containers"].append(triton)

    emulator.reload()
    port = emulator.attrs["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"]
    url = f"http://127.0.0.1:{port}"
    wait_for_ping(url, emulator, triton)
    user = emulator.attrs["Config"]["User"]
    assert user == "mme"

    rt = runtime_client(url)
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel="scale.tar.gz",
                              Body=scale_request([1, 2, 3, 4]))
    np.testing.assert_allclose(output_of(resp["Body"].read()), [3, 6, 9, 12])
    # Triton loaded it from the shared cache through the emulator's symlinks.
    triton_log = triton.logs().decode(errors="replace")
    assert "successfully loaded 'scale--" in triton_log
