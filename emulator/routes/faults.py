"""HTTP binding of the fault rules (``emulator/faults``): a test's way to break calls on purpose.

- ``POST   /_emulator/faults``       a rule (JSON, docs/faults.md): 201 ``{"id": "fault-1"}``;
                                     a rule that could never match: 400 ``{"error": what to fix}``
- ``GET    /_emulator/faults``       ``{"faults": [...]}``: every rule as given, with its state
                                     (active, spent, expired) and how often it matched and fired
- ``DELETE /_emulator/faults/{id}``  one rule: 200 ``{"deleted": 1}``, 404 if there is none
- ``DELETE /_emulator/faults``       every rule: 200 ``{"deleted": N}``

With ``--auth sigv4`` they are the ``emulator:PutFaultRule``, ``emulator:ListFaultRules`` and
``emulator:DeleteFaultRules`` actions (docs/auth.md).
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from emulator.faults.rules import RuleError, parse_rule
from emulator.faults.table import FaultTable


def build_faults_router(faults: FaultTable) -> APIRouter:
    router = APIRouter()

    @router.post("/_emulator/faults")
    async def add(request: Request) -> JSONResponse:
        try:
            data = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as exc:
            return JSONResponse({"error": f"The body is not JSON ({exc}); send a fault rule: "
                                          '{"match": {...}, "fault": {...}}.'}, status_code=400)
        try:
            rule = parse_rule(data)
        except RuleError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse({"id": faults.add(rule)}, status_code=201)

    @router.get("/_emulator/faults")
    async def listed() -> dict[str, object]:
        return {"faults": faults.describe()}

    @router.delete("/_emulator/faults/{rule_id}")
    async def remove(rule_id: str) -> JSONResponse:
        if not faults.remove(rule_id):
            return JSONResponse({"error": f"There is no fault rule {rule_id}; GET "
                                          "/_emulator/faults lists them."}, status_code=404)
        return JSONResponse({"deleted": 1})

    @router.delete("/_emulator/faults")
    async def remove_all() -> JSONResponse:
        return JSONResponse({"deleted": faults.clear()})

    return router
