"""Stateful sessions of a serving group (a production variant's instances, an inference
component's copies): which member holds each open session, until when.

AWS's outline ("Stateful sessions with Amazon SageMaker AI models"): a call with SessionId
NEW_SESSION opens a session on the member that serves it; every later call naming the session
goes to that member; the session ends when a call closes it or its time to live passes. The
group's ``route`` asks ``SessionTable.member_of`` first; ``Endpoint.invoke`` opens and closes
sessions around the member's answer (``hosting.endpoint``). A session dies with its member: a
call naming it afterwards gets ``contract.sessions.session_not_found`` [U].
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from emulator.contract import sessions as wire


class Member(Protocol):
    @property
    def id(self) -> str: ...


M = TypeVar("M", bound=Member)


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    member_id: str  # the instance or copy that holds it
    opened_at: float  # wall clock, seconds
    expires_at: float


class SessionTable:
    """Open sessions by id. ``clock`` is the wall clock (a test's own for expiry)."""

    def __init__(self, ttl_s: float = wire.SESSION_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._open: dict[str, Session] = {}

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._open

    def __len__(self) -> int:
        return len(self._open)

    @staticmethod
    def new_id() -> str:
        """A session id as botocore's pattern allows (letters, digits, single hyphens)."""
        return str(uuid.uuid4())

    def open(self, session_id: str, member_id: str,
             expires_at: float | None = None) -> Session:
        """Open a session on ``member_id``, until ``expires_at`` (None: the TTL from now)."""
        now = self._clock()
        session = self._open[session_id] = Session(
            session_id, member_id, now, now + self.ttl_s if expires_at is None else expires_at)
        return session

    def close(self, session_id: str) -> Session | None:
        return self._open.pop(session_id, None)

    def find(self, session_id: str) -> Session | None:
        """The open session of that id (an expired one is closed here: None)."""
        session = self._open.get(session_id)
        if session is not None and session.expires_at <= self._clock():
            del self._open[session_id]
            return None
        return session

    def member_of(self, session_id: str, members: Sequence[M], endpoint: str) -> M:
        """The member holding the session, or SageMaker's error when there is none (closed,
        expired, never opened, or its member gone or leaving: the session is closed then)."""
        session = self.find(session_id)
        if session is not None:
            for member in members:
                if member.id == session.member_id:
                    return member
            self.close(session_id)
        raise wire.session_not_found(session_id, endpoint)

    def forget_members_except(self, member_ids: set[str]) -> None:
        """Close the sessions of members no longer in the group."""
        for session in list(self._open.values()):
            if session.member_id not in member_ids:
                del self._open[session.id]

    def describe(self) -> list[dict[str, object]]:
        """The open sessions (expired ones closed first), oldest first."""
        now = self._clock()
        for session in [s for s in self._open.values() if s.expires_at <= now]:
            del self._open[session.id]
        return [{"SessionId": s.id, "Instance": s.member_id,
                 "Expires": wire.expires_text(s.expires_at)}
                for s in sorted(self._open.values(), key=lambda s: s.opened_at)]
