"""What a pytest session tells the CI job: golden results and budget verdicts.

Under ``mme ci up`` (``$MME_STATE_DIR`` set) the plugin leaves one JSON file per session in the
state folder and ``mme ci down`` puts it in the job summary and the report; without it, on a
GitHub runner, the plugin appends the same Markdown to ``$GITHUB_STEP_SUMMARY`` itself.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# mme.ci.state.STATE_ENV and its former name (the harness does not import mme). The former is
# read without a warning: in a user's pytest session a warning may be made an error.
STATE_ENV, FORMER_STATE_ENV = "MME_STATE_DIR", "MME_CI_STATE"
VERDICT_MARK = {"ok": "✅ ok", "breach": "❌ breach", "no baseline": "new",
                "not measured": "not measured", "not comparable": "not comparable"}
GOLDEN_MARK = {"matched": "✅ matched", "recorded": "📝 recorded", "updated": "📝 updated",
               "mismatch": "❌ mismatch", "stale": "❌ stale", "error": "❌ error"}


def write_for_ci(document: Mapping[str, Any], env: Mapping[str, str] | None = None) -> str | None:
    """Hand the session's results on: to ``mme ci down`` or to the job summary; where to."""
    env = os.environ if env is None else env
    if not document.get("goldens") and not document.get("budgets"):
        return None
    state = env.get(STATE_ENV) or env.get(FORMER_STATE_ENV)
    if state and Path(state).is_dir():
        folder = Path(state) / "results"
        folder.mkdir(exist_ok=True)
        path = folder / f"pytest-{os.getpid()}-{time.time_ns()}.json"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(document, indent=2))
        tmp.replace(path)
        return str(path)
    if env.get("GITHUB_STEP_SUMMARY"):
        with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
            out.write("\n".join(results_markdown([document])) + "\n")
        return "$GITHUB_STEP_SUMMARY"
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def results_markdown(results: Sequence[Mapping[str, Any]]) -> list[str]:
    goldens = [g for r in results for g in r.get("goldens", [])]
    budgets = [b for r in results if r.get("budgets") for b in [r["budgets"]]]
    lines: list[str] = []
    if goldens:
        failed = sum(g["outcome"] in ("mismatch", "stale", "error") for g in goldens)
        lines += ["", f"### Goldens: {len(goldens) - failed} of {len(goldens)} pass", "",
                  "| model | golden | result | detail |", "|---|---|---|---|"]
        for g in goldens:
            detail = g.get("message", "")
            first = detail.splitlines()[1].strip() if detail.count("\n") else detail
            lines.append(f"| `{g['model']}` | {g['case']} | "
                         f"{GOLDEN_MARK.get(g['outcome'], g['outcome'])} | {_cell(first)} |")
    for b in budgets:
        rows = b.get("rows", [])
        breaches = sum(r["verdict"] == "breach" for r in rows)
        lines += ["", "### Budgets against the base branch: "
                  + (f"{breaches} breached" if breaches else "all within budget"), "",
                  f"Baseline `{b.get('baseline')}`, budget `{b.get('spec')}`.", "",
                  "| model | figure | base | this run | change | budget | verdict |",
                  "|---|---|--:|--:|--:|--:|---|"]
        for r in rows:
            change = "" if r.get("change_pct") is None else f"{r['change_pct']:+.1f}%"
            lines.append(
                f"| `{r['model']}` | {r['figure']} | {_value(r.get('base'), r['unit'])} "
                f"| {_value(r.get('now'), r['unit'])} | {change} | {r['budget']} "
                f"| {VERDICT_MARK.get(r['verdict'], r['verdict'])} |")
    return lines


def _value(value: float | None, unit: str) -> str:
    return "–" if value is None else f"{value:.4g} {unit}"
