"""Logs a person can read: a single-model endpoint's lines name its model (no TargetModel)."""

from __future__ import annotations

import logging
from pathlib import Path

import boto3
import pytest

from tests.client_support import runtime_client
from tests.support import output_of, package, scale_request, write_scale_model


def test_single_model_endpoint_logs_name_the_model(start_emulator, s3_server,  # type: ignore[no-untyped-def]
                                                   tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    bucket = s3_server.bucket("single-model-logs")
    write_scale_model(tmp_path / "repo", "scale", scale=3.0)
    tarball = package(tmp_path / "repo", tmp_path / "out" / "resnet.tar.gz")
    s3_server.client.upload_file(str(tarball), bucket, "single/resnet.tar.gz")
    server = start_emulator(s3_endpoint_url=s3_server.endpoint_url)
    sm = boto3.client("sagemaker", endpoint_url=server.url, region_name="us-east-1",
                      aws_access_key_id="x", aws_secret_access_key="x")
    sm.create_model(ModelName="one", PrimaryContainer={
        "Image": "triton", "Mode": "SingleModel",
        "ModelDataUrl": f"s3://{bucket}/single/resnet.tar.gz"})
    sm.create_endpoint_config(EndpointConfigName="one", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "one", "InstanceType": "ml.m5.xlarge",
        "InitialInstanceCount": 1}])
    with caplog.at_level(logging.INFO, logger="emulator.manager.model_manager"):
        sm.create_endpoint(EndpointName="one", EndpointConfigName="one")
        sm.get_waiter("endpoint_in_service").wait(
            EndpointName="one", WaiterConfig={"Delay": 1, "MaxAttempts": 120})
        resp = runtime_client(server.url).invoke_endpoint(EndpointName="one",
                                                          Body=scale_request([1, 2, 3, 4]))
        assert list(output_of(resp["Body"].read())) == [3, 6, 9, 12]
    lines = [r.getMessage() for r in caplog.records if r.name == "emulator.manager.model_manager"]
    assert any(line.startswith("model=resnet.tar.gz step=download") for line in lines), lines
    assert any(line.startswith("model=resnet.tar.gz step=load") for line in lines), lines
    assert not any(line.startswith("model= ") for line in lines), lines
