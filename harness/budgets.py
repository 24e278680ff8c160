"""Latency and cold-load budgets of a pull request, against figures recorded on the base branch.

The pytest plugin times every InvokeEndpoint its clients make (``CallRecorder``, on botocore's
events: whatever the test calls, ``invoke`` or the boto3 client). Per TargetModel:

- ``p50_latency`` / ``p99_latency`` (ms): warm successful calls. The emulator's ModelLatency
  (its ``X-Mme-Model-Latency-Us`` header, SageMaker's ModelLatency metric: the model's own time,
  not the runner's network or Python) when present, else the client's round trip (a real
  endpoint); the baseline notes which, and only like is compared with like;
- ``cold_load`` (s): the client's time of the calls that loaded the model (cache miss), median.

``pytest --mme-record-baseline FILE`` on the base branch writes them; a pull request's
``pytest --mme-baseline FILE --mme-budget "p99_latency=+20%,cold_load=+30%"`` compares: a
figure over its base by more than its budget (``+N%``, or ``+Nms`` / ``+Ns``) is a breach.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.cloudwatch.statistics import percentile

BASELINE_FORMAT = 1
FIGURES = {"p50_latency": "ms", "p99_latency": "ms", "cold_load": "s"}
_BUDGET = re.compile(r"\+?(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>%|ms|s)")


class BudgetError(ValueError):
    """A --mme-budget or --mme-baseline that cannot be used; the message says what to fix."""


# -- measuring ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Call:
    model: str
    seconds: float  # the client's round trip
    ok: bool
    model_latency_us: float | None  # the emulator's ModelLatency header
    cache_hit: bool | None  # the emulator's X-Mme-Model-Cache-Hit header

    def to_json(self) -> list[Any]:
        return [self.model, self.seconds, self.ok, self.model_latency_us, self.cache_hit]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> Call:
        return cls(str(data[0]), float(data[1]), bool(data[2]),
                   None if data[3] is None else float(data[3]),
                   None if data[4] is None else bool(data[4]))


class CallRecorder:
    """Times a boto3 ``sagemaker-runtime`` client's InvokeEndpoint calls (``attach``)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._clients: set[int] = set()

    def attach(self, client: Any) -> None:
        if id(client) in self._clients:
            return
        self._clients.add(id(client))
        events = client.meta.events
        events.register("before-call.sagemaker-runtime.InvokeEndpoint", self._before)
        events.register("after-call.sagemaker-runtime.InvokeEndpoint", self._after)

    def _before(self, params: Mapping[str, Any], context: dict[str, Any],
                **_: Any) -> None:
        headers = {k.lower(): v for k, v in params.get("headers", {}).items()}
        context["mme_started"] = time.perf_counter()
        context["mme_target"] = headers.get("x-amzn-sagemaker-target-model")

    def _after(self, http_response: Any, context: dict[str, Any], **_: Any) -> None:
        started = context.get("mme_started")
        if started is None:
            return
        headers = {k.lower(): v for k, v in http_response.headers.items()}
        latency = headers.get("x-mme-model-latency-us")
        hit = headers.get("x-mme-model-cache-hit")
        self.calls.append(Call(
            model=str(context.get("mme_target") or "(no TargetModel)"),
            seconds=time.perf_counter() - started,
            ok=int(http_response.status_code) < 400,
            model_latency_us=float(latency) if latency and latency.isdigit() else None,
            cache_hit=None if hit is None else hit == "1"))

    def take(self) -> list[Call]:
        taken, self.calls = self.calls, []
        return taken


def figures(calls: Iterable[Call]) -> dict[str, dict[str, Any]]:
    """Per model: calls, the budgeted figures, and the latency's source."""
    by_model: dict[str, list[Call]] = {}
    for call in calls:
        by_model.setdefault(call.model, []).append(call)
    result = {}
    for model, model_calls in sorted(by_model.items()):
        ok = [c for c in model_calls if c.ok]
        warm = [c for c in ok if c.cache_hit is not False]
        cold = [c.seconds for c in ok if c.cache_hit is False]
        server = [c.model_latency_us for c in warm if c.model_latency_us is not None]
        if server and len(server) == len(warm):
            latencies, source = [us / 1000 for us in server], "ModelLatency"
        else:
            latencies, source = [c.seconds * 1000 for c in warm], "client"
        entry: dict[str, Any] = {"calls": len(model_calls), "errors": len(model_calls) - len(ok),
                                 "latency_source": source, "warm_calls": len(latencies)}
        if latencies:
            entry["p50_latency"] = round(percentile(latencies, 50), 4)
            entry["p99_latency"] = round(percentile(latencies, 99), 4)
        if cold:
            entry["cold_load"] = round(percentile(cold, 50), 4)
            entry["cold_loads"] = len(cold)
        result[model] = entry
    return result


# -- the baseline file ----------------------------------------------------------------------

def write_baseline(path: Path, measured: Mapping[str, Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": BASELINE_FORMAT, "units": FIGURES,
                                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                             time.gmtime()),
                                "models": measured}, indent=2) + "\n")


def read_baseline(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise BudgetError(f"--mme-baseline {path}: cannot read it ({exc.strerror}); record it "
                          "on the base branch with --mme-record-baseline FILE") from None
    except ValueError as exc:
        raise BudgetError(f"--mme-baseline {path}: not JSON ({exc}); record it with "
                          "--mme-record-baseline FILE") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or \
            not isinstance(data.get("models"), dict):
        raise BudgetError(f"--mme-baseline {path}: not a baseline of format {BASELINE_FORMAT} "
                          "(written by --mme-record-baseline)")
    return dict(data["models"])


# -- budgets --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Budget:
    figure: str
    amount: float
    unit: str  # % | ms | s

    def limit(self, base: float) -> float:
        """The largest value within budget, in the figure's own unit."""
        if self.unit == "%":
            return base * (1 + self.amount / 100)
        scale = {("ms", "ms"): 1.0, ("s", "ms"): 1000.0, ("ms", "s"): 0.001, ("s", "s"): 1.0}
        return base + self.amount * scale[(self.unit, FIGURES[self.figure])]

    def __str__(self) -> str:
        return f"+{self.amount:g}{self.unit}"


def parse_budgets(text: str) -> list[Budget]:
    budgets = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        figure, sep, amount = part.partition("=")
        figure = figure.strip()
        if not sep or figure not in FIGURES:
            raise BudgetError(f"--mme-budget {part!r}: give FIGURE=+N% (or +Nms, +Ns) with "
                              f"FIGURE one of {', '.join(FIGURES)}, e.g. "
                              "\"p99_latency=+20%,cold_load=+30%\"")
        match = _BUDGET.fullmatch(amount.strip())
        if match is None:
            raise BudgetError(f"--mme-budget {part!r}: the allowance must look like +20% or "
                              "+5ms or +2s (how much worse than the base branch is accepted)")
        budgets.append(Budget(figure, float(match["number"]), match["unit"]))
    if not budgets:
        raise BudgetError("--mme-budget is empty; e.g. \"p99_latency=+20%,cold_load=+30%\"")
    return budgets


@dataclass(frozen=True)
class Verdict:
    model: str
    figure: str
    unit: str
    base: float | None
    now: float | None
    budget: str
    limit: float | None
    verdict: str  # ok | breach | not measured | no baseline | not comparable

    @property
    def change_pct(self) -> float | None:
        if self.base is None or self.now is None or self.base == 0:
            return None
        return (self.now / self.base - 1) * 100

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "figure": self.figure, "unit": self.unit,
                "base": self.base, "now": self.now, "budget": self.budget, "limit": self.limit,
                "change_pct": None if self.change_pct is None else round(self.change_pct, 1),
                "verdict": self.verdict}


def compare(baseline: Mapping[str, Mapping[str, Any]], measured: Mapping[str, Mapping[str, Any]],
            budgets: Sequence[Budget]) -> dict[str, list[Verdict]]:
    """Per model of the baseline or of this run: a verdict per budget."""
    verdicts: dict[str, list[Verdict]] = {}
    for model in sorted(set(baseline) | set(measured)):
        base_entry, now_entry = baseline.get(model), measured.get(model)
        rows = []
        for budget in budgets:
            unit = FIGURES[budget.figure]
            base = _number(base_entry, budget.figure)
            now = _number(now_entry, budget.figure)
            if base_entry is None:
                verdict, limit = "no baseline", None
            elif now is None or now_entry is None:  # no entry: nothing measured
                verdict, limit = "not measured", None
            elif base is None:
                verdict, limit = "no baseline", None
            elif budget.figure.endswith("_latency") and base_entry.get("latency_source") != \
                    now_entry.get("latency_source"):
                verdict, limit = "not comparable", None
            else:
                limit = budget.limit(base)
                verdict = "breach" if now > limit else "ok"
            rows.append(Verdict(model, budget.figure, unit, base, now, str(budget),
                                None if limit is None else round(limit, 4), verdict))
        verdicts[model] = rows
    return verdicts


def _number(entry: Mapping[str, Any] | None, key: str) -> float | None:
    value = entry.get(key) if entry else None
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def side_by_side(model: str, rows: Sequence[Verdict]) -> str:
    """The failure message of a model's budget test: every figure, base and now."""
    lines = [f"budget of {model} against the base branch:",
             f"  {'figure':<12} {'base':>12} {'this run':>12} {'change':>9} {'budget':>8} "
             f"{'limit':>12}  verdict"]
    for r in rows:
        change = "" if r.change_pct is None else f"{r.change_pct:+.1f}%"
        lines.append(
            f"  {r.figure:<12} {_fmt(r.base, r.unit):>12} {_fmt(r.now, r.unit):>12} "
            f"{change:>9} {r.budget:>8} {_fmt(r.limit, r.unit):>12}  "
            f"{r.verdict.upper() if r.verdict == 'breach' else r.verdict}")
    return "\n".join(lines)


def _fmt(value: float | None, unit: str) -> str:
    return "–" if value is None else f"{value:.4g} {unit}"
