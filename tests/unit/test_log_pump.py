"""A Triton's output is read in batches: every line reaches the log, the last ones the tail."""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque

import pytest

from emulator.supervision import output_pipe, pump_output


def test_every_line_is_logged_and_the_last_ones_kept(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> deque[str]:
        read_end, write_end = output_pipe()
        tail: deque[str] = deque(maxlen=5)
        pump = asyncio.create_task(pump_output(read_end, tail, logging.getLogger("t.pump"),
                                               batch_s=0))
        # Lines split across writes, a CRLF, an empty line and bytes that are not UTF-8.
        for chunk in (b"one\ntw", b"o\r\n\nthr", b"ee\xff\n", b"\n".join(
                b"line %d" % i for i in range(100)) + b"\nlast, unended"):
            os.write(write_end, chunk)
            await asyncio.sleep(0)  # let the pump see some chunks on their own
        os.close(write_end)
        await asyncio.wait_for(pump, 10)
        return tail

    with caplog.at_level(logging.DEBUG, logger="t.pump"):
        tail = asyncio.run(main())
    logged = [r.getMessage() for r in caplog.records if r.name == "t.pump"]
    assert logged[:4] == ["one", "two", "", "three\ufffd"]
    assert logged[4:] == [f"line {i}" for i in range(100)] + ["last, unended"]
    assert list(tail) == logged[-5:]


def test_a_refused_flags_reason_stays_in_the_tail_its_usage_text_does_not() -> None:
    """Triton refusing a flag: one line says why, then 390 lines of usage."""
    async def main() -> deque[str]:
        read_end, write_end = output_pipe()
        tail: deque[str] = deque(maxlen=5)
        pump = asyncio.create_task(pump_output(read_end, tail, logging.getLogger("t.usage")))
        usage = b"".join(b"  --flag-%d <integer>\n\tWhat it does.\n" % i for i in range(200))
        os.write(write_end, b"The server cannot listen to HTTP requests and metrics requests at "
                            b"the same address and port 0.0.0.0:23456\n\nUsage: tritonserver "
                            b"[options]\n" + usage)
        os.close(write_end)
        await asyncio.wait_for(pump, 10)
        return tail

    tail = list(asyncio.run(main()))
    assert tail[-3:] == ["The server cannot listen to HTTP requests and metrics requests at the "
                         "same address and port 0.0.0.0:23456", "", "(its usage text left out)"]


def test_without_debug_logging_only_the_tail_is_decoded(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> deque[str]:
        read_end, write_end = output_pipe()
        tail: deque[str] = deque(maxlen=3)
        pump = asyncio.create_task(pump_output(read_end, tail, logging.getLogger("t.quiet")))
        os.write(write_end, b"".join(b"%d\n" % i for i in range(10_000)))
        os.close(write_end)
        await asyncio.wait_for(pump, 10)
        return tail

    with caplog.at_level(logging.INFO, logger="t.quiet"):
        tail = asyncio.run(main())
    assert list(tail) == ["9997", "9998", "9999"]
    assert not [r for r in caplog.records if r.name == "t.quiet"]


def test_output_ending_with_a_newline_adds_no_empty_line() -> None:
    async def main() -> list[str]:
        read_end, write_end = output_pipe()
        tail: deque[str] = deque(maxlen=10)
        pump = asyncio.create_task(pump_output(read_end, tail, logging.getLogger("t.end")))
        os.write(write_end, b"a\n\nb\n")
        os.close(write_end)
        await asyncio.wait_for(pump, 10)
        return list(tail)

    assert asyncio.run(main()) == ["a", "", "b"]


def test_a_writer_faster_than_a_batch_is_read_without_loss() -> None:
    """More output than the pipe holds, written as fast as it goes: every line is read."""
    lines = 120_000  # 1.4 MB, more than the largest pipe (1 MiB)

    async def main() -> tuple[deque[str], list[str]]:
        read_end, write_end = output_pipe()
        tail: deque[str] = deque(maxlen=2)
        seen: list[str] = []

        class Count(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                seen.append(record.getMessage())

        logger = logging.getLogger("t.flood")
        logger.addHandler(handler := Count())
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # pytest's capture would format every line
        try:
            def write() -> None:
                os.write(write_end, b"".join(b"line %06d\n" % i for i in range(lines)))
                os.close(write_end)

            pump = asyncio.create_task(pump_output(read_end, tail, logger))
            await asyncio.to_thread(write)
            await asyncio.wait_for(pump, 30)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
            logger.propagate = True
        return tail, seen

    tail, seen = asyncio.run(main())
    assert len(seen) == lines and seen[-1] == f"line {lines - 1:06d}"
    assert list(tail) == seen[-2:]
