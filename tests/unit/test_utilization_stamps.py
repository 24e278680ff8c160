"""Utilization samples carry the moment of their tick, not the moment the sample ran; a call
recorded while a sample runs keeps its own moment."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from emulator.clock import Clock
from emulator.cloudwatch.series import MetricStore, SeriesKey
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.hosting.factory import InstanceFactory
from emulator.settings import Settings

T0 = 1_700_000_000.0
# The timeline's seconds per utilization period. Time moves only when the test moves it (the
# clock's advance, the machine's "busy" below), so long periods cost nothing and no real timer
# fires during the test.
PERIOD_S = 100.0
LATE_S = 75.0  # each sample runs this long after its tick: most of a period
NAMESPACE = "/aws/sagemaker/Endpoints"


def test_a_sample_that_runs_late_is_stamped_at_its_tick_and_a_call_meanwhile_at_its_own() -> None:
    """On a busy machine the sampler's run starts late: its figures still belong to the period
    of its tick, one datapoint a period, as SageMaker publishes them. An invocation recorded on
    the event loop while that sample runs is stamped when it is recorded."""
    real = [T0]  # the machine's time, moved by hand
    clock = Clock(1.0, time_fn=lambda: real[0])
    store = MetricStore(clock)
    settings = Settings.from_env(env={})
    registry = EndpointRegistry(settings, InstanceFactory(settings).build, sink=store,
                                sample_period_s=PERIOD_S, clock=clock)
    registry.all = lambda: [SimpleNamespace(name="e", publish_period_s=60)]  # type: ignore[method-assign, list-item]
    ran_at: list[float] = []
    call_recorded = threading.Event()
    call_stamp: list[float] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        call_due = asyncio.Event()

        async def invocation() -> None:  # a request's task: its own context, as a route's is
            await call_due.wait()
            call_stamp.append(clock.now())
            store.record_many({"EndpointName": "e"}, ((NAMESPACE, "None", "Invocations", 1.0),))
            call_recorded.set()

        def late_sample(names: list[str] | None = None) -> None:
            real[0] += LATE_S  # the machine was busy
            ran_at.append(clock.now())
            if len(ran_at) == 2:  # a call ends on the loop while this sample runs
                loop.call_soon_threadsafe(call_due.set)
                assert call_recorded.wait(10), "the invocation was not recorded"
            store.record_many({"EndpointName": "e"},
                              ((NAMESPACE, "Percent", "CPUUtilization", 50.0),))

        registry.sample_utilization = late_sample  # type: ignore[method-assign]
        request = asyncio.create_task(invocation())
        registry._ensure_sampler()
        try:
            while len(ran_at) < 4:
                await clock.advance(PERIOD_S)
        finally:
            await registry.close()
            request.cancel()

    asyncio.run(scenario())
    def since_t0(moments: list[float]) -> list[float]:  # exact: the test moves every second
        return [round(moment - T0, 6) for moment in moments]

    cpu = SeriesKey.of(NAMESPACE, "CPUUtilization", {"EndpointName": "e"})
    stamps, _ = store.samples(cpu, T0, clock.now() + 1)
    ticks = [PERIOD_S * (n + 1) for n in range(len(ran_at))]
    assert since_t0(ran_at) == [tick + LATE_S for tick in ticks]  # each ran late
    assert since_t0(list(stamps)) == ticks  # stamped at its tick: one datapoint a period
    calls = SeriesKey.of(NAMESPACE, "Invocations", {"EndpointName": "e"})
    call_stamps, _ = store.samples(calls, T0, clock.now() + 1)
    assert since_t0(call_stamp) == [ticks[1] + LATE_S]  # it ended during the second sample
    assert since_t0(list(call_stamps)) == since_t0(call_stamp)  # when it ended, not the tick
