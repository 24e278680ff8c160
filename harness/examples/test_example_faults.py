"""An example test module for a team's own client code: how it behaves when SageMaker
misbehaves (copy it next to your tests; the setup is ``test_example_endpoint.py``'s: the ``add``
model under ``models/`` and ``mme_model_store = models/`` in ``pytest.ini``).

Each test asks for a server emptied before it (``mme_clean_server``: one server per session,
reset in place) and puts fault rules in force with ``mme_faults``; the plugin removes them after
the test, pass or fail. docs/faults.md lists every fault; docs/testing.md, the fixtures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from harness.payloads import build_request, parse_response

INPUTS = {"INPUT0": np.array([[1, 2, 3, 4]], dtype=np.float32),
          "INPUT1": np.array([[4, 3, 2, 1]], dtype=np.float32)}


def add(runtime: Any, endpoint: str, attempts: int = 3) -> Any:
    """The code under test: a client that retries a throttled call (yours goes here)."""
    request = build_request(INPUTS)
    for attempt in range(attempts):
        try:
            answer = runtime.invoke_endpoint(EndpointName=endpoint, TargetModel="add.tar.gz",
                                             ContentType=request.content_type, Body=request.body)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ThrottlingException" or attempt == attempts - 1:
                raise
            continue
        return parse_response(answer["Body"].read(), answer["ContentType"])["OUTPUT0"]
    raise AssertionError("unreachable")


def test_a_throttled_call_is_retried_until_answered(mme_clean_server: Any, mme_endpoint: Any,
                                                    mme_faults: Any) -> None:
    rule = mme_faults.add({"error": "ThrottlingException"}, match={"target_model": "add.tar.gz"},
                          count=2)
    assert np.array_equal(add(mme_endpoint.client, mme_endpoint.name), [[5, 5, 5, 5]])
    assert mme_faults.fired(rule) == 2


def test_a_model_that_fails_to_load_is_reported_with_the_containers_words(
        mme_clean_server: Any, mme_endpoint: Any, mme_faults: Any) -> None:
    mme_faults.add({"load": {"fail": "CUDA driver version is insufficient"}},
                   match={"target_model": "add.tar.gz"})
    with pytest.raises(ClientError) as raised:
        add(mme_endpoint.client, mme_endpoint.name)
    error = raised.value.response
    assert error["Error"]["Code"] == "ModelError" and error["OriginalStatusCode"] == 400
    assert "CUDA driver version is insufficient" in error["OriginalMessage"]


def test_the_rules_of_the_last_test_are_gone(mme_clean_server: Any, mme_endpoint: Any,
                                             mme_faults: Any) -> None:
    assert mme_faults.rules() == []
    assert np.array_equal(add(mme_endpoint.client, mme_endpoint.name), [[5, 5, 5, 5]])
