"""``mme loadtest`` keeps what it measured and says what went wrong: an interrupted
run still returns its samples, a dead endpoint ends the run instead of counting connection
errors, errors carry the endpoint's message, and two different figures never share a name.
The runs are Locust's against a fake endpoint in this process."""

from __future__ import annotations

import asyncio
import itertools

from harness.cli import add_subcommands
from harness.loadtest.config import LatencyThreshold, LoadPlan, Phase, StoppingConditions
from harness.loadtest.invokers import error_message_from
from harness.loadtest.locust_run import Target, run_load
from harness.loadtest.report import summarize, to_markdown
from harness.loadtest.runner import INTERRUPTED, Controller, LoadResult
from tests.loadtest_support import Answer, FakeEndpoint, json_body, model_error, served
from tests.support import wait_for_async

PLAN = LoadPlan(phases=(Phase(1, 0, 60),))


def _run(endpoint: FakeEndpoint, plan: LoadPlan = PLAN, **kwargs: object) -> LoadResult:
    return asyncio.run(run_load(plan, Target("local", endpoint.url), json_body(),
                                **kwargs))  # type: ignore[arg-type]


def test_a_dead_endpoint_ends_the_run_and_says_so() -> None:
    with FakeEndpoint(lambda target: served(model_latency_us=500.0),
                      die_after=30).running() as endpoint:
        result = _run(endpoint)
    assert result.stop_reason.startswith("aborted: the endpoint stopped answering")
    assert "after 30 succeeded" in result.stop_reason
    assert "Could not connect to the endpoint URL" in result.stop_reason  # boto3's words
    assert result.duration_s < PLAN.duration_s / 4  # not the whole phase of errors
    assert sum(1 for s in result.samples if s.ok) == 30


def test_errors_that_are_answers_do_not_end_a_run_that_had_successes() -> None:
    controller = Controller(PLAN, 0.0, abort_after_errors=5)
    controller.record(0.1, True, 1.0)
    for i in range(20):
        controller.record(0.2 + i / 100, False, 1.0, "ModelError", error_message="boom")
    assert controller.step(1.0).stop is None


def test_the_first_failures_abort_naming_the_message() -> None:
    controller = Controller(PLAN, 0.0, abort_after_errors=3)
    for i in range(3):
        controller.record(i / 10, False, 1.0, "ModelError",
                          error_message='Received client error (400) from model: "bad input"')
    reason = str(controller.step(1.0).stop)
    assert reason.startswith("aborted: the first 3 invocations failed")
    assert 'ModelError: Received client error (400) from model: "bad input"' in reason


def test_calls_that_loaded_their_model_are_not_judged_by_the_thresholds() -> None:
    plan = LoadPlan(phases=(Phase(1, 0, 60),), stopping=StoppingConditions(
        latency_thresholds=(LatencyThreshold(95, 200),), min_window_s=1, min_samples=5))
    controller = Controller(plan, 0.0)
    for i in range(10):  # ten models loading: each first call takes seconds
        controller.record(0.1 + i / 100, True, 3000.0, cold=True)
    for i in range(20):
        controller.record(0.5 + i / 100, True, 20.0)
    assert controller.step(2.0).stop is None
    controller.record(1.5, True, 900.0)  # warm calls over the threshold still stop it
    for i in range(5):
        controller.record(1.6 + i / 100, True, 900.0)
    assert "ModelLatencyThreshold" in str(controller.step(2.0).stop)


def test_an_interrupt_ends_the_run_with_what_was_measured() -> None:
    with FakeEndpoint().running() as endpoint:
        async def run() -> LoadResult:
            interrupt = asyncio.Event()

            async def ctrl_c_after_ten_calls() -> None:
                await wait_for_async(lambda: endpoint.total >= 10, 60, "ten calls")
                interrupt.set()

            task = asyncio.create_task(ctrl_c_after_ten_calls())
            try:
                return await run_load(PLAN, Target("local", endpoint.url), json_body(),
                                      interrupt=interrupt)
            finally:
                task.cancel()

        result = asyncio.run(run())
        assert result.stop_reason.startswith(INTERRUPTED)
        assert result.duration_s < PLAN.duration_s / 4
        # Drained, not cut: every call the endpoint answered is in the report, once.
        assert len(result.samples) == endpoint.total >= 10


def test_the_report_names_messages_unattributed_errors_and_distinct_latencies() -> None:
    flip = itertools.cycle([True, False])

    def flaky(target: str | None) -> Answer:
        if next(flip):
            return model_error("model exploded")
        return served("AllTraffic", "AllTraffic/i-1", model_latency_us=500.0, cache_hit=True)

    plan = LoadPlan(phases=(Phase(1, 0, 1.0),))
    with FakeEndpoint(flaky).running() as endpoint:
        summary = summarize(_run(endpoint, plan))
    errors = summary["errors_by_code"]["ModelError"]
    assert errors > 0 and summary["error_messages"] == {"ModelError": "model exploded"}
    assert summary["fleet"]["unattributed"]["errors"] == errors
    markdown = to_markdown(summary)
    assert f"| ModelError | {errors} | model exploded |" in markdown
    assert f"(no variant named: errors before routing, or error answers) | n/a | {errors} |" \
        in markdown
    # The endpoint's OverheadLatency and the per-call difference are told apart
    assert "| endpoint OverheadLatency avg (ms) |" in markdown
    assert "| client - ModelLatency (endpoint overhead + network + client) |" in markdown
    assert "| OverheadLatency |" not in markdown


def test_error_messages_are_read_from_sagemaker_error_bodies() -> None:
    assert error_message_from(b'{"ErrorCode":"X","message":"Model is not ready"}') == (
        "Model is not ready")
    assert error_message_from(b'{"Message": "no such endpoint"}') == "no such endpoint"
    assert error_message_from(b"plain\ntext") == "plain text"
    assert error_message_from(b"") is None
    assert len(error_message_from(b"x" * 5000) or "") == 300


def test_the_two_field_phase_is_in_the_help() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="mme")
    add_subcommands(parser.add_subparsers())
    loadtest = parser._subparsers._group_actions[0].choices["loadtest"]  # type: ignore[union-attr]
    assert "USERS:SECONDS" in loadtest.format_help()
