"""``mme bench overhead``'s table: the throughput ratio with its spread over the rounds."""

from __future__ import annotations

from mme.bench_overhead import Measure, PathRow, Row, Workload, _spread, table


def _m(calls_per_second: float) -> Measure:
    return Measure(requests=int(calls_per_second * 3), seconds=3.0, p50_ms=1.0, p99_ms=2.0,
                   errors=0, proxy_cpu_s=0.3, triton_cpu_s=0.6)


def test_each_ratio_shows_its_lowest_and_highest_round() -> None:
    direct = [_m(1000), _m(1000), _m(500)]  # the machine was slower in the third round
    relay = [_m(900), _m(1000), _m(500)]
    emulator = [_m(800), _m(700), _m(450)]
    assert _spread(direct, relay) == (0.9, 1.0)
    assert _spread(direct, emulator) == (0.7, 0.9)
    row = Row(8, _m(1000), (PathRow("relay", _m(950), _spread(direct, relay)),
                            PathRow("emulator", _m(750), _spread(direct, emulator))))
    workload = Workload("trivial", "trivial model", "m.tar.gz", b"{}", {}, {})
    lines = table(workload, "wrk", [row], 3.0, 3).splitlines()
    assert lines[-2].split()[0] == "relay" and lines[-1].split()[0] == "emulator"
    assert lines[-2].endswith("throughput x0.95 (rounds x0.90 to x1.00)")
    assert lines[-1].endswith("throughput x0.75 (rounds x0.70 to x0.90)")
    single = table(workload, "wrk", [row], 3.0, 1).splitlines()
    assert single[-1].endswith("throughput x0.75")  # one round: no spread to show

