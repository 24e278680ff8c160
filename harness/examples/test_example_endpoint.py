"""An example test suite for a team's own models (copy it next to your tests).

Setup, once: a model (here the ``add`` model of ``harness/examples/add_model.py``), and where
the plugin finds it, in ``pytest.ini`` (or ``[tool.pytest.ini_options]`` in ``pyproject.toml``)::

    python -m harness.examples.add_model models/     # writes models/add/ (config.pbtxt, 1/model.py)

    [pytest]
    # A folder of .tar.gz (the same objects as under your S3 ModelDataUrl prefix), model folders
    # or model repositories, packaged on the fly: each NAME in it is the TargetModel NAME.tar.gz.
    mme_model_store = models/

Run it::

    pytest                                   # against the emulator (embedded Triton, CPU)
    pytest --mme-update-goldens              # record or refresh goldens/<module>/<name>.npz
    pytest --mme-launcher docker --mme-image nvcr.io/nvidia/tritonserver:24.09-py3
                                             # the same, with an official Triton image
    pytest --mme-target aws --mme-endpoint-name my-mme   # the same tests, real endpoint

The TargetModel names below are object names under the store: ``models/add/`` is served as
``add.tar.gz`` (``mme package models/add -o models/add.tar.gz`` would give the same object).
The golden test fails until its snapshot is recorded once with ``--mme-update-goldens``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

if TYPE_CHECKING:  # the fixtures' types, for a suite checked with mypy
    from harness.live_endpoint import MmeEndpoint
    from harness.pytest_plugin import AssertMatchesGolden, Invoke

TARGET = "add.tar.gz"
A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.full((2, 4), 0.5, dtype=np.float32)


def test_outputs_are_right(invoke: Invoke) -> None:
    outputs = invoke(TARGET, {"INPUT0": A, "INPUT1": B})
    np.testing.assert_allclose(outputs["OUTPUT1"], A - B)


@pytest.mark.parametrize("binary", [True, False], ids=["binary+json", "json"])
def test_outputs_match_the_golden(invoke: Invoke, assert_matches_golden: AssertMatchesGolden,
                                   binary: bool) -> None:
    outputs = invoke(TARGET, {"INPUT0": A, "INPUT1": B}, binary=binary)
    # One snapshot for both encodings: they must agree with each other, too.
    assert_matches_golden("add-2x4", outputs, rtol=1e-6, atol=1e-6)


def test_plain_boto3_works_too(sagemaker_runtime: Any, mme_endpoint: MmeEndpoint) -> None:
    body = (
        b'{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},'
        b'{"name":"INPUT1","shape":[1,4],"datatype":"FP32","data":[1,1,1,1]}]}'
    )
    response = sagemaker_runtime.invoke_endpoint(
        EndpointName=mme_endpoint.name,
        TargetModel=TARGET,
        ContentType="application/json",
        Body=body,
    )
    assert b"OUTPUT0" in response["Body"].read()


def test_a_missing_model_is_refused(sagemaker_runtime: Any, mme_endpoint: MmeEndpoint) -> None:
    with pytest.raises(ClientError) as error:
        sagemaker_runtime.invoke_endpoint(
            EndpointName=mme_endpoint.name,
            TargetModel="no-such-model.tar.gz",
            ContentType="application/json",
            Body=b"{}",
        )
    assert error.value.response["Error"]["Code"] == "ValidationError"
