"""Fault rules read once and drawn per call: which call a rule matches, when it fires (order,
probability from its seed, count, expiry), what a latency draws, and when the fast path skips
the table altogether."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest

from emulator.faults.rules import (
    CallFacts,
    ErrorAnswer,
    Latency,
    ModelErrorAnswer,
    RuleError,
    parse_rule,
)
from emulator.faults.table import FaultTable

INVOKE = CallFacts("sagemaker-runtime", "InvokeEndpoint", "ep", "AllTraffic", "i-2",
                   "bert-large.tar.gz")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _rule(**rule: Any) -> Any:
    return parse_rule({"fault": {"error": "ThrottlingException"}, **rule})


@pytest.mark.parametrize(("match", "matched"), [
    ({}, True),
    ({"endpoint": "ep"}, True),
    ({"endpoint": "other"}, False),
    ({"target_model": "bert-*"}, True),
    ({"target_model": "bert-[bl]ase.tar.gz"}, False),
    ({"instance": "i-2", "variant": "AllTraffic"}, True),
    ({"instance": "i-1"}, False),
    ({"inference_component": "ic"}, False),
    ({"operation": "InvokeEndpoint"}, True),
    ({"operation": "DescribeEndpoint"}, False),
    ({"service": "cloudwatch"}, False),
])
def test_a_match_covers_the_calls_it_names(match: dict[str, str], matched: bool) -> None:
    assert _rule(match=match).match.covers(INVOKE) is matched


def test_runtime_only_fields_name_invoke_endpoint_and_an_operation_names_its_service() -> None:
    rule = _rule(match={"target_model": "x*"})
    assert (rule.match.service, rule.match.operation) == ("sagemaker-runtime", "InvokeEndpoint")
    assert _rule(match={"operation": "PutMetricData"}).match.service == "cloudwatch"
    with pytest.raises(RuleError, match="name the service too"):
        _rule(match={"operation": "ListTagsForResource"})  # CloudWatch's and others'


def test_faults_are_read_with_their_statuses_and_kinds() -> None:
    assert _rule().fault == ErrorAnswer("ThrottlingException", 400, "Rate exceeded")
    assert parse_rule({"fault": {"error": "ModelNotReadyException"}}).fault.status == 429
    assert parse_rule({"match": {"operation": "DescribeEndpoint"},
                       "fault": {"error": "ServiceUnavailable"}}).fault.status == 503
    assert parse_rule({"fault": {"model_error": {"status": 503, "message": "busy"}}}).fault == \
        ModelErrorAnswer(503, "busy")
    assert parse_rule({"fault": {"model_latency_ms": {"p50": 10, "p99": 100}}}).fault == \
        Latency(0.01, 0.1, on_model=True)


def test_rules_fire_in_the_order_added_and_a_spent_one_stays_listed() -> None:
    table = FaultTable()
    first = table.add(_rule(match={"target_model": "bert*"}, count=1))
    second = table.add(_rule())
    assert [table.draw(INVOKE).rule_id for _ in range(3)] == [first, second, second]
    listed = {r["id"]: r for r in table.describe()}
    assert (listed[first]["state"], listed[first]["fired"]) == ("spent", 1)
    assert (listed[second]["state"], listed[second]["fired"]) == ("active", 2)


def test_the_fast_path_is_skipped_once_no_rule_is_in_force() -> None:
    clock = Clock()
    table = FaultTable(clock)
    assert not table.armed
    rule = table.add(_rule(count=2, expires_in_s=10))
    assert table.armed
    table.draw(INVOKE)
    clock.now += 11  # expired before its count was spent
    assert table.draw(INVOKE) is None and not table.armed
    assert table.describe()[0]["state"] == "expired"
    assert table.remove(rule) and table.describe() == []
    assert not table.remove(rule)


def test_a_seeded_probability_fires_on_the_same_calls_every_time() -> None:
    def fired() -> list[bool]:
        table = FaultTable()
        table.add(_rule(probability=0.3, seed=5))
        return [table.draw(INVOKE) is not None for _ in range(200)]

    once = fired()
    assert once == fired()
    assert 0.2 < sum(once) / len(once) < 0.4
    table = FaultTable()
    table.add(_rule(probability=0.3, seed=6))
    assert [table.draw(INVOKE) is not None for _ in range(200)] != once


def test_a_latency_has_the_percentiles_it_was_given() -> None:
    latency = Latency(0.1, 0.9, on_model=False)
    rng = random.Random(1)
    draws = sorted(latency.draw(rng) for _ in range(20_000))
    assert statistics.median(draws) == pytest.approx(0.1, rel=0.05)
    assert draws[int(len(draws) * 0.99)] == pytest.approx(0.9, rel=0.1)
    assert Latency(0.3, 0.3, on_model=True).draw(rng) == 0.3


def test_listeners_are_told_of_each_injection() -> None:
    table = FaultTable()
    told: list[str] = []
    table.listeners.append(lambda fired: told.append(fired.describe()))
    table.add(parse_rule({"fault": {"latency_ms": 250}}))
    table.draw(INVOKE)
    assert told == ["250 ms more on the call"]


def test_faults_on_the_model_and_the_instance_are_drawn_where_they_act() -> None:
    from emulator.faults.rules import DownloadFault, InstanceFault, LoadFault, stage_of

    load = parse_rule({"fault": {"load": {"fail": "no"}}})
    download = parse_rule({"fault": {"download": {"stall_after_bytes": 10}}})
    kill = parse_rule({"fault": {"instance": "kill"}})
    assert (load.fault, download.fault, kill.fault) == (
        LoadFault(fail="no"), DownloadFault(10, stall=True), InstanceFault(kill=True))
    assert [stage_of(r.fault) for r in (load, download, kill)] == ["load", "download", "call"]
    assert load.match.operation == "InvokeEndpoint"  # the call that needs the load
    table = FaultTable()
    for rule in (load, download, kill):
        table.add(rule)
    assert table.draw(INVOKE).fault == kill.fault  # an answer's draw skips the load's rules
    assert table.draw(INVOKE, "load").fault == load.fault
    assert table.draw(INVOKE, "download").fault == download.fault
    with pytest.raises(RuleError, match="applies to InvokeEndpoint only"):
        parse_rule({"match": {"operation": "DescribeEndpoint"}, "fault": {"load": "disk_full"}})
