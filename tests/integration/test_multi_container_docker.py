"""Different frameworks behind one endpoint, for real: the scikit-learn server image and the CPU
Triton image on a Docker engine, in Serial (a featurizer in front of a Triton model) and Direct
mode, through boto3 and through the SageMaker Python SDK v2's PipelineModel; and what goes
wrong: an image nobody mapped, a container that never answers /ping, one that dies mid-pipeline (and
is replaced).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.docker_support import docker_client, triton_cpu_image  # noqa: F401
from tests.multi_container_support import (
    ROLE,
    SKLEARN_IMAGE,
    TRITON_IMAGE,
    cloudwatch_client,
    container_latency_samples,
    deploy,
    sagemaker_client,
    scaler_tarball,
    sklearn_image,
    triton_tarball,
    wait_for_status,
)
from tests.support import output_of, wait_for, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def emulator(start_emulator, docker_client, triton_cpu_image, tmp_path: Path,  # noqa: F811
             s3_server, request: pytest.FixtureRequest) -> Any:
    """An emulator on the docker launcher with each production image mapped to a local one.

    A container has 120 s to answer its first ``/ping`` (a scikit-learn server took over 30 s
    to start on a loaded 2-core CI runner), unless the test is marked ``startup_timeout(s)``.
    """
    local_sklearn = sklearn_image(docker_client)
    marker = request.node.get_closest_marker("startup_timeout")
    return start_emulator(
        launcher="docker", s3_endpoint_url=s3_server.endpoint_url,
        image=[f"{SKLEARN_IMAGE}={local_sklearn}", f"{TRITON_IMAGE}={triton_cpu_image}"],
        container_startup_timeout_s=marker.args[0] if marker else 120, docker_mounts=[tmp_path])


@pytest.fixture
def models(s3_server, tmp_path: Path) -> dict[str, str]:
    """The featurizer (x -> 2x - 1) and a Triton model (Y = 2X), in the moto S3 server."""
    store = tmp_path / "upload"
    store.mkdir()
    bucket = s3_server.bucket("models")
    urls = {}
    for name, tarball in (("featurizer", scaler_tarball(store)),
                          ("double", triton_tarball(tmp_path, store, "double", 2))):
        s3_server.client.upload_file(str(tarball), bucket, f"mce/{tarball.name}")
        urls[name] = f"s3://{bucket}/mce/{tarball.name}"
    return urls


def featurizer(models: dict[str, str], hostname: str, **env: str) -> dict[str, Any]:
    return {"Image": SKLEARN_IMAGE, "ContainerHostname": hostname,
            "ModelDataUrl": models["featurizer"],
            "Environment": {"SKLEARN_METHOD": "transform", **env}}


def triton(models: dict[str, str], hostname: str) -> dict[str, Any]:
    return {"Image": TRITON_IMAGE, "ContainerHostname": hostname, "ModelDataUrl": models["double"],
            "Environment": {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "double"}}


def owned_containers(docker_client: Any, endpoint: str) -> list[str]:  # noqa: F811
    found = docker_client.containers.list(
        all=True, filters={"label": "com.sagemaker-mme-emulator.launcher"})
    return [c.name for c in found
            if c.labels.get("com.sagemaker-mme-emulator.launcher", "").startswith(endpoint)]


def test_serial_sklearn_into_triton_then_a_container_dies(emulator, models, docker_client  # noqa: F811
                                                          ) -> None:
    sm, rt, cw = (sagemaker_client(emulator.url), runtime_client(emulator.url),
                  cloudwatch_client(emulator.url))
    # The featurizer answers with a KServe v2 request for the Triton model's input X.
    deploy(sm, "pipe", [featurizer(models, "featurizer", SKLEARN_OUTPUT="kserve",
                                   SKLEARN_KSERVE_INPUT="X"),
                        triton(models, "model")])
    resp = rt.invoke_endpoint(EndpointName="pipe", ContentType="text/csv", Body=b"1,2,3,4")
    assert output_of(resp["Body"].read()).tolist() == [2, 6, 10, 14]  # 2 * (2x - 1)
    assert resp["ContentType"] == "application/json"
    assert container_latency_samples(cw, "pipe", "featurizer") == 1
    assert container_latency_samples(cw, "pipe", "model") == 1

    # SageMaker hands each container of a multi-container endpoint its port; the image says
    # (by its label) that it listens there.
    members = emulator.registry.get("pipe").instances[0].members
    sklearn = members[0].container
    env = docker_client.containers.get(sklearn.container_name).attrs["Config"]["Env"]
    assert "SAGEMAKER_BIND_TO_PORT=8081" in env
    assert any(e.startswith("SAGEMAKER_SAFE_PORT_RANGE=") for e in env)

    # A step's error is the request's ModelError, naming the container.
    with pytest.raises(ClientError) as excinfo:
        rt.invoke_endpoint(EndpointName="pipe", ContentType="text/csv", Body=b"1,2,x,4")
    assert excinfo.value.response["Error"]["Code"] == "ModelError"
    assert "(400) from featurizer with message" in excinfo.value.response["Error"]["Message"]

    # The featurizer dies mid-pipeline: the request fails naming it, nothing hangs.
    docker_client.containers.get(sklearn.container_name).kill()
    with pytest.raises(ClientError) as excinfo:
        rt.invoke_endpoint(EndpointName="pipe", ContentType="text/csv", Body=b"1,2,3,4")
    assert excinfo.value.response["Error"]["Code"] == "ModelError"
    assert "from featurizer with message" in excinfo.value.response["Error"]["Message"]
    assert "unreachable" in excinfo.value.response["OriginalMessage"]
    # ... and a new container replaces it, as a dead Triton is replaced.
    dead = sklearn.container_name

    def answered() -> dict[str, Any] | None:
        try:
            return dict(rt.invoke_endpoint(EndpointName="pipe", ContentType="text/csv",
                                           Body=b"1,2,3,4"))
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ModelError"
            return None

    resp = wait_for(answered, 120, "the featurizer replaced", interval_s=0.2)
    assert output_of(resp["Body"].read()).tolist() == [2, 6, 10, 14]
    assert sklearn.restarts == 1 and sklearn.container_name != dead

    sm.delete_endpoint(EndpointName="pipe")
    wait_for_status_gone(sm, "pipe")
    assert owned_containers(docker_client, "pipe") == []


def wait_for_status_gone(sm: Any, name: str) -> None:
    wait_until(lambda: all(e["EndpointName"] != name for e in sm.list_endpoints()["Endpoints"]),
               120, f"{name} deleted", interval_s=0.2)


def test_direct_english_and_german_models_behind_one_endpoint(emulator, models) -> None:
    """The issue's example: a scikit-learn container and a Triton container, picked by name."""
    sm, rt = sagemaker_client(emulator.url), runtime_client(emulator.url)
    deploy(sm, "mce", [featurizer(models, "englishModel"), triton(models, "germanModel")],
           mode="Direct")
    resp = rt.invoke_endpoint(EndpointName="mce", TargetContainerHostname="englishModel",
                              ContentType="text/csv", Body=b"1,2,3,4")
    assert json.loads(resp["Body"].read()) == {"predictions": [[1.0, 3.0, 5.0, 7.0]]}
    body = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                   "data": [1, 2, 3, 4]}]})
    resp = rt.invoke_endpoint(EndpointName="mce", TargetContainerHostname="germanModel",
                              ContentType="application/json", Body=body)
    assert output_of(resp["Body"].read()).tolist() == [2, 4, 6, 8]
    with pytest.raises(ClientError) as excinfo:
        rt.invoke_endpoint(EndpointName="mce", ContentType="text/csv", Body=b"1,2,3,4")
    assert excinfo.value.response["Error"]["Code"] == "ValidationError"
    # Accept goes to the container: the scikit-learn server answers JSON only.
    with pytest.raises(ClientError) as excinfo:
        rt.invoke_endpoint(EndpointName="mce", TargetContainerHostname="englishModel",
                           ContentType="text/csv", Accept="text/csv", Body=b"1,2,3,4")
    assert "(406) from englishModel" in excinfo.value.response["Error"]["Message"]


@pytest.mark.startup_timeout(5)  # the deaf container is given up on after 5 s, not 30
def test_bad_images_and_a_container_that_never_answers_ping(emulator, models,
                                                            docker_client) -> None:  # noqa: F811
    sm = sagemaker_client(emulator.url)
    unknown = "123456789012.dkr.ecr.us-east-1.amazonaws.com/nobody-mapped-this:1"
    with pytest.raises(ClientError) as excinfo:
        sm.create_model(ModelName="nomap", ExecutionRoleArn=ROLE,
                        PrimaryContainer={"Image": unknown, "ModelDataUrl": models["featurizer"]})
    assert excinfo.value.response["Error"]["Code"] == "ValidationException"
    message = excinfo.value.response["Error"]["Message"]
    assert f"Requested image {unknown} not found" in message and "--image" in message
    assert sm.list_models()["Models"] == []

    # Listens on another port than the one SageMaker pings (8080 for a single container).
    deaf = {"Image": SKLEARN_IMAGE, "ModelDataUrl": models["featurizer"],
            "Environment": {"SAGEMAKER_BIND_TO_PORT": "9999"}}
    sm.create_model(ModelName="deaf", ExecutionRoleArn=ROLE, PrimaryContainer=deaf)
    sm.create_endpoint_config(EndpointConfigName="deaf", ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": "deaf", "InitialInstanceCount": 1,
         "InstanceType": "ml.m5.xlarge"}])
    sm.create_endpoint(EndpointName="deaf", EndpointConfigName="deaf")
    described = wait_for_status(sm, "deaf", ("Failed", "InService"))
    assert described["EndpointStatus"] == "Failed"
    assert "The primary container for production variant AllTraffic did not pass the ping " \
           "health check" in described["FailureReason"]
    assert "GET /ping" in described["FailureReason"]
    assert owned_containers(docker_client, "deaf") == []  # nothing left running


def test_sagemaker_python_sdk_pipeline_model(emulator, models) -> None:
    """``PipelineModel(models=[featurizer, model]).deploy()`` then ``Predictor.predict``."""
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    import boto3
    from sagemaker.deserializers import JSONDeserializer
    from sagemaker.model import Model
    from sagemaker.pipeline import PipelineModel
    from sagemaker.predictor import Predictor
    from sagemaker.serializers import CSVSerializer
    from sagemaker.session import Session

    boto_session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x",
                                 region_name="us-east-1")
    session = Session(boto_session=boto_session,
                      sagemaker_client=sagemaker_client(emulator.url),
                      sagemaker_runtime_client=runtime_client(emulator.url),
                      default_bucket="models")
    first = Model(image_uri=SKLEARN_IMAGE, model_data=models["featurizer"], role=ROLE,
                  env={"SKLEARN_METHOD": "transform", "SKLEARN_OUTPUT": "kserve",
                       "SKLEARN_KSERVE_INPUT": "X"}, sagemaker_session=session)
    second = Model(image_uri=TRITON_IMAGE, model_data=models["double"], role=ROLE,
                   env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "double"},
                   sagemaker_session=session)
    pipeline = PipelineModel(models=[first, second], role=ROLE, name="sdk-pipeline",
                             sagemaker_session=session)
    pipeline.deploy(initial_instance_count=1, instance_type="ml.m5.large",
                    endpoint_name="sdk-pipeline", wait=False)
    session.sagemaker_client.get_waiter("endpoint_in_service").wait(
        EndpointName="sdk-pipeline", WaiterConfig={"Delay": 1, "MaxAttempts": 180})
    described = session.sagemaker_client.describe_model(ModelName="sdk-pipeline")
    assert [c["Image"] for c in described["Containers"]] == [SKLEARN_IMAGE, TRITON_IMAGE]
    predictor = Predictor("sdk-pipeline", sagemaker_session=session,
                          serializer=CSVSerializer(), deserializer=JSONDeserializer())
    answer = predictor.predict([1, 2, 3, 4])
    assert answer["outputs"][0]["data"] == [2, 6, 10, 14]
    predictor.delete_endpoint()
