"""Phase, stopping and popularity logic of the load test, driven by a fake clock (no I/O)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from emulator.cloudwatch.statistics import percentile
from harness.loadtest.config import (
    IN_FLIGHT_WAIT_S,
    LatencyThreshold,
    LoadPlan,
    Phase,
    PlanError,
    Popularity,
    StoppingConditions,
    parse_phase,
    parse_threshold,
    plan_from_api,
    user_stop_timeout,
)
from harness.loadtest.invokers import error_code_from, find_endpoint_snapshot
from harness.loadtest.locust_run import Target, run_load
from harness.loadtest.popularity import Chooser, weights
from harness.loadtest.report import summarize, to_markdown, write_report
from harness.loadtest.runner import PHASES_COMPLETE, Controller, MetricsPoll
from harness.loadtest.schedule import position
from harness.loadtest.stopping import StopMonitor
from tests.loadtest_support import Answer, FakeEndpoint, json_body, model_error, served

# --- phases -----------------------------------------------------------------------------------


def test_spawn_rate_counts_new_users_per_minute() -> None:
    phase = Phase(initial_users=2, spawn_rate=6, duration_s=120)
    assert [phase.users_at(t) for t in (0, 9.9, 10, 59, 60, 120)] == [2, 2, 3, 7, 8, 14]
    assert phase.peak_users == 14


def test_phases_follow_each_other_and_restart_from_their_initial_users() -> None:
    phases = (Phase(1, 60, 10), Phase(3, 0, 5))
    assert position(phases, 0) == position(phases, -1)  # before the start = the start
    pos = position(phases, 4.5)
    assert pos is not None and (pos.phase, pos.users) == (0, 5)
    pos = position(phases, 10)
    assert pos is not None and (pos.phase, pos.users) == (1, 3)
    assert position(phases, 15) is None


def test_phase_validation_and_parsing() -> None:
    assert parse_phase("2:30:10") == Phase(2, 30, 10.0)
    assert parse_phase("4:5") == Phase(4, 0, 5.0)
    for bad in ("0:1:1", "1:-1:1", "1:1:0", "a:b", "1"):
        with pytest.raises(PlanError):
            parse_phase(bad)


def test_plan_from_inference_recommender_json() -> None:
    job = {
        "InputConfig": {
            "TrafficPattern": {
                "TrafficType": "PHASES",
                "Phases": [
                    {"InitialNumberOfUsers": 1, "SpawnRate": 1, "DurationInSeconds": 120},
                    {"InitialNumberOfUsers": 3, "SpawnRate": 0, "DurationInSeconds": 60},
                ],
            },
        },
        "StoppingConditions": {
            "MaxInvocations": 300,
            "ModelLatencyThresholds": [{"Percentile": "P95", "ValueInMilliseconds": 100}],
        },
    }
    plan = plan_from_api(
        job, target_models=["a.tar.gz", "b.tar.gz"], popularity=Popularity.parse("zipf:1.2")
    )
    assert plan.phases == (Phase(1, 1, 120), Phase(3, 0, 60))
    assert plan.stopping.max_invocations == 300
    assert plan.stopping.latency_thresholds == (LatencyThreshold(95, 100),)
    assert plan.duration_s == 180
    assert plan.popularity == Popularity("zipf", 1.2)
    # as_dict speaks the API's names again
    again = plan_from_api(json.loads(json.dumps(plan.as_dict())))
    assert again.phases == plan.phases and again.stopping == plan.stopping
    with pytest.raises(PlanError, match="STAIRS"):
        plan_from_api({"TrafficPattern": {"TrafficType": "STAIRS", "Phases": []}})


def test_threshold_and_popularity_parsing() -> None:
    assert parse_threshold("P99:250") == LatencyThreshold(99, 250)
    assert parse_threshold("90:5.5") == LatencyThreshold(90, 5.5)
    for bad in ("P95", "P101:1", "P95:0"):
        with pytest.raises(PlanError):
            parse_threshold(bad)
    assert Popularity.parse("zipf") == Popularity("zipf", 1.0)
    for bad in ("pareto", "uniform:2", "zipf:-1", "zipf:x"):
        with pytest.raises(PlanError):
            Popularity.parse(bad)


# --- popularity -------------------------------------------------------------------------------


def test_zipf_weights_fall_as_a_power_of_rank() -> None:
    w = weights(Popularity("zipf", 1.0), 4)
    assert w[0] / w[1] == pytest.approx(2) and w[0] / w[3] == pytest.approx(4)
    assert sum(w) == pytest.approx(1)
    assert weights(Popularity(), 4) == [0.25] * 4


def test_chooser_draws_with_the_configured_popularity_and_is_reproducible() -> None:
    models = [f"m{i}" for i in range(5)]
    chooser = Chooser(models, Popularity("zipf", 1.5), seed=7)
    draws = Counter(chooser() for _ in range(20000))
    expected = weights(Popularity("zipf", 1.5), 5)
    for model, share in zip(models, expected, strict=True):
        assert draws[model] / 20000 == pytest.approx(share, abs=0.015)
    a = Chooser(models, Popularity(), seed=1)
    b = Chooser(models, Popularity(), seed=1)
    assert [a() for _ in range(50)] == [b() for _ in range(50)]


# --- stopping ---------------------------------------------------------------------------------


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99
    assert percentile(values, 100) == 100 and percentile([3.0], 95) == 3


def test_max_invocations_stops_once_the_rate_is_reached_after_the_minimum_window() -> None:
    monitor = StopMonitor(StoppingConditions(max_invocations=600, min_window_s=5), start=0.0)
    for i in range(50):  # 10 per second for 5 s = 600/minute
        monitor.record(i * 0.1, 1.0)
    assert monitor.check(4.9) is None  # too early to judge, whatever the rate
    reason = monitor.check(5.0)
    assert reason is not None and reason.condition == "MaxInvocations"


def test_max_invocations_not_reached_below_the_rate() -> None:
    monitor = StopMonitor(StoppingConditions(max_invocations=600, min_window_s=5), start=0.0)
    for i in range(40):
        monitor.record(i * 0.25, 1.0)  # 4 per second = 240/minute
    assert monitor.check(10.0) is None
    assert monitor.rate_per_minute(10.0) == pytest.approx(240)


def test_sliding_window_forgets_old_samples() -> None:
    conditions = StoppingConditions(max_invocations=100, window_s=10, min_window_s=1)
    monitor = StopMonitor(conditions, start=0.0)
    for i in range(100):
        monitor.record(i * 0.01, 1.0)  # a burst in the first second
    assert monitor.check(5.0) is not None  # 100 in 5 s = 1200/minute
    assert monitor.check(20.0) is None  # the burst left the window


def test_latency_threshold_needs_enough_samples_then_stops() -> None:
    conditions = StoppingConditions(
        latency_thresholds=(LatencyThreshold(90, 50),), min_window_s=1, min_samples=10
    )
    monitor = StopMonitor(conditions, start=0.0)
    for i in range(9):
        monitor.record(1 + i * 0.01, 100.0)
    assert monitor.check(2.0) is None  # 9 samples: not enough to judge
    monitor.record(1.5, 100.0)
    reason = monitor.check(2.0)
    assert reason is not None and reason.condition == "ModelLatencyThreshold"
    assert "P90 100.0 ms > 50 ms" in str(reason)


def test_latency_under_threshold_does_not_stop() -> None:
    conditions = StoppingConditions(
        latency_thresholds=(LatencyThreshold(95, 50),), min_window_s=1, min_samples=10
    )
    monitor = StopMonitor(conditions, start=0.0)
    for i in range(100):
        monitor.record(1 + i * 0.01, 10.0 if i < 96 else 500.0)  # p95 still fast
    assert monitor.check(3.0) is None


# --- controller (phases + stopping over a fake clock) -----------------------------------------


def test_controller_walks_phases_then_completes() -> None:
    plan = LoadPlan(phases=(Phase(1, 120, 2), Phase(4, 0, 1)))
    controller = Controller(plan, start=100.0)
    steps = [controller.step(100.0 + t) for t in (0, 0.6, 1.0, 2.0, 2.5, 3.0)]
    assert [s.users for s in steps] == [1, 2, 3, 4, 4, 0]
    assert [s.new_phase for s in steps] == [True, False, False, True, False, False]
    assert steps[-1].stop == PHASES_COMPLETE


def test_controller_stops_on_a_condition_before_the_phases_end() -> None:
    plan = LoadPlan(
        phases=(Phase(1, 0, 60),), stopping=StoppingConditions(max_invocations=60, min_window_s=2)
    )
    controller = Controller(plan, start=0.0)
    for i in range(3):
        controller.record(0.5 * (i + 1), True, 1.0)
    step = controller.step(2.0)  # 3 in 2 s = 90/minute
    assert step.stop is not None and "MaxInvocations" in str(step.stop)


def test_controller_aborts_when_nothing_ever_succeeds() -> None:
    controller = Controller(LoadPlan(phases=(Phase(1, 0, 60),)), start=0.0, abort_after_errors=5)
    for _ in range(5):
        controller.record(0.1, False, 1.0, "ValidationError")
    step = controller.step(0.2)
    assert isinstance(step.stop, str) and "ValidationError" in step.stop


def test_errors_do_not_count_as_throughput() -> None:
    plan = LoadPlan(
        phases=(Phase(1, 0, 60),), stopping=StoppingConditions(max_invocations=60, min_window_s=1)
    )
    controller = Controller(plan, start=0.0, abort_after_errors=10**6)
    for i in range(100):
        controller.record(i * 0.01, False, 1.0, "ModelError")
    assert controller.step(2.0).stop is None


# --- helpers ----------------------------------------------------------------------------------


def test_error_code_follows_botocore_rules() -> None:
    assert error_code_from(200, {}) is None
    assert error_code_from(424, {"x-amzn-ErrorType": "ModelError:http://x"}) == "ModelError"
    assert error_code_from(400, {"x-amzn-ErrorType": "aws#ValidationError"}) == "ValidationError"
    assert error_code_from(502, {}) == "502"


def test_find_endpoint_snapshot_in_nested_metrics() -> None:
    data = {
        "Endpoints": {
            "a": {"Dimensions": {"EndpointName": "a"}, "Metrics": {"x": 1}},
            "b": {"Dimensions": {"EndpointName": "b"}, "Metrics": {"x": 2}},
        }
    }
    snap = find_endpoint_snapshot(data, "b")
    assert snap is not None and snap["Metrics"] == {"x": 2}
    assert find_endpoint_snapshot(data, "c") is None


# --- Locust against a fake endpoint, then the report ------------------------------------------


def _answer(target: str | None) -> Answer:
    if target == "bad":
        return model_error("bad model")
    return served(model_latency_us=1000.0)


class FakeMetrics:
    def __init__(self) -> None:
        self.polls = 0

    async def poll(self) -> dict:
        self.polls += 1
        n = self.polls
        return {
            "ModelCacheHit": {"SampleCount": 10 * n, "Sum": 9 * n},
            "ModelLoadingTime": {"SampleCount": n},
            "ModelUnloadingTime": {"SampleCount": 0},
            "ModelLatency": {"SampleCount": 10 * n, "Sum": 2000.0 * 10 * n},
            "LoadedModelCount": {"Current": min(n, 3)},
        }

    async def close(self) -> None:
        pass


def test_generator_runs_the_phases_and_reports(tmp_path: Path) -> None:
    plan = LoadPlan(
        phases=(Phase(2, 0, 2.0), Phase(4, 0, 2.0)),  # room for a starved runner's calls
        target_models=("a", "b", "bad"),
        popularity=Popularity("zipf", 1.0),
    )
    metrics = FakeMetrics()
    with FakeEndpoint(_answer).running() as endpoint:
        result = asyncio.run(run_load(plan, Target("local", endpoint.url), json_body(),
                                      metrics=metrics, poll_s=0.1))
    calls = endpoint.calls
    assert result.stop_reason == PHASES_COMPLETE
    assert endpoint.peak == 4
    assert max(u for _, u in result.users) == 4 and result.users[-1][1] == 0
    assert {s.phase for s in result.samples} == {0, 1}
    assert calls["a"] > calls["b"] > 0 and calls["bad"] > 0
    assert [e.kind for e in result.events if e.kind == "phase"] == ["phase", "phase"]
    summary = summarize(result)
    assert summary["invocations"] == len(result.samples) == endpoint.total  # each call once
    assert summary["errors_by_code"] == {"ModelError": calls["bad"]}
    assert summary["error_messages"] == {"ModelError": "bad model"}
    assert summary["latency_ms"]["ModelLatency"]["p50"] == pytest.approx(1.0)
    assert summary["latency_ms"]["client_minus_ModelLatency"] is not None
    assert summary["endpoint_average_ms"]["ModelLatency"] == pytest.approx(2.0)
    assert summary["cold_starts"] == metrics.polls - 1  # one miss per poll interval
    assert 0 < summary["cache_hit_ratio"] < 1
    assert summary["loaded_models"]["max"] == 3
    assert [row["phase"] for row in summary["phases"]] == [1, 2]
    assert summary["generator"].startswith("locust ")
    # Locust ran in its own processes: gevent patched nothing in this one
    # (gevent itself may be here: tritonclient's HTTP client imports it, and patches nothing.)
    monkey = sys.modules.get("gevent.monkey")
    assert "locust" not in sys.modules
    assert monkey is None or not monkey.is_anything_patched()
    markdown = to_markdown(summary)
    assert "| invocations per minute |" in markdown and "| ModelLatency |" in markdown
    paths = write_report(result, tmp_path)
    assert json.loads(paths["json"].read_text())["invocations"] == len(result.samples)
    assert paths["png"].read_bytes().startswith(b"\x89PNG")


def test_generator_stops_on_a_stopping_condition() -> None:
    plan = LoadPlan(
        phases=(Phase(2, 0, 30),), stopping=StoppingConditions(max_invocations=60, min_window_s=0.2)
    )
    with FakeEndpoint().running() as endpoint:
        result = asyncio.run(run_load(plan, Target("local", endpoint.url), json_body()))
    assert result.stop_reason.startswith("MaxInvocations")
    assert result.duration_s < 30
    assert [e.kind for e in result.events][-1] == "stop"


def test_load_events_come_from_metric_deltas() -> None:
    from harness.loadtest.runner import _load_events

    polls = [
        MetricsPoll(0, {"ModelLoadingTime": {"SampleCount": 1}}),
        MetricsPoll(
            1, {"ModelLoadingTime": {"SampleCount": 3}, "ModelUnloadingTime": {"SampleCount": 1}}
        ),
    ]
    events = _load_events(polls)
    assert [(e.kind, e.detail) for e in events] == [
        ("load", "2 model load(s)"),
        ("unload", "1 model unload(s)"),
    ]


def test_a_stop_timeout_given_to_locust_is_kept_and_none_waits_for_a_whole_call() -> None:
    """The locustfile's users finish the call in flight when a ramp-down stops them: Locust's
    default (0, the same as none) becomes a whole call's wait; a ``--stop-timeout`` given stays."""
    assert user_stop_timeout(30.0) == 30.0
    assert user_stop_timeout(0.5) == 0.5
    assert user_stop_timeout(0) == IN_FLIGHT_WAIT_S
    assert user_stop_timeout(None) == IN_FLIGHT_WAIT_S
    assert IN_FLIGHT_WAIT_S > 60  # longer than SageMaker gives a model to answer
