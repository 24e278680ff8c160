"""The clock scale: durations divide, the present stays real, the past is compressed."""

from __future__ import annotations

import asyncio
import time

import pytest

from emulator.clock import Clock
from tests.clock_support import FakeTime


def test_durations_scale_and_the_present_is_real() -> None:
    fake = FakeTime(1_000_000.0)
    clock = Clock(60, time_fn=fake)
    assert clock.real_duration(60) == 1.0
    assert clock.emulated_duration(2.5) == 150.0
    assert clock.now() == fake.now


def test_past_is_compressed_and_round_trips() -> None:
    fake = FakeTime(1_000_000.0)
    clock = Clock(60, time_fn=fake)
    ten_seconds_ago = fake.now - 10
    # 10 real seconds ago is 10 emulated minutes ago ...
    assert clock.to_emulated(ten_seconds_ago) == fake.now - 600
    # ... so a client's "utcnow() - 10 minutes" names the moment 10 real seconds ago.
    assert clock.to_real(fake.now - 600) == ten_seconds_ago
    assert clock.to_real(clock.to_emulated(ten_seconds_ago)) == pytest.approx(ten_seconds_ago)


def test_scale_one_is_the_identity() -> None:
    fake = FakeTime(1_000_000.0)
    clock = Clock(1, time_fn=fake)
    assert clock.to_emulated(fake.now - 42) == fake.now - 42
    assert clock.real_duration(300) == 300


def test_sleep_is_scaled() -> None:
    clock = Clock(600)
    started = time.monotonic()
    asyncio.run(clock.sleep(60))  # one emulated minute: a tenth of a real second
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("scale", [0, -1])
def test_scale_must_be_positive(scale: float) -> None:
    with pytest.raises(ValueError):
        Clock(scale)
