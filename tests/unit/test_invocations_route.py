"""InvokeEndpoint's fast path answers exactly where FastAPI's route would, and nowhere else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from emulator.app import build_app
from emulator.settings import Settings


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(cache_dir=tmp_path, max_payload_bytes=1024)
    with TestClient(build_app(settings)) as test_client:  # no endpoint: no Triton needed
        yield test_client


def test_an_invocation_gets_sagemakers_answer(client: TestClient) -> None:
    resp = client.post("/endpoints/absent/invocations", content=b"{}")
    assert resp.status_code == 400
    assert resp.json() == {"Message": "Endpoint absent of account 123456789012 not found."}
    assert resp.headers["x-amzn-errortype"].startswith("ValidationError")
    assert resp.headers["x-amzn-requestid"]


def test_a_chunked_body_past_the_limit_is_refused_like_a_declared_one(
        client: TestClient) -> None:
    declared = client.post("/endpoints/absent/invocations", content=b"x" * 1025)
    chunked = client.post("/endpoints/absent/invocations",
                          content=iter([b"x" * 1000, b"x" * 25]))  # no Content-Length
    assert declared.status_code == chunked.status_code == 400
    assert "oversize body" in declared.json()["Message"]
    assert "oversize body" in chunked.json()["Message"]


def test_routing_still_decides_other_methods_and_paths(client: TestClient) -> None:
    assert client.get("/endpoints/absent/invocations").status_code == 405
    redirect = client.post("/endpoints/absent/invocations/", content=b"{}",
                           follow_redirects=False)
    assert redirect.status_code == 307
    assert redirect.headers["location"].endswith("/endpoints/absent/invocations")
    assert client.post("/endpoints/a/b/invocations", content=b"{}").status_code == 404
