"""What the live page keeps and paints of a deployment's story, without a server: the state
inside the page's HTML (its first paint), the error count the tiles show, the history of
deployments and scaling activities, the sentence a scaling activity is told in."""

from __future__ import annotations

import json
import re

from emulator.autoscaling.state import ScalingActivity, ScalingPolicy
from emulator.page.activities import scaling_listener
from emulator.page.feed import ERROR_LIMIT, EVENT_LIMIT, Feed
from emulator.page.routes import page_html

INITIAL = re.compile(rb'<script id="initial-state" type="application/json">(.*?)</script>',
                     re.S)


def test_the_page_carries_the_state_it_was_served_with_and_no_name_can_end_its_script() -> None:
    hostile = "</script><script>alert(1)</script><!--"
    state = {"Endpoints": {"ep": {"Models": [{"TargetModel": hostile}]}}, "Time": 1.0}
    html = page_html(state)
    found = INITIAL.search(html)
    assert found is not None, "no state inside the page"
    assert json.loads(found.group(1)) == state  # the same state, whole
    assert b"<script>alert" not in html and b"<!--" not in html
    # It comes before the script that reads it.
    assert html.index(b'id="initial-state"') < html.index(b'src="/_emulator/page/app.js"')
    # Without a state (--auth sigv4: the page's HTML is open, its data is not): none inside.
    assert INITIAL.search(page_html(None)) is None


def test_the_error_count_counts_every_error_told_beyond_the_ones_listed() -> None:
    feed = Feed()
    for index in range(ERROR_LIMIT + 7):
        feed.invocation_failed("ep", f"m{index}.tar.gz", 500, "ModelError", "broken")
    feed.invocation_failed("other", None, 400, "ValidationError", "no TargetModel")
    assert len(feed.recent_errors()) == ERROR_LIMIT
    assert feed.error_counts == {"ep": ERROR_LIMIT + 7, "other": 1}


def test_a_rollback_stays_in_the_history_whatever_the_model_events_after_it() -> None:
    feed = Feed()
    feed.activity("ep", "rolled-back", "rolled back: blue serves again", {"Alarm": "ep-5xx"})
    observe = feed._observer("ep", "AllTraffic", "i-1")
    for index in range(EVENT_LIMIT + 10):
        observe("loaded", f"m{index}.tar.gz", {"seconds": 0.1})
    assert len(feed.recent_events(EVENT_LIMIT)) == EVENT_LIMIT
    (kept,) = feed.recent_activities()
    assert (kept["endpoint"], kept["kind"], kept["details"]) == ("ep", "rolled-back",
                                                                 {"Alarm": "ep-5xx"})


def test_a_scaling_activity_is_told_with_its_alarm_policy_and_counts() -> None:
    feed = Feed()
    policy = ScalingPolicy(name="scale-out", resource_id="endpoint/ep/variant/AllTraffic",
                           policy_type="StepScaling", configuration={}, arn="arn:policy",
                           created=0.0)
    activity = ScalingActivity(
        resource_id="endpoint/ep/variant/AllTraffic", description="Setting desired count to 3.",
        cause="monitor alarm ep-busy in state ALARM triggered policy scale-out", started=0.0,
        desired=3, scale_in=False, previous=1, policy_arn="arn:policy", alarm="ep-busy")
    scaling_listener(feed)(activity, policy)
    (told,) = feed.recent_activities()
    assert told["endpoint"] == "ep" and told["kind"] == "scaling"
    assert told["text"] == ("variant AllTraffic: instances 1 -> 3, alarm ep-busy triggered "
                            "policy scale-out")
    assert {k: told["details"][k] for k in ("Alarm", "Policy", "From", "To")} == {
        "Alarm": "ep-busy", "Policy": "scale-out", "From": 1, "To": 3}
    # Min/Max capacity, no alarm: the cause as Application Auto Scaling gives it.
    bounds = ScalingActivity(resource_id="inference-component/ic", description="",
                             cause="minimum capacity was set to 2", started=0.0, desired=2,
                             scale_in=False, previous=0)
    scaling_listener(feed)(bounds, None)
    assert feed.recent_activities()[0]["text"] == ("inference component ic: copies 0 -> 2, "
                                                   "minimum capacity was set to 2")
