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


# --- on the real server: the protocol writes the answer itself -----------------------------------

@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, int]]:
    from emulator.server import EmulatorServer

    with EmulatorServer(Settings(cache_dir=tmp_path, host="127.0.0.1", port=0)) as server:
        yield server.settings.host, server.settings.port


def _exchange(address: tuple[str, int], raw: bytes, answers: int) -> list[bytes]:
    """Send ``raw`` in one write; the ``answers`` responses read back (each with its body)."""
    import socket

    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(raw)
        data, found = b"", []
        while len(found) < answers:
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                head = data[:head_end].decode("latin-1").lower()
                length = int(head.split("content-length: ")[1].split("\r\n")[0])
                if len(data) >= head_end + 4 + length:
                    found.append(data[:head_end + 4 + length])
                    data = data[head_end + 4 + length:]
                    continue
            chunk = sock.recv(65536)
            assert chunk, f"the connection closed after {len(found)} answers: {data!r}"
            data += chunk
        if b"connection: close" in found[-1].lower():
            assert sock.recv(1) == b""  # and the server closed it
    return found


def _invocation(endpoint: str, extra: bytes = b"") -> bytes:
    return (b"POST /endpoints/%s/invocations HTTP/1.1\r\nHost: t\r\nContent-Type: "
            b"application/json\r\nContent-Length: 2\r\n%s\r\n{}" % (endpoint.encode(), extra))


def _headers(answer: bytes) -> dict[str, str]:
    lines = answer.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")[1:]
    return {k.lower(): v for k, v in (line.split(": ", 1) for line in lines)}


def test_the_server_answers_as_the_app_does(served: tuple[str, int],
                                            client: TestClient) -> None:
    [answer] = _exchange(served, _invocation("absent"), 1)
    expected = client.post("/endpoints/absent/invocations", content=b"{}")
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert answer.split(b"\r\n\r\n", 1)[1] == expected.content
    headers = _headers(answer)
    assert headers["x-amzn-errortype"] == expected.headers["x-amzn-errortype"]
    assert headers["content-type"] == expected.headers["content-type"]
    assert "date" in headers and headers["x-amzn-requestid"]


def test_pipelined_invocations_are_answered_in_order(served: tuple[str, int]) -> None:
    answers = _exchange(served, _invocation("first") + _invocation("second"), 2)
    assert [b"Endpoint first " in answers[0], b"Endpoint second " in answers[1]] == [True, True]


def test_connection_close_is_honoured(served: tuple[str, int]) -> None:
    [answer] = _exchange(served, _invocation("absent", b"Connection: close\r\n"), 1)
    assert _headers(answer)["connection"] == "close"


def test_a_failed_invocation_reaches_the_page(served: tuple[str, int]) -> None:
    import json
    import urllib.request

    _exchange(served, _invocation("gone"), 1)
    host, port = served
    with urllib.request.urlopen(f"http://{host}:{port}/_emulator/page/state") as resp:
        errors = json.loads(resp.read())["Errors"]
    assert [(e["endpoint"], e["status"], e["code"]) for e in errors][:1] == [
        ("gone", 400, "ValidationError")]


def test_an_answer_header_http_cannot_carry_is_never_half_written(tmp_path: Path) -> None:
    """As uvicorn's own send does: a control byte in a relayed header value (a container's
    custom attributes) ends the connection before any of the answer is written; the server
    goes on serving."""
    import socket

    from emulator.server import EmulatorServer

    async def relayed(_scope: object, _receive: object) -> tuple[int, list[tuple[bytes, bytes]],
                                                                 bytes]:
        return 200, [(b"x-amzn-sagemaker-custom-attributes", b"a\x01b"),
                     (b"content-length", b"2")], b"{}"

    settings = Settings(cache_dir=tmp_path, host="127.0.0.1", port=0)
    with EmulatorServer(settings) as server:
        answered = server.app.direct_invocations
        server.app.direct_invocations = relayed
        address = (settings.host, settings.port)
        with socket.create_connection(address, timeout=30) as sock:
            sock.sendall(_invocation("any"))
            assert sock.recv(65536) == b""  # closed, nothing written
        server.app.direct_invocations = answered
        [answer] = _exchange(address, _invocation("absent"), 1)
        assert answer.startswith(b"HTTP/1.1 400 ")


@pytest.fixture
def served_small(tmp_path: Path) -> Iterator[tuple[str, int]]:
    from emulator.server import EmulatorServer

    settings = Settings(cache_dir=tmp_path, host="127.0.0.1", port=0, max_payload_bytes=1024)
    with EmulatorServer(settings) as server:
        yield server.settings.host, server.settings.port


def test_an_invocation_waits_for_its_body_behind_100_continue(
        served_small: tuple[str, int]) -> None:
    import socket

    with socket.create_connection(served_small, timeout=30) as sock:
        sock.sendall(b"POST /endpoints/absent/invocations HTTP/1.1\r\nHost: t\r\n"
                     b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n")
        sock.sendall(b"{}")
        answer = b""
        while b"not found" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert b"HTTP/1.1 400 " in answer


def test_a_chunked_body_past_the_limit_is_refused_by_the_server_too(
        served_small: tuple[str, int]) -> None:
    def chunked(count: int) -> bytes:
        return (b"POST /endpoints/absent/invocations HTTP/1.1\r\nHost: t\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + b"".join(b"12c\r\n" + b"x" * 300 + b"\r\n" for _ in range(count))
                + b"0\r\n\r\n")

    [answer] = _exchange(served_small, chunked(4), 1)  # 1,200 bytes, the limit 1,024
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"oversize body" in answer
    [within] = _exchange(served_small, chunked(3), 1)  # 900 bytes: read whole, then answered
    assert b"Endpoint absent " in within
