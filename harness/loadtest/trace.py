"""Traffic to replay: a recording of ``mme serve --record`` or SageMaker data-capture files.

Both are JSON Lines, one call a line; each line is read as one or the other by its keys:

- a recording line (``emulator/hosting/call_log.py``): ``time`` (arrival, epoch seconds),
  ``target_model`` / ``inference_component``, ``endpoint``, ``content_type``, ``body_bytes``,
  ``status``, ``latency_ms``, ``cache_hit``, and ``body`` (base64) when recorded with
  ``--record-bodies``;
- a data-capture record, as SageMaker writes them to ``DestinationS3Uri`` (Model Monitor's
  "captured data" format): ``captureData.endpointInput`` (``observedContentType``, ``mode``,
  ``data``, ``encoding``: ``BASE64``, ``CSV`` or ``JSON``) and ``endpointOutput``,
  ``eventMetadata`` (``eventId``, ``inferenceTime``, ``inferenceId`` when the caller gave one)
  and ``eventVersion``. [U] The multi-model endpoint's target model is read from
  ``eventMetadata.targetModel`` (also ``TargetModel``, ``target_model``); an inference
  component's from ``eventMetadata.inferenceComponentName`` the same way: AWS's pages show the
  record of a single-model endpoint only.

A source is a file, a folder (every ``*.jsonl`` under it, as data capture lays them out by
endpoint, variant and hour) or ``s3://bucket/prefix`` (every ``.jsonl`` object under it; boto3's
own configuration, ``AWS_ENDPOINT_URL_S3`` included, says where S3 is). Everything is read and
checked before anything is sent: a line that is not JSON (a file cut short), that is neither
kind, or that lacks what a replay needs stops the replay with ``TraceError`` naming the file and
the line. Calls are ordered by their time; offsets are from the first call.

[U] Data capture's ``inferenceTime`` is ISO 8601 and may carry whole seconds only: when no
record of a file has a fraction of a second, the calls stamped with one second are spread evenly
over it in file order (otherwise they would all replay in one burst).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class TraceError(ValueError):
    """A trace that cannot be replayed as it is; the message names the file and line."""


@dataclass(frozen=True)
class TraceCall:
    offset_s: float  # since the trace's first call
    target_model: str | None
    inference_component: str | None = None
    endpoint: str | None = None
    content_type: str | None = None
    body: bytes | None = None  # None: not in the trace (a synthetic one is sent)
    body_bytes: int | None = None
    # What the recording saw (None for data capture, which records neither).
    status: int | None = None
    latency_ms: float | None = None
    cache_hit: bool | None = None

    @property
    def key(self) -> str:
        """How the report names the call's model: TargetModel, else the component."""
        return self.target_model or self.inference_component or "(none)"


@dataclass
class Trace:
    calls: list[TraceCall]
    kind: str  # "recording", "data-capture" or "mixed"
    sources: list[str] = field(default_factory=list)

    @property
    def span_s(self) -> float:
        return self.calls[-1].offset_s if self.calls else 0.0

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for call in self.calls:
            counts[call.key] = counts.get(call.key, 0) + 1
        return dict(sorted(counts.items()))


_FRACTION = re.compile(r"\.(\d+)")
_TARGET_KEYS = ("targetModel", "TargetModel", "target_model")
_COMPONENT_KEYS = ("inferenceComponentName", "InferenceComponentName", "inference_component")


def _first(mapping: dict[str, Any], keys: Iterable[str]) -> Any:
    return next((mapping[k] for k in keys if mapping.get(k) is not None), None)


def _recording_call(line: dict[str, Any], where: str) -> tuple[float, TraceCall]:
    arrived = line.get("time")
    if not isinstance(arrived, (int, float)) or isinstance(arrived, bool):
        raise TraceError(f"{where}: a recording line needs \"time\" (seconds since the epoch), "
                         f"got {arrived!r}")
    target, component = line.get("target_model"), line.get("inference_component")
    for name, value in (("target_model", target), ("inference_component", component),
                        ("content_type", line.get("content_type"))):
        if value is not None and not isinstance(value, str):
            raise TraceError(f"{where}: \"{name}\" must be a string or null, got {value!r}")
    body = None
    if line.get("body") is not None:
        try:
            body = base64.b64decode(line["body"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise TraceError(f"{where}: \"body\" is not base64") from None
    latency = line.get("latency_ms")
    status = line.get("status")
    hit = line.get("cache_hit")
    return float(arrived), TraceCall(
        0.0, target, component, line.get("endpoint"), line.get("content_type"), body,
        line.get("body_bytes") if isinstance(line.get("body_bytes"), int) else None,
        status if isinstance(status, int) else None,
        float(latency) if isinstance(latency, (int, float)) else None,
        hit if isinstance(hit, bool) else None)


def _inference_time(text: Any, where: str) -> tuple[float, bool]:
    """(epoch seconds, whether it had a fraction of a second)."""
    if not isinstance(text, str):
        raise TraceError(f"{where}: eventMetadata.inferenceTime must be an ISO 8601 time "
                         f"(2024-05-01T12:00:00Z), got {text!r}")
    # Any number of fraction digits, as ISO 8601 allows (Python 3.10 reads 3 or 6 only).
    normal = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6],
                           text.strip().replace("Z", "+00:00"))
    try:
        parsed = datetime.datetime.fromisoformat(normal)
    except ValueError:
        raise TraceError(f"{where}: eventMetadata.inferenceTime {text!r} is not an ISO 8601 "
                         "time (2024-05-01T12:00:00Z)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)  # [U] no zone: UTC, as AWS's
    return parsed.timestamp(), parsed.microsecond != 0


def _capture_body(payload: Any, where: str) -> tuple[bytes | None, str | None]:
    """The request body and its content type from ``endpointInput`` (None: not captured)."""
    if payload is None:
        return None, None  # CaptureMode Output: the input was not captured
    if not isinstance(payload, dict):
        raise TraceError(f"{where}: captureData.endpointInput must be an object")
    data, encoding = payload.get("data"), str(payload.get("encoding", "")).upper()
    content_type = payload.get("observedContentType")
    if data is None:
        return None, content_type
    if not isinstance(data, str):
        raise TraceError(f"{where}: captureData.endpointInput.data must be a string")
    if encoding == "BASE64":
        try:
            return base64.b64decode(data, validate=True), content_type
        except (binascii.Error, ValueError):
            raise TraceError(f"{where}: captureData.endpointInput.data is not base64 "
                             "(encoding BASE64)") from None
    if encoding in ("CSV", "JSON"):
        return data.encode("utf-8"), content_type
    raise TraceError(f"{where}: captureData.endpointInput.encoding {encoding or None!r}: "
                     "expected BASE64, CSV or JSON")


def _capture_call(line: dict[str, Any], where: str) -> tuple[float, bool, TraceCall]:
    capture, meta = line.get("captureData"), line.get("eventMetadata")
    if not isinstance(capture, dict):
        raise TraceError(f"{where}: captureData must be an object")
    if not isinstance(meta, dict):
        raise TraceError(f"{where}: a data-capture record needs eventMetadata (eventId, "
                         "inferenceTime)")
    arrived, fractional = _inference_time(meta.get("inferenceTime"), where)
    body, content_type = _capture_body(capture.get("endpointInput"), where)
    target, component = _first(meta, _TARGET_KEYS), _first(meta, _COMPONENT_KEYS)
    return arrived, fractional, TraceCall(0.0, target, component, None, content_type, body,
                                          len(body) if body is not None else None)


def parse_lines(lines: Iterable[str], source: str
                ) -> tuple[list[tuple[float, TraceCall]], set[str]]:
    """A file's calls with their absolute times, and the kinds of line it had."""
    calls: list[tuple[float, TraceCall]] = []
    kinds: set[str] = set()
    whole_seconds: list[int] = []  # indexes into calls of data-capture records
    any_fraction = False
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        where = f"{source} line {number}"
        try:
            line = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not JSON ({exc.msg}); a file cut short ends in such a "
                             "line: remove it or copy the file again") from None
        if not isinstance(line, dict):
            raise TraceError(f"{where}: a line must be a JSON object, got "
                             f"{type(line).__name__}")
        if "captureData" in line or "eventMetadata" in line:
            arrived, fractional, call = _capture_call(line, where)
            any_fraction |= fractional
            whole_seconds.append(len(calls))
            kinds.add("data-capture")
        elif "time" in line and ("target_model" in line or "operation" in line):
            arrived, call = _recording_call(line, where)
            kinds.add("recording")
        else:
            raise TraceError(f"{where}: neither a recording line (time, target_model, ...) nor "
                             "a data-capture record (captureData, eventMetadata)")
        calls.append((arrived, call))
    if whole_seconds and not any_fraction:
        _spread_within_seconds(calls, whole_seconds)
    return calls, kinds


def _spread_within_seconds(calls: list[tuple[float, TraceCall]], indexes: list[int]) -> None:
    """Calls stamped with the same whole second spread evenly over it, in file order [U]."""
    by_second: dict[float, list[int]] = {}
    for index in indexes:
        by_second.setdefault(calls[index][0], []).append(index)
    for second, members in by_second.items():
        for rank, index in enumerate(members):
            calls[index] = (second + rank / len(members), calls[index][1])


def _local_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        if not files:
            raise TraceError(f"--trace {path}: a folder with no .jsonl file under it")
        return files
    if not path.exists():
        raise TraceError(f"--trace {path}: no such file or folder")
    return [path]


def _s3_texts(uri: str) -> Iterator[tuple[str, Iterable[str]]]:
    import boto3
    import botocore.exceptions

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise TraceError(f"--trace {uri}: expected s3://bucket/prefix")
    s3 = boto3.client("s3")
    keys: list[str] = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", []) if o["Key"].endswith(".jsonl")
                     or o["Key"] == prefix]
        if not keys:
            raise TraceError(f"--trace {uri}: no .jsonl object under that prefix")
        for key in sorted(keys):
            text = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")
            yield f"s3://{bucket}/{key}", text.splitlines()
    except botocore.exceptions.BotoCoreError as exc:
        raise TraceError(f"--trace {uri}: {exc}") from None
    except botocore.exceptions.ClientError as exc:
        raise TraceError(f"--trace {uri}: {exc.response['Error'].get('Code')}: "
                         f"{exc.response['Error'].get('Message')}") from None


def read_trace(sources: Iterable[str | Path]) -> Trace:
    """Every call of every source, ordered by time; ``TraceError`` for the first bad line."""
    timed: list[tuple[float, TraceCall]] = []
    kinds: set[str] = set()
    names: list[str] = []
    for source in sources:
        text_source = str(source)
        if text_source.startswith("s3://"):
            texts: Iterable[tuple[str, Iterable[str]]] = _s3_texts(text_source)
        else:
            texts = ((str(p), _read_local(p)) for p in _local_files(Path(text_source)))
        for name, lines in texts:
            calls, file_kinds = parse_lines(lines, name)
            timed += calls
            kinds |= file_kinds
            names.append(name)
    if not timed:
        raise TraceError(f"--trace {', '.join(map(str, names)) or '(none)'}: no calls in it")
    timed.sort(key=lambda pair: pair[0])
    first = timed[0][0]
    ordered = [TraceCall(arrived - first, *_fields(call)) for arrived, call in timed]
    kind = kinds.pop() if len(kinds) == 1 else "mixed"
    return Trace(ordered, kind, names)


def _read_local(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text (byte {exc.start}); a trace is JSON "
                         "Lines (a .gz file: gunzip it first)") from None
    except OSError as exc:
        raise TraceError(f"--trace {path}: {exc.strerror or exc}") from None


def _fields(call: TraceCall) -> tuple[Any, ...]:
    return (call.target_model, call.inference_component, call.endpoint, call.content_type,
            call.body, call.body_bytes, call.status, call.latency_ms, call.cache_hit)


def inter_arrivals(offsets: list[float]) -> list[float]:
    """The gaps between consecutive times, to the microsecond (a trace's resolution)."""
    ordered = sorted(offsets)
    return [round(b - a, 6) for a, b in zip(ordered, ordered[1:], strict=False)]


def ks_distance(a: list[float], b: list[float]) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between two empirical
    distribution functions (0: the same distribution, 1: no overlap)."""
    if not a or not b:
        return 1.0 if a or b else 0.0
    xs, ys = sorted(a), sorted(b)
    i = j = 0
    distance = 0.0
    while i < len(xs) and j < len(ys):
        value = min(xs[i], ys[j])
        while i < len(xs) and xs[i] <= value:
            i += 1
        while j < len(ys) and ys[j] <= value:
            j += 1
        distance = max(distance, abs(i / len(xs) - j / len(ys)))
    return distance
