"""An endpoint's data capture (its config's ``DataCaptureConfig``): the calls it answers,
sampled, written to S3 as SageMaker writes them (``contract.data_capture``).

A call is drawn against the sampling percentage as it is answered; a drawn call keeps its
bodies (the request's bytes copied: its buffer may be reused once the call ends) and nothing
more is done on the call's path. Every ``FLUSH_INTERVAL_S`` a background task formats what
gathered (in a thread: base64 of large bodies would hold up the event loop) and writes it,
one file per variant and hour; once more as the endpoint stops, so
every answered call that was drawn is in a file. A write S3 refuses (no such bucket, no
server) is logged with what it said and tried again at the next flush, with the calls since.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from emulator.contract import data_capture as wire
from emulator.contract.runtime import InvokeRequest
from emulator.hosting.instance import ContainerAnswer

log = logging.getLogger(__name__)

# [U] SageMaker writes its files every few minutes; a local run wants them within a second.
FLUSH_INTERVAL_S = 1.0
MAX_KEPT = 10_000  # calls kept while S3 refuses the writes; beyond it the oldest are dropped
# A request without a Content-Type reaches the container as this [U].
DEFAULT_CONTENT_TYPE = "application/octet-stream"

# Writes ``body`` at an S3 URL (content type, KMS key id): ``S3Objects.put``.
Writer = Callable[[str, bytes, str | None, str | None], Awaitable[None]]


@dataclass(frozen=True)
class _Call:
    epoch_s: float
    variant: str
    input_type: str
    input_body: bytes
    output_type: str
    output_body: bytes
    inference_id: str | None
    target_model: str | None


@dataclass(eq=False)
class DataCapture:
    rules: wire.CaptureRules
    endpoint: str
    write: Writer
    draw: random.Random  # the sampling percentage's draw (seeded by --routing-seed)
    _kept: list[_Call] = field(default_factory=list, init=False)
    _dropped: int = field(default=0, init=False)
    # The last write failed: said once in the log until one succeeds.
    _failing: bool = field(default=False, init=False)
    _closed: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _flushing: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    def offer(self, request: InvokeRequest, answer: ContainerAnswer, variant: str) -> None:
        """An answered call: kept when the sampling percentage draws it."""
        rules = self.rules
        if not rules.enabled or self.draw.random() * 100 >= rules.sampling_percentage:
            return
        self._kept.append(_Call(
            time.time(), variant, request.content_type or DEFAULT_CONTENT_TYPE,
            bytes(request.body) if rules.captures_input else b"", answer.content_type,
            answer.body if rules.captures_output else b"", request.inference_id,
            request.target_model))
        if len(self._kept) > MAX_KEPT:
            del self._kept[0]
            self._dropped += 1
        if self._task is None and not self._closed.is_set():
            self._task = asyncio.create_task(self._flush_forever(),
                                             name=f"data capture {self.endpoint}")

    async def _flush_forever(self) -> None:
        closed = False
        while not closed:  # a flush after the close too, however soon it came
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), FLUSH_INTERVAL_S)
            closed = self._closed.is_set()
            await self.flush()

    async def flush(self) -> None:
        """Write every kept call now: one file per variant and hour."""
        async with self._flushing:
            calls, self._kept = self._kept, []
            files: dict[str, list[_Call]] = {}
            for call in calls:
                files.setdefault(self.rules.folder(self.endpoint, call.variant, call.epoch_s),
                                 []).append(call)
            unwritten: list[_Call] = []
            for folder, group in files.items():
                url = f"{folder}/{wire.file_name(group[0].epoch_s, str(uuid.uuid4()))}"
                try:
                    lines = await asyncio.to_thread(self._lines, group)  # off the loop
                    await self.write(url, lines, None, self.rules.kms_key_id)
                except Exception as exc:  # noqa: BLE001 - S3's refusal is logged, the calls kept
                    unwritten += group
                    if not self._failing:
                        log.warning("endpoint=%s data capture could not write %s: %s; its calls "
                                    "are kept and written at the next try", self.endpoint,
                                    url, exc)
                    self._failing = True
                else:
                    if self._failing:
                        log.info("endpoint=%s data capture writes again (%s)", self.endpoint,
                                 url)
                    self._failing = False
            self._kept[:0] = unwritten

    def _lines(self, calls: list[_Call]) -> bytes:
        return "".join(
            wire.record(self.rules, event_id=str(uuid.uuid4()), epoch_s=c.epoch_s,
                        input_type=c.input_type, input_body=c.input_body,
                        output_type=c.output_type, output_body=c.output_body,
                        inference_id=c.inference_id, target_model=c.target_model) + "\n"
            for c in calls).encode()

    async def close(self) -> None:
        """The endpoint stopped (no call will come): write what is kept, once more."""
        self._closed.set()
        if self._task is not None:
            await self._task
        else:
            await self.flush()
        lost = len(self._kept) + self._dropped
        if lost:
            log.warning("endpoint=%s data capture lost %d calls: S3 refused their writes "
                        "(see above)", self.endpoint, lost)
