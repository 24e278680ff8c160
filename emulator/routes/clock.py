"""HTTP binding of the emulated clock (``emulator/clock.py``) and of the transition rules
(``emulator/control/transitions.py``): a test's way to have time pass and to shape transitions.

- ``POST   /_emulator/clock/advance``  ``{"seconds": N}``: the clock moves N emulated seconds on,
                                       every timer due meanwhile woken in order; 200
                                       ``{"now", "epoch", "advanced_s", "total_advanced_s"}``
                                       once they have run; bad input: 400 ``{"error": ...}``
- ``PUT    /_emulator/transitions``    a rule (JSON, docs/faults.md): 200 the rule as kept;
                                       a rule that could never apply: 400 ``{"error": ...}``
- ``GET    /_emulator/transitions``    ``{"transitions": [...]}``
- ``DELETE /_emulator/transitions``    every rule: 200 ``{"deleted": N}``

With ``--auth sigv4`` they are the ``emulator:AdvanceClock``, ``emulator:PutTransition``,
``emulator:ListTransitions`` and ``emulator:DeleteTransitions`` actions (docs/auth.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from emulator.clock import Clock, ClockError
from emulator.transitions import TransitionError, TransitionTable, parse_transition

T = TypeVar("T")


async def _parsed(request: Request, example: str, parse: Callable[[object], T],
                  refusal: type[Exception]) -> T | JSONResponse:
    """The body, JSON, as ``parse`` reads it; a 400 saying what to send where either refuses it
    (``parse`` by raising ``refusal``)."""
    try:
        data: object = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        return JSONResponse({"error": f"The body is not JSON ({exc}); send {example}."},
                            status_code=400)
    try:
        return parse(data)
    except refusal as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)


def advance_seconds(data: object) -> float:
    """The ``seconds`` of an advance's body; ``ClockError`` says what to fix."""
    if not isinstance(data, dict) or "seconds" not in data:
        raise ClockError('Send {"seconds": N}: the emulated seconds to advance (a number >= 0).')
    unknown = sorted(set(data) - {"seconds"})
    if unknown:
        raise ClockError(f"Unknown field(s) {', '.join(unknown)}; send only \"seconds\".")
    seconds = data["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ClockError(f'"seconds" is a number of emulated seconds >= 0; got {seconds!r}.')
    if not seconds >= 0 or seconds == float("inf"):
        raise ClockError(f'"seconds" is a finite number of emulated seconds >= 0; got '
                         f"{seconds!r}.")
    return float(seconds)


def build_clock_router(clock: Clock, transitions: TransitionTable) -> APIRouter:
    router = APIRouter()

    @router.post("/_emulator/clock/advance")
    async def advance(request: Request) -> JSONResponse:
        seconds = await _parsed(request, '{"seconds": 600}', advance_seconds, ClockError)
        if isinstance(seconds, JSONResponse):
            return seconds
        now = await clock.advance(seconds)
        return JSONResponse({
            "now": datetime.fromtimestamp(now, timezone.utc).isoformat().replace("+00:00", "Z"),
            "epoch": now, "advanced_s": seconds, "total_advanced_s": clock.advanced})

    @router.put("/_emulator/transitions")
    async def put(request: Request) -> JSONResponse:
        rule = await _parsed(request, 'a rule: {"resource": "endpoint", "name": "*", '
                                      '"status": "Creating", "duration_s": 30}',
                             parse_transition, TransitionError)
        if isinstance(rule, JSONResponse):
            return rule
        return JSONResponse(transitions.put(rule))

    @router.get("/_emulator/transitions")
    async def listed() -> dict[str, object]:
        return {"transitions": transitions.describe()}

    @router.delete("/_emulator/transitions")
    async def remove_all() -> JSONResponse:
        return JSONResponse({"deleted": transitions.clear()})

    return router
