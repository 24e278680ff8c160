"""Stateful sessions on the wire: the SessionId request member, the session control bodies and
the NewSessionId / ClosedSessionId response headers.

Sources: botocore's sagemaker-runtime model (SessionId: at most 256 characters, ``NEW_SESSION``
or an id matching ``^[a-zA-Z0-9](-*[a-zA-Z0-9])*$``; InvokeEndpointWithResponseStream takes
only an id; NewSessionId is ``<id>; Expires=YYYY-MM-DDThh:mm:ssZ``) and AWS's "Stateful
sessions with Amazon SageMaker AI models" guide (the client asks the container to open or close
a session in the body, ``{"requestType": "NEW_SESSION"}`` / ``{"requestType": "CLOSE"}``; the
container answers with ``X-Amzn-SageMaker-Session-Id: <id>; Expires=<time>`` or
``X-Amzn-SageMaker-Closed-Session-Id: <id>``). Choices AWS does not publish are marked [U];
docs/sessions-and-routing.md lists them.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from collections.abc import Mapping

from emulator.contract import runtime_errors
from emulator.contract.body import Body

H_SESSION_ID = "x-amzn-sagemaker-session-id"
H_NEW_SESSION_ID = "X-Amzn-SageMaker-New-Session-Id"
H_CLOSED_SESSION_ID = "X-Amzn-SageMaker-Closed-Session-Id"
# The header a container (and, here, a Triton model) is told the session in.
H_CONTAINER_SESSION_ID = "X-Amzn-SageMaker-Session-Id"
NEW_SESSION = "NEW_SESSION"
CLOSE = "CLOSE"
MAX_SESSION_ID = 256
SESSION_ID = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
SESSION_ID_PATTERN = r"^(NEW_SESSION)$|^[a-zA-Z0-9](-*[a-zA-Z0-9])*$"
STREAM_SESSION_ID_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$"
# [U] How long a session lives after it is opened: the container sets it on AWS; 1,200 s is the
# default of AWS's own container session managers (DJL LMI's ``sessions_expiration``, the
# model-hosting-container-standards SessionManager), which the emulator plays for Triton.
SESSION_TTL_S = 1200.0
NEW_SESSION_VALUE = re.compile(
    r"^(?P<id>[a-zA-Z0-9](-*[a-zA-Z0-9])*);\s*Expires=(?P<expires>[0-9]{4}-[0-9]{2}-[0-9]{2}T"
    r"[0-9]{2}:[0-9]{2}:[0-9]{2}Z)$")
# A session control body is a small JSON object; larger bodies are never parsed for one.
_CONTROL_BODY_MAX = 4096


def parse_session_id(headers: Mapping[str, str], streaming: bool = False) -> str | None:
    """SessionId as botocore's model constrains it (ValidationError otherwise)."""
    value = headers.get(H_SESSION_ID)
    if value is None:
        return None
    pattern = STREAM_SESSION_ID_PATTERN if streaming else SESSION_ID_PATTERN
    if len(value) > MAX_SESSION_ID:
        raise runtime_errors.header_too_long(H_SESSION_ID, "sessionId", MAX_SESSION_ID)
    if not (SESSION_ID.match(value) or (value == NEW_SESSION and not streaming)):
        raise runtime_errors.ValidationError(
            f"1 validation error detected: Value '{value}' at 'sessionId' failed to satisfy "
            f"constraint: Member must satisfy regular expression pattern: {pattern}")
    return value


def control_request(body: bytes | Body) -> str | None:
    """``NEW_SESSION`` or ``CLOSE`` when the body is the documented session control body
    (a JSON object whose ``requestType`` says so), else None. Only small bodies are read."""
    if len(body) > _CONTROL_BODY_MAX:
        return None
    raw = bytes(body)
    if b"requestType" not in raw:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    kind = doc.get("requestType") if isinstance(doc, dict) else None
    return kind if kind in (NEW_SESSION, CLOSE) else None


def expires_text(expires_at: float) -> str:
    """``YYYY-MM-DDThh:mm:ssZ`` (UTC), as NewSessionId carries it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))


def container_new_session(headers: Mapping[str, str]) -> str | None:
    """The session a SageMaker container says it opened: ``<id>; Expires=<time>`` in
    X-Amzn-SageMaker-Session-Id (AWS's guide) or X-Amzn-SageMaker-New-Session-Id (what some
    containers send, vLLM's among them) [U: both read]."""
    for name in (H_CONTAINER_SESSION_ID, H_NEW_SESSION_ID):
        value = headers.get(name)
        if value is not None and NEW_SESSION_VALUE.match(value.strip()):
            return value.strip()
    return None


def parse_new_session(value: str) -> tuple[str, float] | None:
    """A container's ``<id>; Expires=<time>`` as (id, expiry in epoch seconds); None if not."""
    match = NEW_SESSION_VALUE.match(value)
    if match is None:
        return None
    expires = calendar.timegm(time.strptime(match.group("expires"), "%Y-%m-%dT%H:%M:%SZ"))
    return match.group("id"), float(expires)


def new_session_header(session_id: str, expires_at: float) -> str:
    return f"{session_id}; Expires={expires_text(expires_at)}"


def control_answer(kind: str, session_id: str) -> bytes:
    """[U] The body answered to a session control body (the emulator answers it for a Triton
    model, as AWS's container session managers do): what DJL LMI answers."""
    verb = "created" if kind == NEW_SESSION else "closed"
    return json.dumps({"result": f"Session {session_id} {verb}"}).encode()


def session_not_found(session_id: str, endpoint: str) -> runtime_errors.ValidationError:
    """[U] A call naming a session the endpoint does not have: closed, expired, never opened,
    or its instance (or copy) gone. AWS does not publish the answer; a ValidationError (the
    front end routes by session before any container sees the call) that says what to do."""
    return runtime_errors.ValidationError(
        f"Session {session_id} is not an open session of endpoint {endpoint}: it was closed, "
        "it expired, or the instance that held it is gone. Start a new session with "
        "SessionId NEW_SESSION.")


def close_without_session(endpoint: str) -> runtime_errors.ValidationError:
    """[U] A ``{"requestType": "CLOSE"}`` body with SessionId NEW_SESSION (nothing to close)."""
    return runtime_errors.ValidationError(
        f"A CLOSE request to endpoint {endpoint} must name the session to close in SessionId "
        "(it names NEW_SESSION).")
