"""A container's Environment reaches Triton as SageMaker's ``serve`` would pass it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from emulator.settings import Settings
from tests.client_support import DUMMY_CREDENTIALS
from tests.support import package, write_scale_model

FAST = {"Delay": 1, "MaxAttempts": 120}


def _endpoint(sm: Any, name: str, store: Path, environment: dict[str, str]) -> None:
    sm.create_model(ModelName=name, PrimaryContainer={
        "Image": "triton", "Mode": "MultiModel", "ModelDataUrl": f"file://{store}",
        "Environment": environment})
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.m5.xlarge",
        "InitialInstanceCount": 1}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)


def test_invalid_environment_fails_the_endpoint_with_the_reason(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                                 tmp_path: Path) -> None:
    package(write_scale_model(tmp_path / "r", "m"), store / "m.tar.gz", "folder")
    server = start_emulator()
    sm = boto3.client("sagemaker", endpoint_url=server.url, **DUMMY_CREDENTIALS)
    _endpoint(sm, "bad-env", store, {"SAGEMAKER_TRITON_INFERENCE_TYPE": "bogus"})
    with pytest.raises(Exception, match="Failed"):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="bad-env", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="bad-env")
    assert described["EndpointStatus"] == "Failed"
    assert "SAGEMAKER_TRITON_INFERENCE_TYPE" in described["FailureReason"]


def test_environment_becomes_triton_flags_and_model_environment(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                                 tmp_path: Path) -> None:
    package(write_scale_model(tmp_path / "r", "m"), store / "m.tar.gz", "folder")
    server = start_emulator()
    sm = boto3.client("sagemaker", endpoint_url=server.url, **DUMMY_CREDENTIALS)
    _endpoint(sm, "env", store, {"SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT": "3",
                                 "MY_MODEL_SETTING": "on"})
    sm.get_waiter("endpoint_in_service").wait(EndpointName="env", WaiterConfig=FAST)
    launcher = server.registry.get("env").instances[0].launcher
    assert "--buffer-manager-thread-count=3" in launcher.command()
    assert launcher.options.environment["MY_MODEL_SETTING"] == "on"


def test_docker_mounts_from_the_environment() -> None:
    settings = Settings.from_env(env={"MME_DOCKER_MOUNT": "/data/a:/data/b", "MME_GPUS": "none"})
    assert settings.docker_mounts == [Path("/data/a"), Path("/data/b")]
    assert settings.gpus == "none"
