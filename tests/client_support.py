"""AWS clients for the tests: unmodified boto3 clients with dummy credentials, no retries.

Helpers live here rather than in ``conftest.py``: a conftest is for fixtures and hooks, and
importing from it imports it a second time under another name.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.compress import maybe_compress_request
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.parsers import create_parser
from botocore.serialize import create_serializer

DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing",
                     "region_name": "us-east-1"}


def runtime_client(url: str, **config: Any) -> Any:
    """An unmodified boto3 sagemaker-runtime client; no retries so errors surface as sent."""
    return boto3.client(
        "sagemaker-runtime", endpoint_url=url, **DUMMY_CREDENTIALS,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=120,
                      **config),
    )


def validation_error(call: Any, **params: Any) -> str:
    """The message of the ValidationException ``call(**params)`` is refused with."""
    with pytest.raises(ClientError) as raised:
        call(**params)
    assert raised.value.response["Error"]["Code"] == "ValidationException", raised.value.response
    message: str = raised.value.response["Error"]["Message"]
    return message


def create_mme_endpoint(sm: Any, name: str, model_data_url: str, instance_type: str,
                        waiter: dict[str, Any] | None = None, **container: Any) -> None:
    """Model, endpoint config and endpoint ``name``: one ``instance_type`` instance serving the
    multi-model container of ``model_data_url`` (with ``container``'s other fields), InService."""
    sm.create_model(ModelName=name, PrimaryContainer={
        "Image": "triton", "Mode": "MultiModel", "ModelDataUrl": model_data_url, **container})
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": name, "InstanceType": instance_type,
        "InitialInstanceCount": 1}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName=name, WaiterConfig=waiter or {"Delay": 1, "MaxAttempts": 120})


def create_generation_configs(sm: Any, stores: dict[str, Path], role: str) -> None:
    """For each store NAME: model ``m-NAME``, the multi-model container of the store's folder,
    and endpoint config ``NAME``, one ml.m5.xlarge instance of it (the generations a guarded
    deployment moves between)."""
    for name, store in stores.items():
        sm.create_model(ModelName=f"m-{name}", ExecutionRoleArn=role, PrimaryContainer={
            "Image": "triton", "Mode": "MultiModel", "ModelDataUrl": store.as_uri() + "/"})
        sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": f"m-{name}",
            "InstanceType": "ml.m5.xlarge", "InitialInstanceCount": 1}])


def put_target_tracking(asg: Any, key: dict[str, str], policy: str, target: float,
                        metric_type: str) -> None:
    """Target tracking policy ``policy`` of scalable target ``key``: the predefined
    ``metric_type`` kept at ``target``."""
    asg.put_scaling_policy(**key, PolicyName=policy, PolicyType="TargetTrackingScaling",
                           TargetTrackingScalingPolicyConfiguration={
                               "TargetValue": target, "PredefinedMetricSpecification": {
                                   "PredefinedMetricType": metric_type}})


class CallLoop:
    """Calls through one sagemaker-runtime client in a thread until ``stop()``, ``pause_s``
    apart (0: back to back): a subclass makes one call (and keeps what it needs of it) in
    ``call``."""

    stop_timeout_s = 30.0
    pause_s = 0.0

    def __init__(self, url: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(runtime_client(url),),
                                        daemon=True)
        self._thread.start()

    def _run(self, rt: Any) -> None:
        while not self._stop.is_set():
            self.call(rt)
            if self.pause_s:
                self._stop.wait(self.pause_s)

    def call(self, rt: Any) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.stop_timeout_s)


_SHARED: dict[tuple[str, str, str], Any] = {}
_SHARED_LOCK = threading.Lock()


def shared_client(service: str, url: str, **config: Any) -> Any:
    """One boto3 client per service, URL and configuration in this process, made on first use
    (botocore builds a client's class anew each time: milliseconds of CPU, which a wait that
    made a client on each of its polls paid fifty times a second). boto3 clients are
    thread-safe; register no event handler on a shared one. Without ``retries``, none."""
    config.setdefault("retries", {"max_attempts": 1})
    key = (service, url, repr(sorted(config.items())))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = boto3.client(service, endpoint_url=url, **DUMMY_CREDENTIALS,
                                        config=Config(**config))
        return _SHARED[key]


def shared_runtime_client(url: str) -> Any:
    """``runtime_client(url)``, made once per URL in this process (``shared_client``)."""
    return shared_client("sagemaker-runtime", url,
                         retries={"max_attempts": 1, "mode": "standard"}, read_timeout=120)


@dataclass
class S3:
    """The moto S3 server the ``s3_server`` fixture runs, and a client bound to it."""

    endpoint_url: str
    client: Any

    def bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return name


def cloudwatch_call(url: str, protocol: str, operation: str, params: dict[str, Any],
                    compress: bool = False) -> tuple[int, dict[str, Any]]:
    """One call serialized by botocore's code for ``protocol`` and, with ``compress``,
    compressed by botocore's own request compression; (status, parsed answer)."""
    model = botocore.session.get_session().get_service_model("cloudwatch")
    op = model.operation_model(operation)
    request = create_serializer(protocol).serialize_to_request(params, op)
    if protocol == "query":
        request["headers"]["Content-Type"] = "application/x-www-form-urlencoded"
    if compress:
        maybe_compress_request(Config(request_min_compression_size_bytes=1), request, op)
        assert request["headers"]["Content-Encoding"] == "gzip"
    body = request["body"]
    if isinstance(body, dict):
        body = urllib.parse.urlencode(body).encode()
    http = urllib.request.Request(url + request["url_path"], data=body, method="POST",
                                  headers={k: v.decode() if isinstance(v, bytes) else v
                                           for k, v in request["headers"].items()})
    try:
        with urllib.request.urlopen(http) as response:
            status, headers, content = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, headers, content = error.code, error.headers, error.read()
    return status, create_parser(protocol).parse(
        {"status_code": status, "headers": {k.lower(): v for k, v in headers.items()},
         "body": content}, op.output_shape)
