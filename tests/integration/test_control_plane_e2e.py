"""The control plane driving real endpoint runtimes (embedded Triton) and moto's S3 over HTTP.

Covers what only the real runtime shows: invocations routed by EndpointName to endpoints the
control plane created, SingleModel endpoints, UpdateEndpoint without dropped requests, and
endpoints coming back InService after the emulator restarts on the same cache directory.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.support import output_of, package, scale_request, write_scale_model

pytestmark = pytest.mark.slow
FAST = {"Delay": 1, "MaxAttempts": 120}


def _mount(server: Any) -> str:
    """The composition root (emulator/app.py) mounts the control plane and restores at start."""
    return server.url


def _sm(url: str) -> Any:
    return boto3.client(
        "sagemaker",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )


def _deploy(sm: Any, name: str, model_data: str, mode: str = "MultiModel", **extra: Any) -> None:
    sm.create_model(
        ModelName=f"{name}-model",
        PrimaryContainer={"Image": "triton", "Mode": mode, "ModelDataUrl": model_data, **extra},
    )
    sm.create_endpoint_config(
        EndpointConfigName=f"{name}-config",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": f"{name}-model",
                "InstanceType": "ml.m5.xlarge",
                "InitialInstanceCount": 1,
            }
        ],
    )


def _invoke(rt: Any, endpoint: str, target: str | None = None) -> np.ndarray:
    kwargs = {"TargetModel": target} if target else {}
    response = rt.invoke_endpoint(
        EndpointName=endpoint,
        ContentType="application/json",
        Body=scale_request([1.0, 2.0, 3.0, 4.0]),
        **kwargs,
    )
    return output_of(response["Body"].read())


def test_endpoints_update_and_restart(start_emulator, s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bucket = s3_server.bucket("control-plane-e2e")
    for name, scale in (("x2", 2.0), ("x3", 3.0)):
        write_scale_model(tmp_path / name, "scale", scale=scale)
        tarball = package(tmp_path / name, tmp_path / "out" / f"{name}.tar.gz")
        s3_server.client.upload_file(str(tarball), bucket, f"mme/{name}.tar.gz")
    cache = tmp_path / "cache"
    server = start_emulator(s3_endpoint_url=s3_server.endpoint_url, cache_dir=cache)
    url = _mount(server)
    sm, rt = _sm(url), runtime_client(url)

    _deploy(sm, "mme", f"s3://{bucket}/mme/")
    _deploy(sm, "single", f"s3://{bucket}/mme/x3.tar.gz", mode="SingleModel")
    sm.create_endpoint(EndpointName="mme", EndpointConfigName="mme-config")
    sm.create_endpoint(EndpointName="single", EndpointConfigName="single-config")
    for name in ("mme", "single"):
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
    np.testing.assert_allclose(_invoke(rt, "mme", "x2.tar.gz"), [2, 4, 6, 8])
    np.testing.assert_allclose(_invoke(rt, "single"), [3, 6, 9, 12])
    with pytest.raises(ClientError) as excinfo:
        _invoke(rt, "single", "x2.tar.gz")
    assert excinfo.value.response["Error"]["Code"] == "ValidationError"

    # UpdateEndpoint while a client keeps invoking: not one request may fail.
    sm.create_endpoint_config(
        EndpointConfigName="mme-config-2",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": "mme-model",
                "InstanceType": "ml.m5.xlarge",
                "InitialInstanceCount": 2,
            }
        ],
    )
    failures: list[str] = []
    served = 0
    stop = threading.Event()

    def keep_invoking() -> None:
        nonlocal served
        client = runtime_client(url)
        while not stop.is_set():
            try:
                _invoke(client, "mme", "x2.tar.gz")
                served += 1
            except Exception as exc:  # noqa: BLE001 - every failure is a dropped request
                failures.append(repr(exc))

    worker = threading.Thread(target=keep_invoking)
    worker.start()
    try:
        sm.update_endpoint(EndpointName="mme", EndpointConfigName="mme-config-2")
        assert sm.describe_endpoint(EndpointName="mme")["EndpointStatus"] == "Updating"
        sm.get_waiter("endpoint_in_service").wait(EndpointName="mme", WaiterConfig=FAST)
        served_at_swap = served
        # Keep going until requests have reached the new runtime too.
        while served < served_at_swap + 3 and not failures:
            stop.wait(0.05)
    finally:
        stop.set()
        worker.join()
    assert failures == []
    assert served > 0
    described = sm.describe_endpoint(EndpointName="mme")
    assert described["EndpointConfigName"] == "mme-config-2"
    assert described["ProductionVariants"][0]["CurrentInstanceCount"] == 2

    # Restart on the same cache directory: both endpoints come back InService and serve.
    server.stop()
    server = start_emulator(s3_endpoint_url=s3_server.endpoint_url, cache_dir=cache)
    url = _mount(server)
    sm, rt = _sm(url), runtime_client(url)
    listed = sm.list_endpoints(SortBy="Name", SortOrder="Ascending")["Endpoints"]
    assert [(e["EndpointName"], e["EndpointStatus"]) for e in listed] == [
        ("mme", "InService"),
        ("single", "InService"),
    ]
    np.testing.assert_allclose(_invoke(rt, "mme", "x3.tar.gz"), [3, 6, 9, 12])
    np.testing.assert_allclose(_invoke(rt, "single"), [3, 6, 9, 12])

    sm.delete_endpoint(EndpointName="mme")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="mme", WaiterConfig=FAST)
    with pytest.raises(ClientError) as excinfo:
        _invoke(rt, "mme", "x2.tar.gz")
    assert excinfo.value.response["Error"]["Code"] == "ValidationError"
    assert not any(p.name.startswith("mme") for p in (cache / "endpoints").iterdir())
