"""``mme bench miss`` reads the emulator's own load and unload seconds from its log, leaving out
the warm-up's (each model's first load fits beside the other and evicts nothing first)."""

from __future__ import annotations

from pathlib import Path

from mme.bench_miss import Side

LOG = """\
10:00:01 INFO    emulator.manager.model_manager: model=m0.tar.gz step=load seconds=2.100 size=1
10:00:03 INFO    emulator.manager.model_manager: model=m1.tar.gz step=load seconds=1.600 size=1
10:00:03 INFO    emulator.manager.model_manager: model=m0.tar.gz step=evict reason=measured
10:00:04 INFO    emulator.manager.model_manager: model=m0.tar.gz step=unload seconds=1.150
10:00:05 INFO    emulator.manager.model_manager: model=m0.tar.gz step=load seconds=1.500 size=1
10:00:05 INFO    emulator.manager.model_manager: model=m1.tar.gz step=unload seconds=1.160
10:00:07 INFO    emulator.manager.model_manager: model=m1.tar.gz step=load seconds=1.400 size=1
10:00:07 INFO    emulator.manager.model_manager: model=m0.tar.gz step=unload seconds=1.170
10:00:09 INFO    emulator.manager.model_manager: model=m0.tar.gz step=load seconds=1.300 size=1
10:00:09 INFO    emulator.manager.model_manager: model=m1.tar.gz step=unload seconds=1.180
"""


def test_the_warm_ups_loads_and_the_unloads_they_caused_are_left_out(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    log.write_text(LOG)
    side = Side("now")
    side.read_log(log, skip=4)  # m0, m1, m0, m1: three evictions (the first load made none)
    assert side.loads_s == [1.3]
    assert side.unloads_s == [1.18]
