"""Stateful sessions without Triton: SessionId's validation, the control bodies, a group's
session table (sticky member, expiry, a member gone), and a call's session bookkeeping
(``hosting.affinity.SessionCall``)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulator.contract import runtime, runtime_errors
from emulator.contract import sessions as wire
from emulator.hosting.affinity import SESSION, SessionCall, choose
from emulator.hosting.instance import ContainerAnswer, ErrorContext
from emulator.hosting.multi_container import ServeMember
from emulator.hosting.sessions import SessionTable

ANSWER = ContainerAnswer(b"{}", "application/json", None, 0.01, True)


@dataclass
class Unit:
    id: str
    in_flight: int = 0


def _request(session_id: str | None, body: bytes = b"{}") -> runtime.InvokeRequest:
    headers = {} if session_id is None else {wire.H_SESSION_ID: session_id}
    return runtime.parse_invoke("ep", headers, body, 1 << 20, "r-1")


def test_session_id_is_validated_as_botocores_model_says() -> None:
    assert _request("NEW_SESSION").session_id == "NEW_SESSION"
    assert _request("a1-b2").session_id == "a1-b2"
    for bad in ("-a", "a--", "a_b", "x" * 257):
        with pytest.raises(runtime_errors.ValidationError):
            _request(bad)
    with pytest.raises(runtime_errors.ValidationError, match="sessionId"):
        runtime.parse_invoke("ep", {wire.H_SESSION_ID: "NEW_SESSION"}, b"", 10, "r",
                             streaming=True)  # a stream cannot open a session


def test_control_bodies_are_the_documented_ones() -> None:
    assert wire.control_request(b'{"requestType": "NEW_SESSION"}') == wire.NEW_SESSION
    assert wire.control_request(b'{"requestType": "CLOSE"}') == wire.CLOSE
    assert wire.control_request(b'{"requestType": "OTHER"}') is None
    assert wire.control_request(b'{"inputs": []}') is None
    assert wire.control_request(b"requestType not json") is None
    assert wire.control_request(b'{"requestType": "CLOSE", "pad": "' + b"x" * 5000 + b'"}') \
        is None  # large bodies are never parsed for one


def test_a_session_stays_on_its_member_until_it_expires_or_the_member_goes() -> None:
    now = [1000.0]
    table = SessionTable(ttl_s=60, clock=lambda: now[0])
    units = [Unit("i-1"), Unit("i-2"), Unit("i-3")]
    table.open("s-1", "i-2")
    assert all(table.member_of("s-1", units, "ep") is units[1] for _ in range(100))
    now[0] += 61
    with pytest.raises(runtime_errors.ValidationError, match="Session s-1 is not an open"):
        table.member_of("s-1", units, "ep")
    table.open("s-2", "i-3")
    with pytest.raises(runtime_errors.ValidationError):
        table.member_of("s-2", units[:2], "ep")  # its member is gone
    assert "s-2" not in table
    table.open("s-3", "i-1")
    assert [s["SessionId"] for s in table.describe()] == ["s-3"]


def test_a_new_session_opens_on_the_member_that_answered_and_close_ends_it() -> None:
    table = SessionTable(ttl_s=1200)
    units = [Unit("i-1"), Unit("i-2")]
    call = SessionCall.of(_request("NEW_SESSION", b'{"inputs": []}'), "ep")
    assert call.new and call.control is None
    assert call.request.session_id == call.session_id != "NEW_SESSION"  # the model is told it
    new, closed = call.settle(table, "i-2", ANSWER)
    assert closed is None and new is not None
    assert re.fullmatch(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*;\sExpires=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
                        new)
    session_id = new.split(";")[0]
    request = _request(session_id)
    assert choose(units, request, table, None, "ep", lambda: units[0]) == (units[1], SESSION)
    close = SessionCall.of(_request(session_id, b'{"requestType": "CLOSE"}'), "ep")
    assert json.loads(close.control_answer().body) == {
        "result": f"Session {session_id} closed"}
    assert close.settle(table, "i-2", ANSWER) == (None, session_id)
    with pytest.raises(runtime_errors.ValidationError):
        choose(units, request, table, None, "ep", lambda: units[0])


def test_close_without_a_session_is_refused() -> None:
    with pytest.raises(runtime_errors.ValidationError, match="CLOSE request"):
        SessionCall.of(_request("NEW_SESSION", b'{"requestType": "CLOSE"}'), "ep")


def test_a_sagemaker_container_keeps_its_sessions_as_the_container_contract_says() -> None:
    """The call reaches the container as sent (no control body answered for it); the session
    it reports opening (its id, its expiry) is the one routed to, and the one it closes ends."""
    table = SessionTable()
    call = SessionCall.of(_request("NEW_SESSION", b'{"requestType": "NEW_SESSION"}'), "ep",
                          by_container=True)
    assert call.control is None and call.request.session_id == "NEW_SESSION"
    opened = ContainerAnswer(b"{}", "application/json", None, 0.01, True,
                             new_session="abc-123; Expires=2030-01-02T03:04:05Z")
    assert call.settle(table, "copy-2", opened) == (
        "abc-123; Expires=2030-01-02T03:04:05Z", None)
    assert table.describe() == [{"SessionId": "abc-123", "Instance": "copy-2",
                                 "Expires": "2030-01-02T03:04:05Z"}]
    nothing = SessionCall.of(_request("NEW_SESSION"), "ep", by_container=True)
    assert nothing.settle(SessionTable(), "copy-1", ANSWER) == (None, None)  # none opened
    close = SessionCall.of(_request("abc-123", b'{"requestType": "CLOSE"}'), "ep",
                           by_container=True)
    assert close.control is None
    closed = ContainerAnswer(b"{}", "application/json", None, 0.01, True,
                             closed_session="abc-123")
    assert close.settle(table, "copy-2", closed) == (None, "abc-123")
    assert "abc-123" not in table


def test_a_containers_session_headers_are_read_either_way() -> None:
    value = "s-1; Expires=2030-01-02T03:04:05Z"
    assert wire.container_new_session({wire.H_CONTAINER_SESSION_ID: value}) == value
    assert wire.container_new_session({wire.H_NEW_SESSION_ID: value}) == value
    assert wire.container_new_session({wire.H_CONTAINER_SESSION_ID: "s-1"}) is None
    assert wire.parse_new_session(value) == ("s-1", 1893553445.0)


class _Container:
    """A SageMaker container's invoke, recorded."""

    image = "img"
    http_url = "http://container"

    def __init__(self) -> None:
        self.session_ids: list[str | None] = []

    async def invoke(self, body: bytes, content_type: str | None, accept: str | None,
                     custom_attributes: str | None, timeout_s: float,
                     session_id: str | None = None) -> Any:
        from emulator.containers.sagemaker import ContainerResponse

        self.session_ids.append(session_id)
        return ContainerResponse(200, b"{}", "application/json", None,
                                 "s-9; Expires=2030-01-02T03:04:05Z", None)


def test_the_container_is_told_an_open_sessions_id_in_its_header() -> None:
    container = _Container()
    member = ServeMember("primary", container,  # type: ignore[arg-type]  # a stand-in
                         Path("/nowhere"),
                         ErrorContext("ep", "us-east-1", "123456789012"))
    answer = asyncio.run(member.call(_request("NEW_SESSION"), time.monotonic(), 5))
    assert answer.new_session == "s-9; Expires=2030-01-02T03:04:05Z"
    asyncio.run(member.call(_request("s-9"), time.monotonic(), 5))
    asyncio.run(member.call(_request(None), time.monotonic(), 5))
    assert container.session_ids == [None, "s-9", None]
