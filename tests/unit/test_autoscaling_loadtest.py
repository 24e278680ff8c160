"""The load test's view of scaling: instance counts per variant and scaling activities, in the
summary, the Markdown and the plot (Locust on a fake endpoint; ``test_autoscaling.py`` scales a
real one)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from harness.loadtest.config import LoadPlan, Phase
from harness.loadtest.locust_run import Target, run_load
from harness.loadtest.report import write_report
from harness.loadtest.scaling import ScalingPoll
from tests.loadtest_support import FakeEndpoint, json_body


class FakeWatch:
    """One instance, then three once an activity appears, as DescribeEndpoint would show."""

    def __init__(self) -> None:
        self.polls = 0

    async def poll(self) -> ScalingPoll:
        self.polls += 1
        if self.polls < 4:
            return ScalingPoll({"AllTraffic": (1, 1)}, [])
        activity = {"ActivityId": "a1", "Description": "Setting desired instance count to 3.",
                    "ResourceId": "endpoint/e/variant/AllTraffic"}
        current = 1 if self.polls < 6 else 3
        return ScalingPoll({"AllTraffic": (current, 3)}, [activity])


def test_instances_and_activities_are_reported_and_plotted(tmp_path: Path) -> None:
    plan = LoadPlan(phases=(Phase(2, 0, 1.0),))
    watch = FakeWatch()
    with FakeEndpoint().running() as endpoint:
        result = asyncio.run(run_load(plan, Target("local", endpoint.url), json_body(),
                                      poll_s=0.05, scaling=watch,  # type: ignore[arg-type]
                                      think_s=0.01))
    paths = write_report(result, tmp_path)
    summary = json.loads(paths["json"].read_text())
    series = summary["instances"]["AllTraffic"]
    assert [row[1:] for row in series][:1] == [[1, 1]] and series[-1][1:] == [3, 3]
    (event,) = [e for e in summary["events"] if e["kind"] == "scaling"]
    assert event["detail"] == "Setting desired instance count to 3."
    assert "| instances of AllTraffic (min / max / final) | 1 / 3 / 3 |" in paths[
        "markdown"].read_text()
    assert paths["png"].stat().st_size > 10_000
