"""``mme bench scale``, CI-sized: its hit ratio matches its own LRU simulation."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from mme.bench_scale import lru_hits, run_scale


def test_lru_simulation() -> None:
    sequence = ["a", "b", "a", "c", "b", "d", "a"]
    # capacity 2: a b (a hit) c evicts b; b evicts a; d evicts c; a evicts b
    assert lru_hits(sequence, 2) == [False, False, True, False, False, False, False]
    assert lru_hits(sequence, 3) == [False, False, True, False, True, False, False]


@pytest.mark.slow
def test_bench_scale_hit_ratio_matches_the_lru_simulation(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # One client: a request never joins a load under way, so the emulator is a plain LRU.
    args = argparse.Namespace(models=6, max_loaded_models=2, disk_models=4, requests=24,
                              zipf=1.1, concurrency=1, seed=3)
    ok = run_scale(args, tmp_path)
    out = capsys.readouterr().out
    print(out)
    assert "errors 0" in out
    assert ok, out  # no error, and within 2 points of the simulation
