"""One resource lifecycle for endpoints and inference components alike.

A control-plane operation answers at once and leaves the work to a background task (Creating ->
InService or Failed, Updating -> InService, Deleting -> gone). ``Lifecycle`` keeps one task per
resource name (case-insensitive, as SageMaker's names are), moves a record from state to state
unless something else overtook the task (a delete), brings resources back after a restart, and
cancels every task at shutdown. A transition rule (``transitions.py``, ``PUT
/_emulator/transitions``) that matches a task's resource and status holds the task first: it
takes that long, never ends, or ends Failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from emulator.transitions import FAILED, STATUSES, TransitionTable, held

DELETING = "Deleting"
_FAILURE_REASON_MAX = 1024


class LifecycleRecord(Protocol):
    """What a stored resource has that its lifecycle moves."""

    name: str
    status: str
    modified: float
    failure_reason: str | None


R = TypeVar("R", bound=LifecycleRecord)


class Resumed(NamedTuple):
    """What a restart does with one stored resource: the work that carries it on, and whether
    ``restore`` waits for it (a Create waiting for its endpoint, or a bake, is not waited for)."""

    work: Awaitable[None]
    waited: bool = True


def failure_reason(exc: BaseException) -> str:
    """A FailureReason from what failed, within SageMaker's 1024 characters."""
    text = str(exc).strip() or type(exc).__name__
    return text[:_FAILURE_REASON_MAX]


class Lifecycle(Generic[R]):
    """The background tasks of one kind of resource, and its state transitions.

    ``get`` and ``save`` read and write one record by name; ``clock`` stamps LastModifiedTime;
    ``transitions`` holds the tasks of ``resource`` (a kind of ``transitions.RESOURCES``) that
    its rules match.
    """

    def __init__(self, get: Callable[[str], R | None], save: Callable[[R], None],
                 clock: Callable[[], float], resource: str = "",
                 transitions: TransitionTable | None = None) -> None:
        self._get = get
        self._save = save
        self._clock = clock
        self._resource = resource
        self.transitions = transitions
        # One background task per resource at most (keyed by lowercased name).
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._holding: set[str] = set()  # names whose task a transition rule holds now

    def get(self, name: str) -> R | None:
        return self._get(name)

    def spawn(self, name: str, work: Awaitable[None]) -> asyncio.Task[None]:
        """Run ``work`` as the resource's task (a later spawn takes its place)."""
        key = name.lower()
        task = asyncio.ensure_future(self._governed(name, work))
        self.tasks[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self.tasks.get(key) is done:
                del self.tasks[key]

        task.add_done_callback(forget)
        return task

    def running(self, name: str) -> asyncio.Task[None] | None:
        """The resource's task, while it has one."""
        return self.tasks.get(name.lower())

    def held(self, name: str) -> bool:
        """Whether a transition rule holds the resource's task now (nothing of its work has
        run yet: a delete may cancel it)."""
        return name.lower() in self._holding

    def _governed(self, name: str, work: Awaitable[None]) -> Awaitable[None]:
        """``work`` behind the transition rule that matches the record's status, if any."""
        record = self._get(name) if self.transitions is not None else None
        if self.transitions is None or record is None or record.status not in STATUSES:
            return work
        rule = self.transitions.match(self._resource, record.name, record.status)
        if rule is None:
            return work
        status = record.status

        def fail(reason: str) -> None:
            current = self._get(name)
            if current is None or current.status != status:
                return  # something else moved it (a delete)
            current.status = FAILED
            current.modified = self._clock()
            current.failure_reason = reason
            self._save(current)

        return held(self.transitions, rule, work, fail, self._holding, name.lower())

    def transition(self, name: str, expected: tuple[str, ...] | None, status: str,
                   **changes: Any) -> None:
        """Move a record to ``status`` (with ``changes``) if it is in one of the ``expected``
        states (None: any); a record being deleted is never moved: the delete overtook the
        task that asks."""
        record = self._get(name)
        if record is None or (expected is not None and record.status not in expected):
            return
        if record.status == DELETING:
            return
        record.status = status
        record.modified = self._clock()
        for key, value in changes.items():
            setattr(record, key, value)
        self._save(record)

    async def restore(self, records: Iterable[R],
                      resume: Callable[[R], Resumed | None], wait: bool = True) -> None:
        """After a restart: each stored record's work (``resume``; None: nothing to do) runs as
        its task; ``wait`` waits for the tasks that ask to be waited for."""
        waited: list[asyncio.Task[None]] = []
        for record in records:
            resumed = resume(record)
            if resumed is None:
                continue
            task = self.spawn(record.name, resumed.work)
            if resumed.waited:
                waited.append(task)
        if wait:
            await asyncio.gather(*waited, return_exceptions=True)

    async def wait_idle(self) -> None:
        """Wait until no task is running (tests, shutdown)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks.values()), return_exceptions=True)

    async def aclose(self, *more: asyncio.Task[None]) -> None:
        """Cancel every task (and ``more``) and wait for them to end."""
        tasks = [*self.tasks.values(), *more]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
