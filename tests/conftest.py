"""Shared fixtures: the emulator with a real embedded Triton, a real HTTP S3 server, boto3."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from emulator.server import EmulatorServer
from emulator.settings import Settings
from emulator.triton.launcher import free_port


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-docker", action="store_true",
                     help="skip the docker suites (refused with CI=true: CI runs them)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--no-docker"):
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise pytest.UsageError("--no-docker is refused with CI=true: CI runs the docker suites")
    skip = pytest.mark.skip(reason="--no-docker given: docker suites skipped on request")
    for item in items:
        if "docker" in item.keywords:
            item.add_marker(skip)


DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing",
                     "region_name": "us-east-1"}


def runtime_client(url: str, **config: Any) -> Any:
    """An unmodified boto3 sagemaker-runtime client; no retries so errors surface as sent."""
    return boto3.client(
        "sagemaker-runtime", endpoint_url=url, **DUMMY_CREDENTIALS,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=120,
                      **config),
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    return folder


@pytest.fixture
def start_emulator(tmp_path: Path) -> Iterator[Callable[..., EmulatorServer]]:
    """Start an emulator (own Triton, own cache dir); every one started is stopped at the end."""
    servers: list[EmulatorServer] = []

    def start(**overrides: Any) -> EmulatorServer:
        overrides.setdefault("cache_dir", tmp_path / f"cache{len(servers)}")
        overrides.setdefault("port", 0)
        server = EmulatorServer(Settings.from_env(env={}, **overrides)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@dataclass
class S3:
    endpoint_url: str
    client: Any

    def bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3]:
    """moto in server mode: a real HTTP S3 endpoint on a free loopback port."""
    from moto.server import ThreadedMotoServer

    for key, value in DUMMY_CREDENTIALS.items():
        os.environ.setdefault(key.upper() if key != "region_name" else "AWS_DEFAULT_REGION", value)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    yield S3(url, boto3.client("s3", endpoint_url=url, **DUMMY_CREDENTIALS))
    server.stop()
