"""The one routing step every serving group shares, before its own strategy: a call in an open
session goes to the member that holds it (``hosting.sessions``); with RoutingStrategy
PREFIX_AWARE, a call goes to its prefix's member (``hosting.prefix_routing``). Written once for
a variant's instances and an inference component's copies; the group's own choice
(``default``) serves every other call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from emulator.contract import runtime
from emulator.contract import sessions as session_wire
from emulator.contract.routing_config import PrefixAwareConfig
from emulator.hosting.instance import ContainerAnswer
from emulator.hosting.prefix_routing import PrefixAware
from emulator.hosting.sessions import SessionTable

# Why a member was chosen (the X-Mme-Routed-By header's value) for a call in a session.
SESSION = "SESSION"


class _Unit(Protocol):  # what both steps need of a member (an instance, a copy)
    @property
    def id(self) -> str: ...

    @property
    def in_flight(self) -> int: ...


U = TypeVar("U", bound=_Unit)


def choose(members: Sequence[U], request: runtime.InvokeRequest, sessions: SessionTable,
           prefix: PrefixAwareConfig | None, endpoint: str,
           default: Callable[[], U]) -> tuple[U, str | None]:
    """The member for the call and how it was chosen (None: by the group's own strategy)."""
    session_id = request.session_id
    if session_id is not None and session_id != session_wire.NEW_SESSION:
        return sessions.member_of(session_id, members, endpoint), SESSION
    if prefix is not None and len(members) > 1:
        return PrefixAware(prefix).choose(members, request.body, request.prefix_aware_id)
    return default(), None


@dataclass(frozen=True)
class SessionCall:
    """A call that names a session (SessionId), from its routing to its answer.

    For a Triton unit the emulator is the container's session manager [U: Triton's SageMaker
    server has none]: ``request`` is the call as the unit gets it, its ``session_id`` the
    session's own id (a new one for NEW_SESSION), which the model gets in the
    ``X-Amzn-SageMaker-Session-Id`` request header (forwarded to it as a request parameter,
    ``hosting.instance``); ``control`` is the documented session control body's
    ``requestType`` (NEW_SESSION or CLOSE), answered by the emulator (None: a call for the
    model). A SageMaker container (``by_container``) keeps its sessions itself, as AWS's
    container contract says: the call reaches it as sent, and its answer's session headers
    open or close the session.
    """

    request: runtime.InvokeRequest
    session_id: str
    new: bool
    control: str | None
    by_container: bool = False

    @classmethod
    def of(cls, request: runtime.InvokeRequest, endpoint: str,
           by_container: bool = False) -> SessionCall:
        assert request.session_id is not None
        control = session_wire.control_request(request.body)
        if request.session_id != session_wire.NEW_SESSION:
            return cls(request, request.session_id, False, None if by_container else control,
                       by_container)
        if control == session_wire.CLOSE:
            raise session_wire.close_without_session(endpoint)
        if by_container:
            return cls(request, session_wire.NEW_SESSION, True, None, True)
        session_id = SessionTable.new_id()
        return cls(dataclasses.replace(request, session_id=session_id), session_id, True,
                   control)

    def control_answer(self) -> ContainerAnswer:
        assert self.control is not None
        kind = session_wire.NEW_SESSION if self.new else self.control
        return ContainerAnswer(session_wire.control_answer(kind, self.session_id),
                               "application/json", self.request.custom_attributes, 0.0, True)

    def settle(self, sessions: SessionTable, unit_id: str,
               answer: ContainerAnswer) -> tuple[str | None, str | None]:
        """After the answer: the session opened (on ``unit_id``) or closed; the NewSessionId
        and ClosedSessionId header values (None: not this call's)."""
        if self.by_container:
            return self._settle_container(sessions, unit_id, answer)
        if self.new:
            session = sessions.open(self.session_id, unit_id)
            return session_wire.new_session_header(session.id, session.expires_at), None
        if self.control == session_wire.CLOSE:
            sessions.close(self.session_id)
            return None, self.session_id
        return None, None

    @staticmethod
    def _settle_container(sessions: SessionTable, unit_id: str,
                          answer: ContainerAnswer) -> tuple[str | None, str | None]:
        """What the container's answer says: the session it opened (with its own id and
        expiry), the one it closed; nothing when it said neither [U]."""
        new = closed = None
        opened = (session_wire.parse_new_session(answer.new_session)
                  if answer.new_session is not None else None)
        if opened is not None:
            session = sessions.open(opened[0], unit_id, expires_at=opened[1])
            new = session_wire.new_session_header(session.id, session.expires_at)
        if answer.closed_session is not None and session_wire.SESSION_ID.match(
                answer.closed_session):
            sessions.close(answer.closed_session)
            closed = answer.closed_session
        return new, closed
