"""The Testcontainers module (``harness.mme_container``), used as a team using Testcontainers
would: the emulator's image started with a local store, invoked through boto3 on the mapped
port, stopped with nothing left running. Needs the Docker engine and the emulator's image
(``docker/build-emulator-image.sh``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.docker_support import require_image
from tests.support import output_of, package, scale_request, write_scale_model

pytestmark = [pytest.mark.docker, pytest.mark.slow]
EMULATOR_IMAGE = os.environ.get("MME_EMULATOR_IMAGE", "sagemaker-mme-emulator:local")


@pytest.fixture
def no_reaper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Testcontainers' reaper (Ryuk) is an image from Docker Hub, which this machine cannot
    pull: the containers are stopped by the test itself."""
    from testcontainers.core.config import testcontainers_config

    monkeypatch.setattr(testcontainers_config, "ryuk_disabled", True)


def test_the_module_starts_the_image_serves_a_store_and_stops(
        docker_client: Any, no_reaper: None, tmp_path: Path) -> None:
    from harness.mme_container import SageMakerMmeContainer

    image = require_image(docker_client, EMULATOR_IMAGE)
    store = tmp_path / "store"
    package(write_scale_model(tmp_path / "m", "scale", 3.0), store / "scale.tar.gz", "folder")
    store.chmod(0o755)  # the emulator runs as a non-root user in its image
    (store / "scale.tar.gz").chmod(0o644)

    with SageMakerMmeContainer(image, model_data=store, endpoint_name="tc",
                               serve_args=["--max-loaded-models", "1"]) as mme:
        container_id = mme.get_wrapped_container().id
        runtime = mme.boto3_client("sagemaker-runtime")
        answer = runtime.invoke_endpoint(EndpointName="tc", TargetModel="scale.tar.gz",
                                         ContentType="application/json",
                                         Body=scale_request([1.0, 2.0, 3.0, 4.0]))
        assert np.array_equal(output_of(answer["Body"].read()), [3, 6, 9, 12])
        sagemaker = mme.boto3_client("sagemaker")
        assert [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]] == ["tc"]
        variables = mme.client_env()
        assert variables["AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"] == mme.endpoint_url
    assert not docker_client.containers.list(all=True, filters={"id": container_id})


def test_the_image_says_what_a_module_reads(docker_client: Any) -> None:
    from harness.mme_container import PORT, STORE_MOUNT

    image = docker_client.images.get(require_image(docker_client, EMULATOR_IMAGE))
    labels = image.labels
    assert labels["sagemaker-mme-emulator.port"] == str(PORT)
    assert labels["sagemaker-mme-emulator.health-path"] == "/ping"
    assert labels["sagemaker-mme-emulator.model-data-mount"] == STORE_MOUNT
    assert "/ping" in " ".join(image.attrs["Config"]["Healthcheck"]["Test"])


def test_an_image_that_cannot_serve_says_why_and_leaves_nothing(
        docker_client: Any, no_reaper: None, tmp_path: Path) -> None:
    from harness.mme_container import EmulatorDidNotStart, SageMakerMmeContainer

    image = require_image(docker_client, EMULATOR_IMAGE)
    container = SageMakerMmeContainer(image, serve_args=["--no-such-flag"], startup_timeout_s=60)
    with pytest.raises(EmulatorDidNotStart, match="no-such-flag"):
        container.start()
    assert not docker_client.containers.list(all=True, filters={"ancestor": image,
                                                                "status": "exited"})
