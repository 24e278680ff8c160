"""``mme bench trace``'s report: the plan's distance from each replay, and the table."""

from __future__ import annotations

from mme.bench_trace import plan_points, table


def _replay(hits: float, matched: bool = True) -> dict[str, object]:
    return {"calls": 10, "counts_match": matched, "inter_arrival_ks": 0.09,
            "per_model": {"a.tar.gz": {"recorded": 7, "replayed": 7},
                          "b.tar.gz": {"recorded": 3, "replayed": 3 if matched else 2}},
            "offset_error_ms": {"p50": 0.8, "p99": 3.0},
            "latency_ms": {"replayed": {"p50": 3.5, "p99": 2598.0}},
            "cache_hit_ratio": {"replayed": hits}}


def test_the_plan_is_measured_in_points_from_each_replay() -> None:
    assert plan_points(0.821, [0.801, 0.824, None]) == [2.0, 0.3, None]


def test_the_table_sets_each_replay_beside_the_recording_and_the_plan() -> None:
    recording = {"calls": 10, "latency_ms": {"p50": 1.8, "p99": 2563.0},
                 "cache_hit_ratio": 0.885}
    text = table(recording, [_replay(0.801), _replay(0.824, matched=False)], 0.821)
    lines = text.splitlines()
    assert lines[0] == "| | recording | replay 1 | replay 2 | mme plan --trace |"
    assert "| calls per model | 7 / 3 | the same, exactly | DIFFERENT |  |" in lines
    assert "| cache hit ratio | 0.885 | 0.801 | 0.824 | 0.821 |" in lines
    assert "| left late p50 / p99 (ms) |  | 0.80 / 3.00 | 0.80 / 3.00 |  |" in lines
