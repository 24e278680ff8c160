"""Helpers for the multi-container suites: the models, the images, a deploy through boto3.

The scikit-learn models are real fitted estimators pickled with joblib (the scikit-learn server
image pins the host's scikit-learn version, so they load in the container).
"""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.client_support import DUMMY_CREDENTIALS
from tests.docker_support import require_image
from tests.support import package, wait_for, write_scale_model

SKLEARN_TEST_IMAGE = "mme-sklearn-serve:test"
# Production image URIs as a model names them; --image maps them to the local images.
SKLEARN_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
TRITON_IMAGE = "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
FAST = {"Delay": 1, "MaxAttempts": 180}


def sagemaker_client(url: str) -> Any:
    return boto3.client("sagemaker", endpoint_url=url, **DUMMY_CREDENTIALS)


def cloudwatch_client(url: str) -> Any:
    return boto3.client("cloudwatch", endpoint_url=url, **DUMMY_CREDENTIALS)


def triton_tarball(work: Path, store: Path, name: str, scale: float) -> Path:
    """A SingleModel Triton tarball: one ``scale`` model (X FP32 [4] -> Y = X * scale)."""
    return package(write_scale_model(work / name, name, scale=scale), store / f"{name}.tar.gz",
                   "folder")


def scaler_tarball(store: Path, name: str = "featurizer") -> Path:
    """A fitted StandardScaler (mean 0.5, scale 0.5: x -> 2x - 1) as ``model.joblib``."""
    joblib = pytest.importorskip("joblib")
    preprocessing = pytest.importorskip("sklearn.preprocessing")
    scaler = preprocessing.StandardScaler().fit([[0.0] * 4, [1.0] * 4])
    buffer = io.BytesIO()
    joblib.dump(scaler, buffer)
    tarball = store / f"{name}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo("model.joblib")
        info.size = len(buffer.getvalue())
        tar.addfile(info, io.BytesIO(buffer.getvalue()))
    return tarball


def sklearn_image(docker_client: Any) -> str:
    return require_image(docker_client, SKLEARN_TEST_IMAGE)


def deploy(sm: Any, name: str, containers: list[dict[str, Any]], mode: str | None = None,
           wait: bool = True) -> None:
    """CreateModel -> CreateEndpointConfig -> CreateEndpoint (-> the InService waiter)."""
    extra = {"InferenceExecutionConfig": {"Mode": mode}} if mode else {}
    sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, Containers=containers, **extra)
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": name, "InitialInstanceCount": 1,
         "InstanceType": "ml.m5.xlarge"}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    if wait:
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)


def wait_for_status(sm: Any, name: str, statuses: tuple[str, ...],
                    timeout: float = 180) -> dict[str, Any]:
    def settled() -> dict[str, Any] | None:
        described: dict[str, Any] = sm.describe_endpoint(EndpointName=name)
        return described if described["EndpointStatus"] in statuses else None

    return wait_for(settled, timeout, f"{name} to be {' or '.join(statuses)}", interval_s=0.2)


def container_latency_samples(cw: Any, endpoint: str, container: str) -> float:
    """SampleCount of ContainerLatency for one container, as CloudWatch reports it."""
    now = time.time()
    stats = cw.get_metric_statistics(
        Namespace="AWS/SageMaker", MetricName="ContainerLatency",
        Dimensions=[{"Name": "EndpointName", "Value": endpoint},
                    {"Name": "VariantName", "Value": "AllTraffic"},
                    {"Name": "ContainerName", "Value": container}],
        StartTime=now - 600, EndTime=now + 60, Period=60, Statistics=["SampleCount"])
    return sum(p["SampleCount"] for p in stats["Datapoints"])
