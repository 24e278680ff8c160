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

    ``request`` is the call as its unit gets it: its ``session_id`` the session's own id (a new
    one for NEW_SESSION), which a Triton model gets in the ``X-Amzn-SageMaker-Session-Id``
    request header (forwarded to the model as a request parameter, ``hosting.instance``) [U].
    ``control`` is the documented session control body's ``requestType`` (NEW_SESSION or
    CLOSE), answered by the emulator as the container's session manager [U: Triton's SageMaker
    server has none]; None for a call for the model.
    """

    request: runtime.InvokeRequest
    session_id: str
    new: bool
    control: str | None

    @classmethod
    def of(cls, request: runtime.InvokeRequest, endpoint: str) -> SessionCall:
        assert request.session_id is not None
        control = session_wire.control_request(request.body)
        if request.session_id != session_wire.NEW_SESSION:
            return cls(request, request.session_id, False, control)
        if control == session_wire.CLOSE:
            raise session_wire.close_without_session(endpoint)
        session_id = SessionTable.new_id()
        return cls(dataclasses.replace(request, session_id=session_id), session_id, True,
                   control)

    def control_answer(self) -> ContainerAnswer:
        assert self.control is not None
        kind = session_wire.NEW_SESSION if self.new else self.control
        return ContainerAnswer(session_wire.control_answer(kind, self.session_id),
                               "application/json", self.request.custom_attributes, 0.0, True)

    def settle(self, sessions: SessionTable, unit_id: str) -> tuple[str | None, str | None]:
        """After the answer: the session opened (on ``unit_id``) or closed; the NewSessionId
        and ClosedSessionId header values (None: not this call's)."""
        if self.new:
            session = sessions.open(self.session_id, unit_id)
            return session_wire.new_session_header(session.id, session.expires_at), None
        if self.control == session_wire.CLOSE:
            sessions.close(self.session_id)
            return None, self.session_id
        return None, None
