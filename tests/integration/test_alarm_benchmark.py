"""``python -m emulator.cloudwatch.benchmark`` runs end to end (small: 30 alarms) and prints each
figure it promises; the figures themselves are printed, never asserted."""

from __future__ import annotations

import subprocess
import sys


def test_the_alarm_benchmark_prints_its_figures() -> None:
    done = subprocess.run([sys.executable, "-m", "emulator.cloudwatch.benchmark", "--alarms",
                           "30", "--clients", "2", "--puts", "3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("alarms created by 2 clients: 30 in ")
    assert lines[1].startswith("one PutMetricAlarm with 30+ stored: median ")
    assert lines[2].startswith("server RSS with 33 alarms: ")
    assert lines[3].startswith("restart with 33 alarms: DescribeAlarms answered ")
    assert lines[3].endswith("; 33 listed")
    assert lines[4].startswith("server RSS after the restart: ")
