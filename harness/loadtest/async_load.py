"""``mme loadtest --async``: load on an asynchronous endpoint, measured to the result in S3.

Each user calls InvokeEndpointAsync (boto3, retries off, the payload inline as ``Body``) as soon
as its previous call was accepted (after ``--think-time``), for the run's duration; a poller
looks for each accepted request's OutputLocation, then its FailureLocation, with HeadObject,
until one exists or ``--result-timeout`` has passed. The time to result is from the call to the
first look that finds the object (the poller goes round every request it waits for, so its
resolution is one round: a few milliseconds per request waiting). After the users stop, the
poller waits for what is still out. Reported: accepted, refused (by error code), answered,
failed, unfinished (no object by the timeout), the accept latency and the time to result (to
failure) percentiles, as Markdown and ``async-report.json``.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_INLINE_BODY = 128_000  # InvokeEndpointAsync's inline Body, bytes (botocore's model)
PERCENTILES = (50, 90, 99)


@dataclass
class _Pending:
    inference_id: str
    output: str
    failure: str | None
    sent: float  # time.monotonic() of the call


@dataclass
class AsyncRun:
    """What a run counted and measured (seconds)."""

    duration_s: float = 0.0
    accepted: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    answered: int = 0
    failed: int = 0
    unfinished: list[str] = field(default_factory=list)
    accept_s: list[float] = field(default_factory=list)
    result_s: list[float] = field(default_factory=list)
    failure_s: list[float] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)  # error code -> one message

    def summary(self) -> dict[str, Any]:
        return {
            "duration_s": round(self.duration_s, 3), "accepted": self.accepted,
            "refused": dict(self.refused), "answered": self.answered, "failed": self.failed,
            "unfinished": len(self.unfinished), "unfinished_ids": self.unfinished[:20],
            "accepted_per_minute": round(self.accepted / self.duration_s * 60, 1)
            if self.duration_s else 0.0,
            "accept_latency_ms": _percentiles(self.accept_s),
            "time_to_result_ms": _percentiles(self.result_s),
            "time_to_failure_ms": _percentiles(self.failure_s),
            "error_messages": self.messages,
        }


def _percentiles(values: list[float]) -> dict[str, float | None]:
    """Nearest-rank percentiles, milliseconds (None with no value)."""
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        out[f"p{p}"] = (round(ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)] * 1e3, 2)
                        if ordered else None)
    out["max"] = round(ordered[-1] * 1e3, 2) if ordered else None
    return out


def _split(url: str) -> tuple[str, str]:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key


def _exists(s3: Any, url: str) -> bool:
    from botocore.exceptions import ClientError

    bucket, key = _split(url)
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError:
        return False


def run_async_load(runtime: Any, s3: Any, endpoint_name: str, body: bytes, content_type: str,
                   users: int, duration_s: float, *, think_time_s: float = 0.0,
                   result_timeout_s: float = 300.0, poll_s: float = 0.02,
                   clock: Callable[[], float] = time.monotonic) -> AsyncRun:
    """``users`` threads submit for ``duration_s``; then what is still out is waited for, up
    to ``result_timeout_s`` after each request was sent."""
    from botocore.exceptions import BotoCoreError, ClientError

    if len(body) > MAX_INLINE_BODY:
        raise ValueError(f"the payload is {len(body)} bytes; InvokeEndpointAsync takes an "
                         f"inline Body of at most {MAX_INLINE_BODY}: give a smaller --body or "
                         "--inputs")
    run = AsyncRun()
    lock = threading.Lock()
    pending: list[_Pending] = []
    started = clock()
    stop_at = started + duration_s
    submitting = threading.Event()
    submitting.set()

    def user() -> None:
        while clock() < stop_at:
            sent = clock()
            try:
                answer = runtime.invoke_endpoint_async(
                    EndpointName=endpoint_name, Body=body, ContentType=content_type)
            except (ClientError, BotoCoreError) as exc:
                code = (exc.response.get("Error", {}).get("Code", "ClientError")
                        if isinstance(exc, ClientError) else type(exc).__name__)
                with lock:
                    run.refused[code] += 1
                    run.messages.setdefault(code, str(exc)[:300])
                time.sleep(max(think_time_s, 0.05))  # a refusal is not a reason to spin
                continue
            with lock:
                run.accepted += 1
                run.accept_s.append(clock() - sent)
                pending.append(_Pending(answer["InferenceId"], answer["OutputLocation"],
                                        answer.get("FailureLocation"), sent))
            if think_time_s:
                time.sleep(think_time_s)

    def poller() -> None:
        while True:
            with lock:
                waiting = list(pending)
            if not waiting and not submitting.is_set():
                return
            for item in waiting:
                found_ok = _exists(s3, item.output)
                found_failure = not found_ok and item.failure is not None and \
                    _exists(s3, item.failure)
                now = clock()
                with lock:
                    if found_ok:
                        run.answered += 1
                        run.result_s.append(now - item.sent)
                    elif found_failure:
                        run.failed += 1
                        run.failure_s.append(now - item.sent)
                    elif now - item.sent > result_timeout_s:
                        run.unfinished.append(item.inference_id)
                    else:
                        continue
                    pending.remove(item)
            time.sleep(poll_s)

    threads = [threading.Thread(target=user, name=f"async-user-{i}", daemon=True)
               for i in range(users)]
    watcher = threading.Thread(target=poller, name="async-results", daemon=True)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.duration_s = clock() - started
    submitting.clear()
    watcher.join()
    return run


def to_markdown(summary: dict[str, Any], endpoint_name: str) -> str:
    def row(label: str, figures: dict[str, Any]) -> str:
        cells = " | ".join("–" if figures[k] is None else f"{figures[k]:.1f}"
                           for k in ("p50", "p90", "p99", "max"))
        return f"| {label} | {cells} |"

    refused = ", ".join(f"{code} {n}" for code, n in summary["refused"].items()) or "none"
    lines = [
        f"## Asynchronous load on {endpoint_name}", "",
        f"{summary['accepted']} accepted in {summary['duration_s']:.1f} s "
        f"({summary['accepted_per_minute']}/min); refused: {refused}", "",
        f"answered {summary['answered']}, failed {summary['failed']}, "
        f"unfinished {summary['unfinished']}", "",
        "| ms | p50 | p90 | p99 | max |", "|---|---|---|---|---|",
        row("accept (202)", summary["accept_latency_ms"]),
        row("time to result in S3", summary["time_to_result_ms"]),
        row("time to failure in S3", summary["time_to_failure_ms"]),
    ]
    return "\n".join(lines)


def write_report(summary: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "async-report.json"
    path.write_text(json.dumps(summary, indent=1))
    return path
