"""Different frameworks behind one endpoint, on this machine: a scikit-learn container and a
Triton container, first invoked one at a time (Direct), then as an inference pipeline (Serial).

    bash docker/prepare-ci.sh                   # the CPU Triton and scikit-learn images
    .venv/bin/python docker/multi_container_demo.py

The production image URIs are mapped to the two local images with ``--image`` mappings; the
clients are unmodified boto3 clients. Everything it starts is stopped at the end.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3

from emulator.server import EmulatorServer
from emulator.settings import Settings
from ensembles.packaging import package
from harness.testmodels import write_scale_model

SKLEARN_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
TRITON_IMAGE = "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
CLIENT = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "x"}


def scaler_tarball(folder: Path) -> Path:
    """A StandardScaler fitted so that x -> 2x - 1, pickled as model.joblib."""
    import joblib
    from sklearn.preprocessing import StandardScaler

    buffer = io.BytesIO()
    joblib.dump(StandardScaler().fit([[0.0] * 4, [1.0] * 4]), buffer)
    tarball = folder / "featurizer.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo("model.joblib")
        info.size = len(buffer.getvalue())
        tar.addfile(info, io.BytesIO(buffer.getvalue()))
    return tarball


def deploy(sm: Any, name: str, containers: list[dict[str, object]], mode: str) -> None:
    sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, Containers=containers,
                    InferenceExecutionConfig={"Mode": mode})
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": name, "InitialInstanceCount": 1,
         "InstanceType": "ml.m5.xlarge"}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 300})


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="mme-mce-demo-") as scratch:
        work = Path(scratch)
        featurizer = scaler_tarball(work)
        model = package(write_scale_model(work / "repo", "double", scale=2),
                        work / "double.tar.gz", "folder")
        settings = Settings.from_env(
            env={}, launcher="docker", port=0, cache_dir=work / "cache", docker_mounts=[work],
            image=[f"{SKLEARN_IMAGE}=mme-sklearn-serve:test",
                   f"{TRITON_IMAGE}=mme-triton-cpu:test"])
        server = EmulatorServer(settings).start()
        try:
            sm = boto3.client("sagemaker", endpoint_url=server.url, **CLIENT)
            rt = boto3.client("sagemaker-runtime", endpoint_url=server.url, **CLIENT)
            sklearn = {"Image": SKLEARN_IMAGE, "ModelDataUrl": f"file://{featurizer}"}
            triton = {"Image": TRITON_IMAGE, "ModelDataUrl": f"file://{model}",
                      "Environment": {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "double"}}

            started = time.monotonic()
            deploy(sm, "mce", [
                {**sklearn, "ContainerHostname": "englishModel",
                 "Environment": {"SKLEARN_METHOD": "transform"}},
                {**triton, "ContainerHostname": "germanModel"}], "Direct")
            print(f"Direct endpoint InService in {time.monotonic() - started:.1f}s")
            answer = rt.invoke_endpoint(EndpointName="mce", TargetContainerHostname="englishModel",
                                        ContentType="text/csv", Body=b"1,2,3,4")
            print("englishModel (scikit-learn):", answer["Body"].read().decode())
            body = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                           "data": [1, 2, 3, 4]}]})
            answer = rt.invoke_endpoint(EndpointName="mce", TargetContainerHostname="germanModel",
                                        ContentType="application/json", Body=body)
            print("germanModel (Triton):", json.loads(answer["Body"].read())["outputs"][0]["data"])

            deploy(sm, "pipeline", [
                {**sklearn, "ContainerHostname": "featurizer",
                 "Environment": {"SKLEARN_METHOD": "transform", "SKLEARN_OUTPUT": "kserve",
                                 "SKLEARN_KSERVE_INPUT": "X"}},
                {**triton, "ContainerHostname": "model"}], "Serial")
            answer = rt.invoke_endpoint(EndpointName="pipeline", ContentType="text/csv",
                                        Body=b"1,2,3,4")
            print("pipeline featurizer -> model:",
                  json.loads(answer["Body"].read())["outputs"][0]["data"])
            cw = boto3.client("cloudwatch", endpoint_url=server.url, **CLIENT)
            for metric in cw.list_metrics(MetricName="ContainerLatency")["Metrics"]:
                dims = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
                print("ContainerLatency series:", dims)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
