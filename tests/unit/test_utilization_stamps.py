"""Utilization samples carry the moment of their tick, not the moment the sample ran."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from emulator.clock import Clock
from emulator.cloudwatch.series import MetricStore, SeriesKey
from emulator.hosting.endpoint_registry import EndpointRegistry
from emulator.hosting.factory import InstanceFactory
from emulator.metrics import SAMPLED_AT
from emulator.settings import Settings
from tests.support import wait_until

PERIOD_S = 0.2  # real seconds per utilization period
LATE_S = 0.15  # each sample runs this much after its tick: most of a period


def test_a_sample_that_runs_late_is_stamped_at_its_tick_one_per_period() -> None:
    """On a busy machine the sampler's run starts late; its figures still belong to the
    period of its tick, one datapoint a period, as SageMaker publishes them."""
    clock = Clock(1.0)
    store = MetricStore(clock)
    settings = Settings.from_env(env={})
    registry = EndpointRegistry(settings, InstanceFactory(settings).build, sink=store,
                                sample_period_s=PERIOD_S, clock=clock)
    registry.all = lambda: [SimpleNamespace(name="e", publish_period_s=60)]  # type: ignore[method-assign]
    ran_at: list[float] = []

    def late_sample(names: list[str] | None = None) -> None:
        time.sleep(LATE_S)  # the machine was busy
        ran_at.append(clock.now())
        store.record_many({"EndpointName": "e"}, (("/aws/sagemaker/Endpoints", "Percent",
                                                   "CPUUtilization", 50.0),))

    registry.sample_utilization = late_sample  # type: ignore[method-assign]

    async def scenario() -> None:
        registry._ensure_sampler()
        try:
            await asyncio.to_thread(wait_until, lambda: len(ran_at) >= 4, 10)
        finally:
            await registry.close()

    started = clock.now()
    asyncio.run(scenario())
    key = SeriesKey.of("/aws/sagemaker/Endpoints", "CPUUtilization", {"EndpointName": "e"})
    stamps, _ = store.samples(key, started, clock.now() + 1)
    assert len(stamps) >= 4
    for stamp, ran in zip(stamps, ran_at, strict=False):
        assert ran - stamp >= LATE_S * 0.9  # stamped before it ran: at its tick
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert all(abs(gap - PERIOD_S) < PERIOD_S / 4 for gap in gaps), gaps  # one per period
    assert SAMPLED_AT.get() is None  # calls recorded elsewhere are stamped when they end
