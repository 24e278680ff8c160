"""Shared pieces for the docker suites: engine and image checks that never skip silently in CI.

Locally, a suite that needs a Docker engine or the CPU Triton test image is skipped with a
reason saying how to get them. In CI (``CI=true``) the same condition FAILS the test: CI
prepares both with ``docker/prepare-ci.sh``, so their absence is a broken pipeline, not a
reason to pass.

Use the fixtures by importing them into a test module::

    from tests.docker_support import docker_client, triton_cpu_image  # noqa: F401
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

TEST_IMAGE = os.environ.get("MME_TEST_IMAGE", "mme-triton-cpu:test")
PREPARE_HINT = "bash docker/prepare-ci.sh (installs docker.io, starts dockerd, builds the image)"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip locally, fail in CI: a docker suite must never pass by not running there."""
    if in_ci():
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def engine_problem() -> str | None:
    """Why no Docker engine can be used from here, or None when one answers."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'docker>=7')"
    try:
        client = docker.from_env(timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means no usable engine
        return f"no Docker engine answers ({exc}); start one with {PREPARE_HINT}"
    return None


def require_engine() -> Any:
    """A connected docker client, or skip/fail (see module doc)."""
    problem = engine_problem()
    if problem is not None:
        unavailable(problem)
    import docker

    return docker.from_env(timeout=120)


def require_image(client: Any, image: str = TEST_IMAGE) -> str:
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        unavailable(f"the image {image} is not built; build it with {PREPARE_HINT}")
    return image


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    client = require_engine()
    yield client
    client.close()


@pytest.fixture(scope="session")
def triton_cpu_image(docker_client: Any) -> str:
    return require_image(docker_client)
