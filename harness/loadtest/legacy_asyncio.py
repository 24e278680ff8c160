"""The asyncio load loop ``mme loadtest`` used before Locust, kept for one purpose:
``mme bench loadgen`` measures it beside Locust in the same run. Nothing else imports it.

One asyncio task per user over a keep-alive aiohttp pool (``HttpInvoker``), stepped by the same
``Controller``; no metrics, fleet or scaling polling (the benchmark needs calls per second only).
"""

from __future__ import annotations

import asyncio
import time

from harness.loadtest.config import IN_FLIGHT_WAIT_S, LoadPlan
from harness.loadtest.invokers import Invoker
from harness.loadtest.popularity import Chooser
from harness.loadtest.runner import INTERRUPTED, PHASES_COMPLETE, Controller, LoadResult, Sample

__all__ = ["INTERRUPTED", "PHASES_COMPLETE", "run_asyncio_load"]


async def run_asyncio_load(plan: LoadPlan, invoker: Invoker, *, tick_s: float = 0.05,
                           drain_timeout_s: float = IN_FLIGHT_WAIT_S) -> LoadResult:
    loop = asyncio.get_running_loop()
    clock = loop.time
    start = clock()
    controller = Controller(plan, start)
    chooser = Chooser(plan.target_models, plan.popularity, plan.seed)
    result = LoadResult(plan=plan, started_at=time.time(), duration_s=0.0, stop_reason="",
                        generator="asyncio+aiohttp (before Locust)")
    active: list[tuple[asyncio.Event, asyncio.Task[None]]] = []
    retired: list[asyncio.Task[None]] = []
    phase_now = 0

    async def user(stop: asyncio.Event) -> None:
        while not stop.is_set():
            model = chooser()
            t0 = clock()
            outcome = await invoker.invoke(model)
            t1 = clock()
            result.samples.append(Sample(t0 - start, t1 - start, model, outcome.status,
                                         outcome.error_code, outcome.model_latency_us,
                                         outcome.cache_hit, phase_now, outcome.variant,
                                         outcome.instance))
            controller.record(t1, outcome.ok, (t1 - t0) * 1000.0, outcome.error_code,
                              answered=outcome.answered, cold=outcome.cache_hit is False)

    try:
        while True:
            step = controller.step(clock())
            phase_now = step.phase
            if step.stop is not None:
                result.stop_reason = str(step.stop)
                break
            while len(active) < step.users:
                flag = asyncio.Event()
                active.append((flag, asyncio.create_task(user(flag))))
            while len(active) > step.users:
                flag, task = active.pop()
                flag.set()
                retired.append(task)
            await asyncio.sleep(tick_s)
    finally:
        for flag, task in active:
            flag.set()
            retired.append(task)
        if retired:
            _, pending = await asyncio.wait(retired, timeout=drain_timeout_s)
            for task in pending:
                task.cancel()
    result.duration_s = clock() - start
    return result
