"""``mme plan``'s prediction: the LRU replay on measured sizes, the traffic
it replays (the same Zipf draws as ``mme loadtest``), the cheapest configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.loadtest.config import Popularity
from harness.loadtest.popularity import Chooser
from mme import plan

MIB = 1024**2


def _costs(**sizes_mib: int) -> dict[str, plan.ModelCost]:
    return {name: plan.ModelCost(name, size * MIB, 1000, load_s=1.0, unload_s=0.5)
            for name, size in sizes_mib.items()}


def test_the_zipf_draws_are_mme_loadtests() -> None:
    targets = ["a", "b", "c", "d"]
    chooser = Chooser(targets, Popularity("zipf", 1.5), seed=7)
    assert plan.zipf_requests(targets, 1.5, 500, 7) == [chooser() for _ in range(500)]


def test_the_replay_evicts_by_measured_size_and_charges_the_victims_unloads() -> None:
    costs = _costs(a=40, b=40, c=40)
    requests = ["a", "b", "a", "c", "a", "b"]
    hits, added, resident = plan.replay(requests, costs, 100 * MIB, 1, hard_limit=100 * MIB)
    # a, b miss; a hits; c misses and evicts b (LRU); a hits; b misses and evicts c. The
    # victim's memory held during its unload would pass the instance's: the load waits for it.
    assert hits == 2
    assert added == [1.0, 1.0, 0.0, 1.5, 0.0, 1.5]
    assert resident == 2
    # Where it would not (no limit, or room for it), the load overlaps the victim's unload.
    for limit in (None, 200 * MIB):
        assert plan.replay(requests, costs, 100 * MIB, 1, limit)[1] == [
            1.0, 1.0, 0.0, 1.0, 0.0, 1.0]


def test_a_model_larger_than_the_budget_always_misses() -> None:
    hits, added, _ = plan.replay(["big", "big"], _costs(big=200), 100 * MIB, 1)
    assert hits == 0 and added == [1.0, 1.0]


def test_more_instances_hold_more_models() -> None:
    costs = _costs(a=60, b=60)
    requests = ["a", "b"] * 10
    one = plan.replay(requests, costs, 100 * MIB, 1)
    two = plan.replay(requests, costs, 100 * MIB, 2)
    assert one[0] == 0 and two[0] == 18  # two instances: each model has its own home


def test_predictions_and_the_cheapest_configuration_that_meets_the_target() -> None:
    costs = _costs(a=30, b=30, c=30, d=30)
    requests = plan.zipf_requests(list(costs), 1.0, 5000, 0)
    small = plan.Instance("small", 70 * MIB, 80 * MIB)
    large = plan.Instance("large", 140 * MIB, 160 * MIB)
    rows = plan.predict(requests, costs, [small, large], [1, 2], rps=10.0,
                        max_miss_ratio=0.01, p99_ms=None, prices={})
    by = {(r.instance, r.count): r for r in rows}
    assert by[("large", 1)].hit_ratio > by[("small", 1)].hit_ratio
    assert by[("small", 1)].misses_per_minute == pytest.approx(
        (1 - by[("small", 1)].hit_ratio) * 600, abs=0.01)
    assert by[("small", 1)].added_p99_ms >= 1000  # a miss costs its load
    best = plan.cheapest(rows, [small, large])
    assert best is not None and best.meets_target
    assert (best.instance, best.count) == ("large", 1)  # 160 MiB: less than small x2 (160), tie
    text = plan.table(rows, best)
    assert "hit ratio" in text and "yes *" in text
    priced = plan.predict(requests, costs, [small, large], [1, 2], 10.0, 0.01, None,
                          {"small": 0.1, "large": 0.5})
    best_priced = plan.cheapest(priced, [small, large])
    assert best_priced is not None and (best_priced.instance, best_priced.count) == ("small", 2)


def test_a_trace_is_replayed_as_recorded(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text('a.tar.gz\n{"TargetModel": "b.tar.gz"}\n\na.tar.gz\n')
    assert plan.trace_requests(str(trace), 5) == (
        ["a.tar.gz", "b.tar.gz", "a.tar.gz", "a.tar.gz", "b.tar.gz"], None)
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(ValueError, match="no TargetModel"):
        plan.trace_requests(str(tmp_path / "empty.txt"), 5)


def test_an_unknown_instance_type_says_what_to_give() -> None:
    with pytest.raises(SystemExit, match="--memory-budget"):
        plan._instances(["ml.z9.huge"], None)
    (found,) = plan._instances(["ml.m5.xlarge"], None)
    assert found.budget_bytes == int(16 * 1024**3 * 0.9)
