"""``mme loadtest`` per production variant and per instance: the aggregation (pure, no I/O), the
generator with a fake fleet, and a short run against a real two-instance emulator."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from harness.loadtest.config import LoadPlan, Phase, Popularity
from harness.loadtest.fleet import fleet_summary
from harness.loadtest.invokers import fleet_snapshot, served_by
from harness.loadtest.locust_run import Target, run_load
from harness.loadtest.report import summarize, to_markdown, write_report
from harness.loadtest.runner import PHASES_COMPLETE, FleetPoll, LoadResult, Sample
from tests.loadtest_support import Answer, FakeEndpoint, json_body, served
from tests.support import wait_for

PLAN = LoadPlan(phases=(Phase(1, 0, 10),))


def sample(end: float, *, ms: float = 10.0, variant: str | None = None,
           instance: str | None = None, hit: bool | None = None, status: int = 200) -> Sample:
    return Sample(end - ms / 1000, end, "m.tar.gz", status,
                  None if status == 200 else "ModelError", None, hit, 0, variant, instance)


def fleet_poll(t: float, **loaded: int) -> FleetPoll:
    """``A_i_0=2`` -> instance ``A/i-0`` with 2 models loaded."""
    instances = {}
    for key, count in loaded.items():
        variant, _, index = key.split("_")
        instances[f"{variant}/i-{index}"] = {"variant": variant, "loaded_models": count}
    return FleetPoll(t, instances)


def test_aggregation_per_variant_and_per_instance() -> None:
    samples = [
        # A/i-0: 3 requests, 1 miss then 2 hits
        sample(0.5, variant="A", instance="A/i-0", hit=False, ms=100),
        sample(1.5, variant="A", instance="A/i-0", hit=True),
        sample(1.6, variant="A", instance="A/i-0", hit=True),
        # A/i-1: 1 miss
        sample(2.5, variant="A", instance="A/i-1", hit=False, ms=50),
        # B/i-0: 2 hits, 1 container error (still attributed, no cache figure)
        sample(0.2, variant="B", instance="B/i-0", hit=True),
        sample(2.2, variant="B", instance="B/i-0", hit=True),
        sample(2.3, variant="B", instance="B/i-0", status=424),
        # refused before routing: no variant, no instance
        sample(2.4, status=400),
    ]
    polls = [fleet_poll(0.0, A_i_0=0, A_i_1=0, B_i_0=1),
             fleet_poll(1.0, A_i_0=1, A_i_1=0, B_i_0=1),
             fleet_poll(2.9, A_i_0=1, A_i_1=1, B_i_0=1)]
    result = LoadResult(plan=PLAN, started_at=0.0, duration_s=3.0, stop_reason=PHASES_COMPLETE,
                        samples=samples, fleet=polls)
    fleet = fleet_summary(result)
    assert fleet is not None
    rows = {r["instance"]: r for r in fleet["instances"]}
    assert list(rows) == ["A/i-0", "A/i-1", "B/i-0"]
    a0, a1, b0 = rows.values()
    assert (a0["requests"], a0["cache_hits"], a0["cache_misses"]) == (3, 2, 1)
    assert a0["hit_ratio"] == pytest.approx(2 / 3, abs=1e-4)
    assert a0["p99_ms"] == pytest.approx(100, rel=0.05) and a0["p50_ms"] == pytest.approx(10)
    assert (a1["requests"], a1["hit_ratio"]) == (1, 0.0)
    assert (b0["requests"], b0["errors"], b0["hit_ratio"]) == (3, 1, 1.0)
    assert [(r["loaded_models_final"], r["loaded_models_max"]) for r in rows.values()] == [
        (1, 1), (1, 1), (1, 1)]
    assert sum(r["requests"] for r in rows.values()) + fleet["unattributed_instance"] == 8
    variants = {r["variant"]: r for r in fleet["variants"]}
    assert list(variants) == ["A", "B"]
    assert (variants["A"]["instances"], variants["A"]["requests"]) == (2, 4)
    assert variants["A"]["hit_ratio"] == 0.5
    # A's loaded models are its instances added up at each sample: 0, 1, 2.
    assert (variants["A"]["loaded_models_final"], variants["A"]["loaded_models_max"]) == (2, 2)
    assert fleet["unattributed_variant"] == 1
    # Requests per instance per 1 s bin, and each instance's loaded models over time.
    assert fleet["timeline"]["t"] == [0.0, 1.0, 2.0]
    assert fleet["timeline"]["requests"] == {"A/i-0": [1, 2, 0], "A/i-1": [0, 0, 1],
                                             "B/i-0": [1, 0, 2]}
    assert fleet["loaded_models"]["A/i-1"] == [[0.0, 0], [1.0, 0], [2.9, 1]]


def test_aws_only_names_the_variant_and_no_headers_means_no_fleet() -> None:
    samples = [sample(0.5, variant="A"), sample(0.6, variant="B"), sample(0.7, variant="A")]
    result = LoadResult(plan=PLAN, started_at=0.0, duration_s=1.0, stop_reason=PHASES_COMPLETE,
                        samples=samples)
    fleet = fleet_summary(result)
    assert fleet is not None and fleet["instances"] == []
    assert [(r["variant"], r["requests"], r["hit_ratio"], r["loaded_models_final"])
            for r in fleet["variants"]] == [("A", 2, None, None), ("B", 1, None, None)]
    assert fleet["timeline"]["requests"] == {"A": [2], "B": [1]}
    markdown = "\n".join(to_markdown(summarize(result)).splitlines())
    assert "| A | n/a | 2 |" in markdown and "| instance |" not in markdown
    bare = LoadResult(plan=PLAN, started_at=0.0, duration_s=1.0, stop_reason=PHASES_COMPLETE,
                      samples=[sample(0.5)])
    assert fleet_summary(bare) is None and summarize(bare)["fleet"] is None


def test_headers_and_introspection_are_read() -> None:
    assert served_by({"x-amzn-invoked-production-variant": "A", "x-mme-instance": "A/i-1"}) == (
        "A", "A/i-1")
    assert served_by({"X-Mme-Instance": "B/i-0"}) == ("B", "B/i-0")
    assert served_by({"x-Amzn-Invoked-Production-Variant": "A"}) == ("A", None)
    assert served_by({}) == (None, None)
    described = {"Endpoints": {"local": {"Models": [], "Variants": {
        "AllTraffic": {"Weight": 1.0, "Instances": [
            {"InstanceId": "i-0", "LoadedModelCount": 2, "InFlight": 1, "LoadedBytes": 10},
            {"InstanceId": "i-1", "LoadedModelCount": 0, "InFlight": 0, "LoadedBytes": 0}]}}}}}
    snapshot = fleet_snapshot(described, "local")
    assert snapshot is not None
    assert {k: v["loaded_models"] for k, v in snapshot.items()} == {
        "AllTraffic/i-0": 2, "AllTraffic/i-1": 0}
    assert fleet_snapshot(described, "other") is None


class FleetInvoker:
    """Two instances taking turns; a model's first request on an instance is a miss."""

    def __init__(self) -> None:
        self.turn = 0
        self.loaded: dict[str, set[str | None]] = {"AllTraffic/i-0": set(),
                                                   "AllTraffic/i-1": set()}

    def __call__(self, target_model: str | None) -> Answer:
        self.turn += 1
        instance = f"AllTraffic/i-{self.turn % 2}"
        hit = target_model in self.loaded[instance]
        self.loaded[instance].add(target_model)
        return served("AllTraffic", instance, model_latency_us=500.0, cache_hit=hit)


class FakeFleet:
    def __init__(self, invoker: FleetInvoker) -> None:
        self.invoker = invoker

    async def poll(self) -> dict:
        return {k: {"variant": "AllTraffic", "loaded_models": len(v)}
                for k, v in self.invoker.loaded.items()}

    async def close(self) -> None:
        pass


def test_generator_samples_the_fleet_and_the_report_shows_it(tmp_path: Path) -> None:
    # Long enough for every (model, instance) pair to be drawn on a starved runner too.
    plan = LoadPlan(phases=(Phase(2, 0, 1.5),), target_models=("a", "b", "c"))
    invoker = FleetInvoker()
    with FakeEndpoint(invoker).running() as endpoint:
        result = asyncio.run(run_load(plan, Target("local", endpoint.url), json_body(),
                                      fleet=FakeFleet(invoker), poll_s=0.05))
    assert len(result.fleet) >= 2 and result.fleet[-1].t == pytest.approx(result.duration_s)
    assert {s.instance for s in result.samples} == {"AllTraffic/i-0", "AllTraffic/i-1"}
    summary = summarize(result)
    rows = summary["fleet"]["instances"]
    assert sum(r["requests"] for r in rows) == summary["invocations"]
    assert [r["loaded_models_final"] for r in rows] == [3, 3]
    assert sum(r["cache_misses"] for r in rows) == 6
    paths = write_report(result, tmp_path)
    markdown = paths["markdown"].read_text()
    assert "| instance | variant | requests |" in markdown and "| AllTraffic/i-1 |" in markdown
    assert json.loads(paths["json"].read_text())["fleet"]["instances"][0]["instance"] == (
        "AllTraffic/i-0")
    assert paths["png"].read_bytes().startswith(b"\x89PNG")


# --- a real two-instance emulator ------------------------------------------------------------


@pytest.mark.slow
def test_loadtest_against_two_instances(start_emulator, store: Path, tmp_path: Path) -> None:
    from harness.examples.add_model import write_add_repository
    from harness.loadtest.session import auto_request, run_http
    from harness.model_store import package_repository

    models = [f"m{i}.tar.gz" for i in range(2)]
    for name in models:
        package_repository(write_add_repository(tmp_path / "repos" / name.split(".")[0]),
                           store / name)
    # Room for one model per instance: each model loads on its own instance (a miss), then hits.
    server = start_emulator(model_data=str(store), instances=2, max_loaded_models=1)
    def both_serving() -> dict[str, Any] | None:  # they start in parallel
        with urllib.request.urlopen(f"{server.url}/_emulator/models") as resp:
            fleet = json.loads(resp.read())["Endpoints"]["local"]["Variants"]["AllTraffic"]
        return fleet if fleet["CurrentInstanceCount"] == 2 else None

    fleet = wait_for(both_serving, 120, "both instances serving", interval_s=0.05)
    ids = [f"AllTraffic/{i['InstanceId']}" for i in fleet["Instances"]]
    # m0 is loaded before the run and m1 is not: the run's m0 calls are hits and its first m1
    # call a miss however slow the machine is (the seeded draws start m0, m1, m1, m0).
    request = auto_request(store / models[0])
    warm_up = urllib.request.Request(
        f"{server.url}/endpoints/local/invocations", data=request.body, method="POST",
        headers={"Content-Type": request.content_type,
                 "X-Amzn-SageMaker-Target-Model": models[0]})
    with urllib.request.urlopen(warm_up) as resp:
        assert resp.headers["X-Mme-Model-Cache-Hit"] == "0"
    plan = LoadPlan(phases=(Phase(3, 0, 3.0),), target_models=tuple(models),
                    popularity=Popularity("uniform"), seed=1)
    result = asyncio.run(run_http(server.url, "local", plan, request,
                                  poll_s=0.2))
    summary = summarize(result)

    assert result.stop_reason == PHASES_COMPLETE and summary["errors_by_code"] == {}
    fleet = summary["fleet"]
    rows = fleet["instances"]
    assert [r["instance"] for r in rows] == ids
    assert sum(r["requests"] for r in rows) == summary["invocations"]
    assert fleet["unattributed_instance"] == 0
    assert all(r["requests"] > 0 for r in rows)  # a miss goes to the instance with room
    assert 0 < sum(r["cache_misses"] for r in rows) < summary["invocations"]
    # Each instance's hits and misses are its requests' X-Mme-Model-Cache-Hit headers.
    for row in rows:
        served = [s for s in result.samples if s.instance == row["instance"]]
        assert row["requests"] == len(served)
        assert row["cache_hits"] == sum(1 for s in served if s.cache_hit)
        assert row["cache_misses"] == sum(1 for s in served if s.cache_hit is False)
        if row["requests"]:
            assert row["hit_ratio"] == pytest.approx(row["cache_hits"] / row["requests"],
                                                     abs=1e-4)
        assert row["loaded_models_max"] is not None and row["loaded_models_max"] <= 1
    # The instance hits add up to the endpoint's own ModelCacheHit over the run.
    hits = sum(r["cache_hits"] or 0 for r in rows)
    if summary["cache_hit_ratio"] is not None:
        assert hits / summary["invocations"] == pytest.approx(summary["cache_hit_ratio"],
                                                              abs=1e-3)
    [variant] = fleet["variants"]
    assert (variant["variant"], variant["instances"], variant["requests"]) == (
        "AllTraffic", 2, summary["invocations"])
    paths = write_report(result, tmp_path / "report")
    if os.environ.get("MME_KEEP_REPORT"):  # to look at the plot
        shutil.copytree(tmp_path / "report", os.environ["MME_KEEP_REPORT"], dirs_exist_ok=True)
    markdown = paths["markdown"].read_text()
    assert all(f"| {name} | AllTraffic |" in markdown for name in ids)
    assert paths["png"].stat().st_size > 0
