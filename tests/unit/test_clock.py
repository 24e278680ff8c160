"""The clock scale: durations divide, the present stays real, the past is compressed."""

from __future__ import annotations

import asyncio
import time

import pytest

from emulator.clock import Clock, Ticks
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


# -- advances: the past pushed back, timers woken in order ------------------------------------


def test_an_advance_pushes_the_past_back_and_keeps_the_present() -> None:
    fake = FakeTime(1_000_000.0)
    clock = Clock(60, time_fn=fake)
    published = clock.now()
    fake.now += 10  # 10 real seconds: 10 emulated minutes at scale 60
    asyncio.run(clock.advance(600))  # and 10 emulated minutes more
    assert clock.advanced == pytest.approx(600)
    assert clock.now() == pytest.approx(fake.now + 10)  # the timeline moved 600 / 60 s on
    assert clock.present() == pytest.approx(fake.now)  # the present is the real present
    # The two compose as a sum: 10 real s at scale 60 plus the advance of 600.
    assert clock.to_emulated(published) == pytest.approx(fake.now - 600 - 600)
    assert clock.to_real(clock.to_emulated(published)) == pytest.approx(published)
    assert clock.to_real(fake.now) == pytest.approx(clock.now())  # utcnow() names "now"


def test_an_advance_at_scale_one_ages_a_moment_by_its_seconds() -> None:
    fake = FakeTime(1_000_000.0)
    clock = Clock(1, time_fn=fake)
    published = clock.now()
    asyncio.run(clock.advance(90.5))
    assert clock.to_emulated(published) == pytest.approx(fake.now - 90.5)
    assert clock.real_duration(300) == 300  # durations are not touched by an advance


def test_timers_wake_in_order_each_at_its_point_of_the_timeline() -> None:
    fake = FakeTime(1_000_000.0)
    clock = Clock(1, time_fn=fake)
    seen: list[tuple[str, float]] = []

    async def ticker(name: str, every: float, times: int) -> None:
        for _ in range(times):
            await clock.sleep(every)
            seen.append((name, clock.now() - 1_000_000.0))

    async def scenario() -> float:
        tasks = [asyncio.create_task(ticker("a", 100, 3)), asyncio.create_task(ticker("b", 250, 2))]
        await asyncio.sleep(0)  # both armed
        present = await clock.advance(600)
        assert all(t.done() for t in tasks)
        return present

    present = asyncio.run(scenario())
    assert seen == [("a", 100), ("a", 200), ("b", 250), ("a", 300), ("b", 500)]
    assert present == fake.now


def test_a_wait_for_times_out_at_its_deadline_unless_its_result_comes_first() -> None:
    clock = Clock(1, time_fn=FakeTime())

    async def scenario() -> tuple[bool, str]:
        never: asyncio.Event = asyncio.Event()
        timed_out = asyncio.create_task(clock.wait_for(never.wait(), 600))
        queue: asyncio.Queue[str] = asyncio.Queue()
        answered = asyncio.create_task(clock.wait_for(queue.get(), 600))
        await asyncio.sleep(0)
        queue.put_nowait("alarm")
        await asyncio.sleep(0)
        await clock.advance(601)
        with pytest.raises(TimeoutError):
            await timed_out
        return timed_out.done(), await answered

    assert asyncio.run(scenario()) == (True, "alarm")


def test_a_task_woken_by_an_advance_settles_before_the_advance_goes_on() -> None:
    """A bake's end starts the next step (work that takes real time), whose own bake is then
    due within the same advance."""
    clock = Clock(1, time_fn=FakeTime())
    ends: list[float] = []

    async def deployment() -> None:
        for _ in range(3):
            await clock.sleep(600)  # a bake
            await asyncio.sleep(0.02)  # the next traffic shift: real work
            ends.append(clock.advanced)

    async def scenario() -> None:
        task = asyncio.create_task(deployment())
        await asyncio.sleep(0)
        await clock.advance(1800)
        assert task.done()

    asyncio.run(scenario())
    assert ends == [600, 1200, 1800]


def test_without_an_advance_sleep_waits_real_time() -> None:
    clock = Clock(1)
    started = time.monotonic()
    asyncio.run(clock.sleep(0.05))
    assert time.monotonic() - started >= 0.04
    assert clock.advanced == 0


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), "60", True])
def test_an_advance_refuses_what_is_not_a_duration(seconds: object) -> None:
    from emulator.clock import ClockError

    with pytest.raises(ClockError):
        asyncio.run(Clock(1).advance(seconds))  # type: ignore[arg-type]


def test_ticks_keep_to_their_grid_however_long_each_run_takes() -> None:
    now = [100.0]
    ticks = Ticks(lambda: now[0])
    due = []
    for _ in range(4):
        due.append(ticks.next(10.0))
        now[0] = due[-1] + 4.0  # each run ends 4 s after its tick: no drift from it
    assert due == [110.0, 120.0, 130.0, 140.0]
    now[0] = 155.0  # the last run ended half a period after the next tick was due
    assert ticks.next(10.0) == 150.0  # due at once, still on the grid
    assert ticks.next(10.0) == 160.0
    now[0] = 500.0  # far behind (a stalled machine, an advance): the grid starts again from now
    assert ticks.next(10.0) == 500.0
    assert ticks.next(10.0) == 510.0
