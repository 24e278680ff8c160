"""The APIs beside the runtime read a bounded body: over the bound is AWS's 413, unread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import botocore.session
import pytest
from botocore.parsers import create_parser
from fastapi.testclient import TestClient
from urllib3._collections import HTTPHeaderDict

from emulator.app import build_app
from emulator.routes.limits import MAX_API_BODY_BYTES
from emulator.settings import Settings

JSON_11 = {"Content-Type": "application/x-amz-json-1.1"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(build_app(Settings(cache_dir=tmp_path))) as test_client:
        yield test_client


def parsed(response, protocol: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    model = botocore.session.get_session().get_service_model("sagemaker")
    return create_parser(protocol).parse(  # type: ignore[no-any-return]
        {"status_code": response.status_code, "body": response.content,
         "headers": HTTPHeaderDict(dict(response.headers))},
        model.operation_model("ListModels").output_shape)


def test_a_declared_body_over_the_bound_is_refused_unread(client: TestClient) -> None:
    too_large = b" " * (MAX_API_BODY_BYTES + 1)
    answer = client.post("/", content=too_large,
                         headers={**JSON_11, "X-Amz-Target": "SageMaker.ListModels"})
    assert answer.status_code == 413
    error = parsed(answer, "json")["Error"]
    assert error["Code"] == "RequestEntityTooLargeException"
    assert "send a smaller request" in error["Message"]
    query = client.post("/", content=b"Action=ListMetrics&" + too_large,
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert query.status_code == 413 and b"<Code>RequestEntityTooLarge</Code>" in query.content


def test_a_chunked_body_is_cut_once_past_the_bound(client: TestClient) -> None:
    pieces = iter([b" " * (1 << 20)] * 9)  # no Content-Length: 9 MiB in pieces
    answer = client.post("/", content=pieces,
                         headers={**JSON_11, "X-Amz-Target": "SageMaker.ListModels"})
    assert answer.status_code == 413
    assert answer.json()["__type"] == "RequestEntityTooLargeException"


def test_requests_within_the_bound_are_answered(client: TestClient) -> None:
    answer = client.post("/", content=b"{}",
                         headers={**JSON_11, "X-Amz-Target": "SageMaker.ListModels"})
    assert answer.status_code == 200 and answer.json()["Models"] == []
    chunked = client.post("/", content=iter([b"{", b"}"]),
                          headers={**JSON_11, "X-Amz-Target": "SageMaker.ListModels"})
    assert chunked.status_code == 200
