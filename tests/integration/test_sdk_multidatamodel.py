"""The SageMaker Python SDK v2's ``MultiDataModel`` against an emulator, as AWS's multi-model
notebooks drive it: deploy the prefix, add models to it while the endpoint serves (a local
file uploaded, an S3 object copied), list them, predict with ``target_model``, delete.

The SDK is unmodified and given no client: botocore's ``AWS_ENDPOINT_URL_<SERVICE>`` variables
send its SageMaker and runtime calls to the emulator and its S3 calls to moto's S3 server, the
store the emulator downloads from.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from tests.client_support import DUMMY_CREDENTIALS, S3
from tests.support import package, wait_until, write_scale_model

pytestmark = pytest.mark.slow

ROLE = "arn:aws:iam::123456789012:role/sagemaker"
# The notebooks' Triton image; the emulator serves every image on its Triton.
IMAGE = "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
REQUEST = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                       "data": [1.0, 2.0, 3.0, 4.0]}]}


@pytest.fixture
def session(start_emulator: Callable[..., EmulatorServer], s3_server: S3,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A SageMaker SDK Session built as a notebook builds one, on the emulator and moto."""
    server = start_emulator(s3_endpoint_url=s3_server.endpoint_url)
    for service in ("SAGEMAKER", "SAGEMAKER_RUNTIME"):
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", server.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    # The SDK's own switch for its "v2 is on the path of deprecation" warning (the suite turns
    # warnings into errors); set before the SDK is first imported.
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    sagemaker = pytest.importorskip("sagemaker")
    session = sagemaker.Session(boto_session=boto3.Session(**DUMMY_CREDENTIALS))
    # deploy() waits with the session's wait_for_endpoint, which sleeps 30 s between looks.
    session.wait_for_endpoint = functools.partial(session.wait_for_endpoint, poll=0.2)
    yield session


def _tarballs(root: Path) -> dict[str, Path]:
    return {name: package(write_scale_model(root / name, name, scale=scale),
                          root / "out" / f"{name}.tar.gz")
            for name, scale in (("double", 2.0), ("triple", 3.0))}


def test_a_multidatamodel_serves_the_models_added_after_its_deploy(session: Any, s3_server: S3,
                                                                    tmp_path: Path) -> None:
    from sagemaker.deserializers import JSONDeserializer
    from sagemaker.multidatamodel import MultiDataModel
    from sagemaker.predictor import Predictor
    from sagemaker.serializers import JSONSerializer

    bucket = s3_server.bucket("notebook-mme")
    tarballs = _tarballs(tmp_path)
    s3_server.client.upload_file(str(tarballs["triple"]), bucket, "trained/triple.tar.gz")
    model = MultiDataModel(name="triton-mme", model_data_prefix=f"s3://{bucket}/mme/",
                           image_uri=IMAGE, role=ROLE, sagemaker_session=session,
                           predictor_cls=Predictor)
    predictor = model.deploy(initial_instance_count=1, instance_type="ml.g4dn.xlarge",
                             endpoint_name="triton-mme", serializer=JSONSerializer(),
                             deserializer=JSONDeserializer())
    described = session.sagemaker_client.describe_endpoint(EndpointName="triton-mme")
    assert described["EndpointStatus"] == "InService"
    container = session.sagemaker_client.describe_model(ModelName="triton-mme")["PrimaryContainer"]
    assert container["Mode"] == "MultiModel"
    assert container["ModelDataUrl"] == f"s3://{bucket}/mme/"
    assert list(model.list_models()) == []  # nothing under the prefix yet: still InService

    # Models come to the endpoint by being written under its prefix, no update needed.
    model.add_model(model_data_source=str(tarballs["double"]), model_data_path="double.tar.gz")
    model.add_model(model_data_source=f"s3://{bucket}/trained/triple.tar.gz",
                    model_data_path="triple.tar.gz")
    assert sorted(model.list_models()) == ["double.tar.gz", "triple.tar.gz"]
    for target, scale in (("double.tar.gz", 2.0), ("triple.tar.gz", 3.0)):
        answer = predictor.predict(REQUEST, target_model=target)
        assert answer["outputs"][0]["data"] == [scale * x for x in (1.0, 2.0, 3.0, 4.0)]

    with pytest.raises(ClientError) as missing:
        predictor.predict(REQUEST, target_model="quadruple.tar.gz")
    error = missing.value.response["Error"]
    assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Code"] == "ValidationError"
    assert "Failed to download model data" in error["Message"]
    assert "quadruple.tar.gz" in error["Message"]

    predictor.delete_endpoint()  # the endpoint config too, as the notebooks clean up
    model.delete_model()
    sm = session.sagemaker_client
    wait_until(lambda: _gone(lambda: sm.describe_endpoint(EndpointName="triton-mme")), 30,
               "the endpoint deleted")
    assert _gone(lambda: sm.describe_endpoint_config(EndpointConfigName="triton-mme"))
    assert _gone(lambda: sm.describe_model(ModelName="triton-mme"))


def _gone(describe: Callable[[], Any]) -> bool:
    try:
        describe()
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ValidationException", exc.response
        assert "Could not find" in exc.response["Error"]["Message"]
        return True
    return False
