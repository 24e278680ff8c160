"""The load generator and ``mme loadtest``/``mme sweep`` against a real emulator (embedded
Triton, a tiny Python model), with runs of a few seconds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.examples.add_model import write_add_repository
from harness.loadtest.config import (
    LatencyThreshold,
    LoadPlan,
    Phase,
    Popularity,
    StoppingConditions,
)
from harness.loadtest.report import summarize, write_report
from harness.loadtest.runner import PHASES_COMPLETE
from harness.loadtest.session import auto_request, emulator, run_http
from harness.model_store import package_repository
from tests.support import package, write_scale_model

pytestmark = pytest.mark.slow

MODELS = ("m1.tar.gz", "m2.tar.gz", "m3.tar.gz")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("loadtest")
    for name in MODELS:
        repo = write_add_repository(root / "repos" / name.split(".")[0])
        package_repository(repo, root / "store" / name)
    return root / "store"


@pytest.fixture(scope="module")
def url(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Room for two models: three models in rotation must evict.
    with emulator(
        store, tmp_path_factory.mktemp("emulator"), {"MME_MAX_LOADED_MODELS": "2"}
    ) as base_url:
        yield base_url


def test_phases_over_many_models_report_cold_starts_and_evictions(
    url: str, store: Path, tmp_path: Path
) -> None:
    plan = LoadPlan(
        phases=(Phase(1, 120, 2.0), Phase(3, 0, 2.0)),
        target_models=MODELS,
        popularity=Popularity("uniform"),
        # Its first three draws are the three models, sent by the first three users within the
        # first second: however slowly a cold load runs, every model is loaded and one evicted
        # (the run waits for the calls in flight).
        seed=14,
    )
    request = auto_request(store / MODELS[0])
    result = asyncio.run(run_http(url, "local", plan, request, poll_s=0.2))
    summary = summarize(result)

    assert result.stop_reason == PHASES_COMPLETE
    assert summary["errors_by_code"] == {}
    assert {s.target_model for s in result.samples} == set(MODELS)
    # Users follow the phases whatever the latency: 1 rising by 2/s, then 3.
    in_phase_1 = [users for t, users in result.users if t < 2.0]
    during = [users for t, users in result.users if t < 4.0]
    assert in_phase_1[0] == 1 and max(in_phase_1) == 4 and during[-1] == 3
    assert summary["peak_users"] == 4
    # Every model was loaded at least once, and with room for two, something was evicted.
    assert summary["model_loads"] >= 3 and summary["cold_starts"] >= 3
    assert summary["model_unloads"] >= 1
    assert summary["loaded_models"]["max"] <= 2
    assert 0 <= summary["cache_hit_ratio"] < 1
    # Per-request latency split from the emulator's X-Mme-Model-Latency-Us header.
    model, client = summary["latency_ms"]["ModelLatency"], summary["latency_ms"]["client"]
    assert model is not None and model["p50"] <= client["p50"]
    assert summary["latency_ms"]["client_minus_ModelLatency"]["p50"] >= 0
    assert summary["endpoint_average_ms"]["ModelLatency"] is not None
    assert any(e["kind"] == "load" for e in summary["events"])
    paths = write_report(result, tmp_path)
    assert json.loads(paths["json"].read_text())["invocations"] == len(result.samples)
    assert paths["png"].stat().st_size > 0


@pytest.mark.parametrize(
    ("stopping", "condition"),
    [
        (StoppingConditions(max_invocations=1, min_window_s=1, min_samples=1), "MaxInvocations"),
        (
            StoppingConditions(
                latency_thresholds=(LatencyThreshold(50, 0.001),), min_window_s=1, min_samples=3
            ),
            "ModelLatencyThreshold",
        ),
    ],
    ids=["max-invocations", "latency-threshold"],
)
def test_a_stopping_condition_ends_the_test_early(
    url: str, store: Path, stopping: StoppingConditions, condition: str
) -> None:
    plan = LoadPlan(phases=(Phase(2, 0, 120.0),), stopping=stopping, target_models=MODELS[:1])
    result = asyncio.run(run_http(url, "local", plan, auto_request(store / MODELS[0])))
    assert result.stop_reason.startswith(condition)
    assert result.duration_s < 120
    assert result.events[-1].kind == "stop" or any(e.kind == "stop" for e in result.events)


def test_a_wrong_endpoint_aborts_with_the_error(url: str, store: Path) -> None:
    plan = LoadPlan(phases=(Phase(2, 0, 120.0),), target_models=MODELS[:1])
    result = asyncio.run(run_http(url, "no-such-endpoint", plan, auto_request(store / MODELS[0])))
    assert "aborted" in result.stop_reason and "ValidationError" in result.stop_reason
    assert result.duration_s < 120


def test_mme_loadtest_cli(
    tmp_path: Path, store: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mme.cli import main

    config = tmp_path / "job.json"
    config.write_text(
        json.dumps(
            {
                "TrafficPattern": {
                    "TrafficType": "PHASES",
                    "Phases": [{"InitialNumberOfUsers": 2, "SpawnRate": 0, "DurationInSeconds": 2}],
                },
                "StoppingConditions": {
                    "ModelLatencyThresholds": [{"Percentile": "P99", "ValueInMilliseconds": 60000}]
                },
            }
        )
    )
    out = tmp_path / "report"
    code = main(
        [
            "loadtest",
            "--url",
            url,
            "--target-model",
            MODELS[0],
            "--target-model",
            MODELS[1],
            "--popularity",
            "zipf:1.5",
            "--config",
            str(config),
            "--inputs",
            str(_inputs(tmp_path)),
            "--out",
            str(out),
            "--no-png",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| invocations per minute |" in printed and "| ModelLatency |" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["stop_reason"] == PHASES_COMPLETE and report["successes"] > 0
    assert report["plan"]["Popularity"] == "zipf:1.5"
    assert report["plan"]["StoppingConditions"]["ModelLatencyThresholds"][0]["Percentile"] == "P99"
    assert not (out / "report.png").exists()


def _inputs(tmp_path: Path) -> Path:
    import numpy as np

    path = tmp_path / "inputs.npz"
    np.savez(path, INPUT0=np.ones((1, 4), np.float32), INPUT1=np.ones((1, 4), np.float32))
    return path


def test_mme_sweep_measures_each_variant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model with a fixed 20 ms cost per execute(): dynamic batching must pay off."""
    from mme.cli import main

    repo = write_add_repository(tmp_path / "repo", exec_delay_ms=20)
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            str(repo),
            "--variant",
            "batched:dynamic_batching=on,delay_us=5000",
            "--phase",
            "8:0:3",
            "--out",
            str(out),
            "--no-png",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| configuration | settings | invocations/min |" in printed
    rows = json.loads((out / "sweep.json").read_text())
    assert [r["configuration"] for r in rows] == ["base", "batched"]
    base, batched = (r["summary"]["invocations_per_minute"] for r in rows)
    assert all(r["summary"]["errors_by_code"] == {} for r in rows)
    # 8 users on one instance: unbatched, one request per 20 ms; batched, up to 8.
    assert batched > 1.5 * base
    assert (out / "batched" / "report.json").is_file()


def test_a_user_stopped_by_a_ramp_down_finishes_its_call_and_it_is_counted(
        tmp_path: Path) -> None:
    """Three users whose calls take 3 s, then one: the two users the second phase stops are
    mid-call; their calls end and are in the report (Locust alone would kill them mid-call: the
    endpoint served them, the report would not say so). The first phase lasts 2 s: a starved
    runner may take a second to send the users' first calls."""
    store = tmp_path / "store"
    store.mkdir()
    package(write_scale_model(tmp_path / "w", "slow", run_seconds="3"),
            store / "slow.tar.gz", "folder")
    plan = LoadPlan(phases=(Phase(3, 100, 2.0), Phase(1, 0, 1.0)),
                    target_models=("slow.tar.gz",), popularity=Popularity("uniform"))
    with emulator(store, tmp_path / "emulator", {}) as base_url:
        request = auto_request(store / "slow.tar.gz")
        asyncio.run(run_http(base_url, "local", plan, request, poll_s=0.2))  # a cold load first
        result = asyncio.run(run_http(base_url, "local", plan, request, poll_s=0.2))
    first_phase = [s for s in result.samples if s.start < 2.0]
    assert len(first_phase) >= 3 and all(s.status == 200 for s in first_phase), result.samples
