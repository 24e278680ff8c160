"""``mme serve --record FILE``: every runtime call as one JSON line, written off the hot path.

A call's line is taken where the call is counted once (``hosting.call_record.CallRecord``): as
it ends, the record hands the call log a tuple (no formatting, no I/O); every
``FLUSH_INTERVAL_S`` a background task turns what gathered into JSON lines on the event loop, a
chunk at a time, and writes them from a worker thread; once more as the server stops
(``close``), so the file holds every call that ended.

A line (keys always present; ``body`` only with ``--record-bodies``)::

    {"time": 1764350000.123456,        # arrival, seconds since the epoch (UTC)
     "operation": "InvokeEndpoint",    # or InvokeEndpointWithResponseStream
     "endpoint": "local", "target_model": "a.tar.gz", "inference_component": null,
     "target_variant": null, "variant": "AllTraffic", "unit": "i-1",
     "content_type": "application/json", "accept": null, "body_bytes": 123,
     "status": 200, "error": null,     # the status the client got; the error's code
     "latency_ms": 1.234, "model_latency_ms": 0.9, "cache_hit": true,
     "request_id": "…", "body": "base64…"}

``model_latency_ms`` and ``cache_hit`` are null where the call has none (an error before the
model answered; a component's copy has no model cache). A streamed call's status is derived
from the counts it adds: 200, or the error's status, or 200 with ``error``
``ModelStreamError`` when the stream broke after its first byte [U].
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from emulator.background import cancel_and_wait
from emulator.contract.runtime import InvokeRequest

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.2  # [U] how stale the file may be while the server runs
MAX_NAMED = 4096  # sets of names whose part of a line is kept
FORMAT_CHUNK = 64  # lines formatted between two turns of the event loop (~0.3 ms)

# One ended call, as the hot path leaves it: (arrival epoch s, operation, request, variant,
# unit, status, error code, latency s, model latency s or None, cache hit or None).
Entry = tuple[float, str, InvokeRequest, str | None, str | None, int, str | None, float,
              float | None, bool | None]


_FLAGS = {True: "true", False: "false", None: "null"}
_escaped = json.encoder.encode_basestring  # C: a JSON string literal, quotes included


def _text(value: str | None) -> str:
    return "null" if value is None else _escaped(value)


class RecordFileError(Exception):
    """The recording file cannot be written: the message names it and why."""


class CallLog:
    """Where ended calls go: gathered in memory, written as JSON lines by ``run``'s task."""

    def __init__(self, path: Path, with_bodies: bool = False,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.with_bodies = with_bodies
        self.clock = clock  # arrival times: seconds since the epoch
        self._pending: list[Entry] = []
        self._named: dict[tuple[str | None, ...], str] = {}  # see ``_line``
        self._file: IO[str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[None] | None = None  # the batch a thread is writing
        self.written = 0  # lines written so far

    def add(self, entry: Entry) -> None:
        """One ended call (the hot path: an append, nothing else)."""
        self._pending.append(entry)

    def open(self) -> None:
        """Create (or empty) the file; ``RecordFileError`` naming it when that fails."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", encoding="utf-8", buffering=1 << 20)
        except OSError as exc:
            raise RecordFileError(f"--record {self.path}: cannot write the recording there "
                                  f"({exc.strerror or exc}); give a file in a folder you can "
                                  "write to") from None

    def start(self) -> None:
        """Open the file and start the task that writes what gathers."""
        if self._file is None:
            self.open()
        self._task = asyncio.create_task(self._flush_forever(), name="call-log")
        log.info("recording every runtime call to %s%s", self.path,
                 " (with bodies)" if self.with_bodies else "")

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            await self.flush()

    async def flush(self) -> None:
        """Write what has gathered. The lines are formatted here, on the event loop, a chunk
        at a time between calls; only the file's I/O goes to a worker thread. (Formatting in
        the thread made it compete with the loop for the interpreter lock: every call then
        waited out the thread's switch interval, a cost many times the formatting's own.)"""
        if not self._pending or self._file is None:
            return
        if self._writing is not None:  # one write at a time: the lines stay whole
            await asyncio.shield(self._writing)
        batch, self._pending = self._pending, []
        chunks: list[str] = []
        for start in range(0, len(batch), FORMAT_CHUNK):
            if start:
                await asyncio.sleep(0)  # the calls waiting on the loop go first
            chunks.append("".join(map(self._line, batch[start:start + FORMAT_CHUNK])))
        self._writing = asyncio.ensure_future(
            asyncio.to_thread(self._write, "".join(chunks), len(batch)))
        try:
            await asyncio.shield(self._writing)  # a cancelled flush lets its write finish
        finally:
            if self._writing.done():
                self._writing = None

    def _write(self, lines: str, count: int) -> None:
        assert self._file is not None
        try:
            self._file.write(lines)
            self._file.flush()
        except OSError as exc:  # a full disk: the server goes on, the log says what was lost
            log.error("--record %s: %d calls not written (%s)", self.path, count, exc)
            return
        self.written += count

    def _line(self, entry: Entry) -> str:
        """The entry's JSON line, formatted directly (json.dumps of a dict costs three times
        as much; strings go through the json module's own C escaping). The names a call
        carries repeat from call to call: their part of the line is made once per set of
        names and kept (``_named``)."""
        (arrived, operation, request, variant, unit, status, error, latency_s, model_s,
         cache_hit) = entry
        body = request.body
        names = (operation, request.endpoint_name, request.target_model,
                 request.inference_component, request.target_variant, variant, unit,
                 request.content_type, request.accept)
        named = self._named.get(names)
        if named is None:
            named = self._name_part(names)
        line = (
            f'{{"time":{arrived:.6f},{named}"body_bytes":{len(body)},"status":{status},'
            f'"error":{_text(error)},"latency_ms":{latency_s * 1e3:.3f},'
            f'"model_latency_ms":{"null" if model_s is None else f"{model_s * 1e3:.3f}"},'
            f'"cache_hit":{_FLAGS[cache_hit]},"request_id":{_text(request.request_id)}')
        if self.with_bodies:
            line += f',"body":"{base64.b64encode(bytes(body)).decode("ascii")}"'
        return line + "}\n"

    def _name_part(self, names: tuple[str | None, ...]) -> str:
        (operation, endpoint, target_model, component, target_variant, variant, unit,
         content_type, accept) = names
        part = (f'"operation":{_text(operation)},"endpoint":{_text(endpoint)},'
                f'"target_model":{_text(target_model)},'
                f'"inference_component":{_text(component)},'
                f'"target_variant":{_text(target_variant)},"variant":{_text(variant)},'
                f'"unit":{_text(unit)},"content_type":{_text(content_type)},'
                f'"accept":{_text(accept)},')
        if len(self._named) >= MAX_NAMED:  # a trace of endless TargetModels stays bounded
            self._named.clear()
        self._named[names] = part
        return part

    async def close(self) -> None:
        """Stop the task, write what is left and close the file."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if self._writing is not None:
            await self._writing
            self._writing = None
        await self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None
            log.info("recorded %d calls to %s", self.written, self.path)
