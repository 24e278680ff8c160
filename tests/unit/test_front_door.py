"""The front door (``emulator/app.py``): every request is read once, authenticated once and told
to the live page once, on the ASGI path and on the server's direct path alike; the runtime's
paths with another method or a trailing slash are answered there, in the runtime's error shape."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from emulator.app import build_app
from emulator.auth import middleware, sigv4
from emulator.auth import requests as auth_requests
from emulator.contract import apis
from emulator.page.feed import Feed
from emulator.settings import Settings


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each request was identified, signature-checked and told to the page."""
    counts: Counter[str] = Counter()

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    identify = counting("identify", apis.identify)
    monkeypatch.setattr(apis, "identify", identify)
    monkeypatch.setattr(auth_requests, "identify", identify)  # IAM's own import of it
    monkeypatch.setattr(apis, "_runtime_request", counting("identify-runtime",
                                                           apis._runtime_request.__wrapped__))
    monkeypatch.setattr(middleware, "verify", counting("verify", sigv4.verify))
    monkeypatch.setattr(Feed, "invocation_failed", counting("fed", Feed.invocation_failed))
    return counts


def test_an_asgi_request_is_read_authenticated_and_fed_once(
        tmp_path: Path, counted: Counter[str]) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("[alice]\naws_access_key_id = AKIAALICE000000000\n"
                           "aws_secret_access_key = secret\n")
    (tmp_path / "policies").mkdir()
    settings = Settings(cache_dir=tmp_path / "cache", auth="sigv4", credentials=credentials,
                        policies=tmp_path / "policies")
    with TestClient(build_app(settings)) as client:
        refused = client.post("/endpoints/absent/invocations", content=b"{}")  # unsigned
        assert refused.status_code == 403
        assert counted == {"identify": 1, "identify-runtime": 1, "verify": 1, "fed": 1}
        counted.clear()
        assert client.post("/", headers={"X-Amz-Target": "SageMaker.ListModels"},
                           content=b"{}").status_code == 403
        assert counted == {"identify": 1, "verify": 1}
        counted.clear()
        assert client.post("/_emulator/nothing", content=b"{}").status_code == 403  # no API
        assert counted == {"identify": 1, "verify": 1}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(build_app(Settings(cache_dir=tmp_path))) as test_client:
        yield test_client


@pytest.mark.parametrize("operation", ["invocations", "invocations-response-stream",
                                       "async-invocations"])
def test_another_method_on_a_runtime_path_is_405_in_the_runtimes_shape(
        client: TestClient, operation: str) -> None:
    resp = client.get(f"/endpoints/absent/{operation}")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "POST"
    assert resp.headers["x-amzn-errortype"] == "UnknownOperationException"
    assert f"is POST /endpoints/absent/{operation}" in resp.json()["Message"]
    redirect = client.post(f"/endpoints/absent/{operation}/?x=1", follow_redirects=False)
    assert redirect.status_code == 307
    assert redirect.headers["location"].endswith(f"/endpoints/absent/{operation}?x=1")


def test_the_refused_operations_are_answered_by_the_table(client: TestClient) -> None:
    for operation in ("invocations-response-stream", "async-invocations"):
        resp = client.post(f"/endpoints/absent/{operation}", content=b"{}")
        assert resp.status_code == 400
        assert resp.json() == {"Message": "Endpoint absent of account 123456789012 not found."}


def test_a_direct_answer_is_read_and_fed_once(tmp_path: Path, counted: Counter[str]) -> None:
    from emulator.server import EmulatorServer

    settings = Settings(cache_dir=tmp_path, host="127.0.0.1", port=0)
    with EmulatorServer(settings) as server:
        through_asgi: list[object] = []
        front = server.app.front

        async def watched_front(*args: Any) -> None:
            through_asgi.append(args[0]["path"])
            assert front is not None
            await front(*args)

        server.app.front = watched_front
        with socket.create_connection((settings.host, settings.port), timeout=30) as sock:
            sock.sendall(b"POST /endpoints/gone/invocations HTTP/1.1\r\nHost: t\r\n"
                         b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 ")
        assert through_asgi == []  # answered without ASGI
        assert counted == {"identify": 1, "identify-runtime": 1, "fed": 1}
