"""CloudWatch alarms, evaluated: boto3 against a real emulator (``--clock-scale 60``: a minute
per second) with no model and no Triton, alarms on metrics the test publishes with
PutMetricData, SNS actions published to a moto server, all three CloudWatch protocols, and a
restart that keeps every alarm and its state."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests.client_support import DUMMY_CREDENTIALS, S3
from tests.integration.test_cloudwatch import _raw
from tests.support import SUITE_ENV, wait_for

NAMESPACE = "CI/Health"
SCALE = 60


def _start(cache: Path, sns_url: str | None = None) -> EmulatorServer:
    return EmulatorServer(Settings.from_env(
        env=SUITE_ENV, cache_dir=cache, port=0, clock_scale=SCALE,
        sns_endpoint_url=sns_url)).start()


@pytest.fixture(scope="module")
def sns(s3_server: S3) -> str:
    return s3_server.endpoint_url  # moto's server answers every service, SNS and SQS too


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sns: str) -> Iterator[EmulatorServer]:
    server = _start(tmp_path_factory.mktemp("alarms") / "cache", sns)
    yield server
    server.stop()


def _cw(url: str) -> Any:
    return boto3.client("cloudwatch", endpoint_url=url, **DUMMY_CREDENTIALS)


class Publisher:
    """A CI job's health metric: ``value`` published every 0.2 s (12 emulated seconds)."""

    def __init__(self, url: str, metric: str, value: float | None) -> None:
        self.value = value
        self._cw = _cw(url)
        self._metric = metric
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.value is not None:
                self._cw.put_metric_data(Namespace=NAMESPACE, MetricData=[
                    {"MetricName": self._metric, "Value": self.value, "Unit": "Count",
                     "Dimensions": [{"Name": "Job", "Value": "ci"}]}])
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _state(cw: Any, name: str) -> str:
    alarms = cw.describe_alarms(AlarmNames=[name], AlarmTypes=["MetricAlarm", "CompositeAlarm"])
    (alarm,) = alarms["MetricAlarms"] + alarms["CompositeAlarms"]
    return str(alarm["StateValue"])


def _alarm(name: str, metric: str, **overrides: Any) -> dict[str, Any]:
    return {"AlarmName": name, "Namespace": NAMESPACE, "MetricName": metric,
            "Dimensions": [{"Name": "Job", "Value": "ci"}], "Statistic": "Maximum",
            "Period": 60, "EvaluationPeriods": 3, "DatapointsToAlarm": 2, "Threshold": 1.0,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold", **overrides}


def test_an_alarm_on_a_published_metric_fires_notifies_and_recovers(served: EmulatorServer,
                                                                     sns: str) -> None:
    cw = _cw(served.url)
    sns_client = boto3.client("sns", endpoint_url=sns, **DUMMY_CREDENTIALS)
    sqs = boto3.client("sqs", endpoint_url=sns, **DUMMY_CREDENTIALS)
    topic = sns_client.create_topic(Name="ci-alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName="ci-alarms")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    sns_client.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn,
                         Attributes={"RawMessageDelivery": "true"})
    publisher = Publisher(served.url, "Failures", 0.0)
    try:
        cw.put_metric_alarm(**_alarm("ci-failures", "Failures"), AlarmActions=[topic],
                            OKActions=[topic], AlarmDescription="the CI job fails")
        wait_for(lambda: _state(cw, "ci-failures") == "OK", 10, "OK on healthy data")
        publisher.value = 3.0
        wait_for(lambda: _state(cw, "ci-failures") == "ALARM", 10, "ALARM after 2 bad minutes")
        (alarm,) = cw.describe_alarms(AlarmNames=["ci-failures"])["MetricAlarms"]
        assert alarm["StateReason"].startswith("Threshold Crossed: ")
        assert "were greater than or equal to the threshold (1.0)" in alarm["StateReason"]
        assert "(minimum 2 datapoints for OK -> ALARM transition)" in alarm["StateReason"]
        data = json.loads(alarm["StateReasonData"])
        assert data["statistic"] == "Maximum" and data["period"] == 60
        assert data["threshold"] == 1.0 and 3.0 in data["recentDatapoints"]
        publisher.value = 0.0
        wait_for(lambda: _state(cw, "ci-failures") == "OK", 10, "OK again")
    finally:
        publisher.stop()
    # no data at all: INSUFFICIENT_DATA (TreatMissingData missing), within 3 periods
    wait_for(lambda: _state(cw, "ci-failures") == "INSUFFICIENT_DATA", 10, "INSUFFICIENT_DATA")

    # SNS delivers at least once (a publish that timed out is sent again): one per transition.
    transitions: dict[tuple[str, str], dict[str, Any]] = {}

    def three_received() -> bool:
        while True:
            got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get(
                "Messages", [])
            if not got:
                return len(transitions) >= 3
            for message in (json.loads(m["Body"]) for m in got):
                transitions[message["StateChangeTime"], message["NewStateValue"]] = message

    wait_for(three_received, 10, "the SNS notifications")
    received = sorted(transitions.values(), key=lambda m: m["StateChangeTime"])
    assert [(m["OldStateValue"], m["NewStateValue"]) for m in received][:3] == [
        ("INSUFFICIENT_DATA", "OK"), ("OK", "ALARM"), ("ALARM", "OK")]
    fired = received[1]
    assert fired["AlarmName"] == "ci-failures" and fired["AlarmDescription"] == \
        "the CI job fails"
    assert fired["Trigger"]["MetricName"] == "Failures" and fired["Trigger"]["Threshold"] == 1.0
    assert fired["AlarmArn"] == alarm["AlarmArn"]

    history = cw.describe_alarm_history(AlarmName="ci-failures")["AlarmHistoryItems"]
    kinds = [(h["HistoryItemType"], h["HistorySummary"]) for h in reversed(history)]
    assert kinds[0] == ("ConfigurationUpdate", 'Alarm "ci-failures" created')
    assert ("StateUpdate", "Alarm updated from OK to ALARM") in kinds
    assert ("Action", f"Successfully executed action {topic}") in kinds
    only_states = cw.describe_alarm_history(AlarmName="ci-failures",
                                            HistoryItemType="StateUpdate")
    assert {h["HistoryItemType"] for h in only_states["AlarmHistoryItems"]} == {"StateUpdate"}
    pages = list(cw.get_paginator("describe_alarm_history").paginate(
        AlarmName="ci-failures", PaginationConfig={"PageSize": 2}))
    assert len(pages) > 1 and sum(len(p["AlarmHistoryItems"]) for p in pages) == len(history)

    metrics = urllib.request.urlopen(f"{served.url}/metrics").read().decode()
    assert ('cloudwatch_alarm_state{alarm_name="ci-failures",alarm_type="MetricAlarm",'
            'state="INSUFFICIENT_DATA"} 1.0') in metrics
    page = json.load(urllib.request.urlopen(f"{served.url}/_emulator/page/state"))
    assert {"Name": "ci-failures", "State": "INSUFFICIENT_DATA"}.items() <= next(
        a for a in page["Alarms"] if a["Name"] == "ci-failures").items()


@pytest.mark.parametrize(("treat", "state"), [
    ("breaching", "ALARM"), ("notBreaching", "OK"), ("missing", "INSUFFICIENT_DATA")])
def test_treat_missing_data(served: EmulatorServer, treat: str, state: str) -> None:
    """A metric nobody publishes (``ignore``: tests/unit/test_alarm_evaluation.py)."""
    cw = _cw(served.url)
    name = f"missing-{treat}"
    cw.put_metric_alarm(**_alarm(name, "NeverPublished", TreatMissingData=treat))
    wait_for(lambda: cw.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateReason"]
          != "Unchecked: Initial alarm creation" or state == "INSUFFICIENT_DATA", 5,
          "the first evaluation")
    wait_for(lambda: _state(cw, name) == state, 5, state)
    (alarm,) = cw.describe_alarms(AlarmNames=[name])["MetricAlarms"]
    assert alarm["TreatMissingData"] == treat
    cw.delete_alarms(AlarmNames=[name])


def test_percentile_and_metric_math_alarms(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    stop = threading.Event()

    def publish() -> None:
        client = _cw(served.url)
        while not stop.is_set():
            # 99 fast calls and one slow one per batch: p50 is 10 ms, p99 and above 900 ms
            client.put_metric_data(Namespace=NAMESPACE, MetricData=[
                {"MetricName": "LatencyMs", "Values": [10.0, 900.0], "Counts": [99, 1]},
                {"MetricName": "Errors", "Value": 3.0},
                {"MetricName": "Calls", "Value": 10.0}])
            stop.wait(0.2)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        common = {"Namespace": NAMESPACE, "MetricName": "LatencyMs", "Period": 60,
                  "EvaluationPeriods": 1, "Threshold": 500.0,
                  "ComparisonOperator": "GreaterThanThreshold"}
        cw.put_metric_alarm(AlarmName="p50-slow", ExtendedStatistic="p50", **common)
        cw.put_metric_alarm(AlarmName="p100-slow", ExtendedStatistic="p100", **common)
        cw.put_metric_alarm(
            AlarmName="error-rate", EvaluationPeriods=2, Threshold=25.0,
            ComparisonOperator="GreaterThanThreshold", Metrics=[
                {"Id": "errors", "ReturnData": False, "MetricStat": {
                    "Metric": {"Namespace": NAMESPACE, "MetricName": "Errors"},
                    "Period": 60, "Stat": "Sum"}},
                {"Id": "calls", "ReturnData": False, "MetricStat": {
                    "Metric": {"Namespace": NAMESPACE, "MetricName": "Calls"},
                    "Period": 60, "Stat": "Sum"}},
                {"Id": "rate", "Expression": "100 * errors / calls", "Label": "error %"}])
        wait_for(lambda: _state(cw, "p100-slow") == "ALARM", 10, "p100 over 500 ms")
        wait_for(lambda: _state(cw, "error-rate") == "ALARM", 10, "an error rate of 30 %")
        wait_for(lambda: _state(cw, "p50-slow") == "OK", 10, "p50 under 500 ms")
        (math_alarm,) = cw.describe_alarms(AlarmNames=["error-rate"])["MetricAlarms"]
        assert math_alarm["Metrics"][2]["Expression"] == "100 * errors / calls"
        assert "30.0" in math_alarm["StateReason"]
        for_metric = cw.describe_alarms_for_metric(Namespace=NAMESPACE, MetricName="LatencyMs",
                                                   ExtendedStatistic="p50")
        assert [a["AlarmName"] for a in for_metric["MetricAlarms"]] == ["p50-slow"]
    finally:
        stop.set()
        thread.join(timeout=10)
        cw.delete_alarms(AlarmNames=["p50-slow", "p100-slow", "error-rate"])


def test_composite_alarm_rule(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    for name in ("deploy-errors", "deploy-latency"):  # no data, kept as set: ignore
        cw.put_metric_alarm(**_alarm(name, "Nothing", TreatMissingData="ignore"))
        cw.set_alarm_state(AlarmName=name, StateValue="OK", StateReason="test")
    cw.put_composite_alarm(
        AlarmName="deploy-bad",
        AlarmRule='ALARM("deploy-errors") OR (ALARM(deploy-latency) AND NOT OK(deploy-errors))')
    wait_for(lambda: _state(cw, "deploy-bad") == "OK", 5, "the composite alarm OK")
    cw.set_alarm_state(AlarmName="deploy-latency", StateValue="ALARM", StateReason="test")
    time.sleep(0.3)  # a change of a child is seen at once; give the emulator a wrong chance
    assert _state(cw, "deploy-bad") == "OK"  # latency alone, errors OK: the rule is false
    cw.set_alarm_state(AlarmName="deploy-errors", StateValue="ALARM", StateReason="test")
    wait_for(lambda: _state(cw, "deploy-bad") == "ALARM", 5, "the composite alarm in ALARM")
    composite = cw.describe_alarms(AlarmNames=["deploy-bad"], AlarmTypes=["CompositeAlarm"])[
        "CompositeAlarms"][0]
    assert composite["StateReason"].startswith(
        "arn:aws:cloudwatch:us-east-1:123456789012:alarm:deploy-errors transitioned to ALARM at ")
    children = cw.describe_alarms(ChildrenOfAlarmName="deploy-bad")["MetricAlarms"]
    assert sorted(a["AlarmName"] for a in children) == ["deploy-errors", "deploy-latency"]
    parents = cw.describe_alarms(ParentsOfAlarmName="deploy-errors")["CompositeAlarms"]
    assert [a["AlarmName"] for a in parents] == ["deploy-bad"]
    # default AlarmTypes: metric alarms only, as AWS
    assert cw.describe_alarms(AlarmNames=["deploy-bad"])["CompositeAlarms"] == []
    with pytest.raises(ClientError) as raised:  # a child of a composite cannot go first
        cw.delete_alarms(AlarmNames=["deploy-errors"])
    assert raised.value.response["Error"]["Code"] == "ValidationError"
    cw.delete_alarms(AlarmNames=["deploy-bad", "deploy-errors", "deploy-latency"])


def test_describe_filters_and_pages_tags_and_actions(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    topic = "arn:aws:sns:us-east-1:123456789012:nobody-listens"
    for i in range(5):
        cw.put_metric_alarm(**_alarm(f"page-{i}", "Nothing", TreatMissingData="ignore"),
                            AlarmActions=[topic] if i % 2 else [],
                            Tags=[{"Key": "team", "Value": "ml"}])
    pages = list(cw.get_paginator("describe_alarms").paginate(
        AlarmNamePrefix="page-", PaginationConfig={"PageSize": 2}))
    assert [len(p["MetricAlarms"]) for p in pages] == [2, 2, 1]
    assert [a["AlarmName"] for p in pages for a in p["MetricAlarms"]] == [
        f"page-{i}" for i in range(5)]
    with_topic = cw.describe_alarms(AlarmNamePrefix="page-", ActionPrefix="arn:aws:sns:")
    assert [a["AlarmName"] for a in with_topic["MetricAlarms"]] == ["page-1", "page-3"]
    cw.set_alarm_state(AlarmName="page-1", StateValue="ALARM", StateReason="test",
                       StateReasonData='{"why": "a test"}')
    in_alarm = cw.describe_alarms(AlarmNamePrefix="page-", StateValue="ALARM")
    assert [a["AlarmName"] for a in in_alarm["MetricAlarms"]] == ["page-1"]
    assert json.loads(in_alarm["MetricAlarms"][0]["StateReasonData"]) == {"why": "a test"}
    arn = in_alarm["MetricAlarms"][0]["AlarmArn"]
    cw.tag_resource(ResourceARN=arn, Tags=[{"Key": "owner", "Value": "ci"}])
    assert cw.list_tags_for_resource(ResourceARN=arn)["Tags"] == [
        {"Key": "owner", "Value": "ci"}, {"Key": "team", "Value": "ml"}]
    cw.disable_alarm_actions(AlarmNames=["page-3"])
    cw.set_alarm_state(AlarmName="page-3", StateValue="ALARM", StateReason="test")
    (page3,) = cw.describe_alarms(AlarmNames=["page-3"])["MetricAlarms"]
    assert page3["ActionsEnabled"] is False
    actions = cw.describe_alarm_history(AlarmName="page-3", HistoryItemType="Action")
    assert actions["AlarmHistoryItems"] == []  # disabled: no action ran
    # no --sns-endpoint-url here would only record it; this topic does not exist in moto:
    failed = wait_for(lambda: cw.describe_alarm_history(AlarmName="page-1",
                                                     HistoryItemType="Action")[
        "AlarmHistoryItems"], 5, "page-1's action in the history")
    assert failed[0]["HistorySummary"].startswith(f"Failed to execute action {topic}")
    cw.delete_alarms(AlarmNames=[f"page-{i}" for i in range(5)])
    assert cw.describe_alarms(AlarmNamePrefix="page-")["MetricAlarms"] == []


BAD_ALARMS: list[tuple[dict[str, Any], str, str]] = [
    ({"Period": 45}, "InvalidParameterValue", "10, 20, 30 or a multiple of 60"),
    ({"DatapointsToAlarm": 4}, "ValidationError", "DatapointsToAlarm"),
    ({"Period": 60, "EvaluationPeriods": 1441}, "ValidationError", "86400"),
    ({"Period": 3600, "EvaluationPeriods": 169}, "ValidationError", "604800"),
    ({"ComparisonOperator": "LessThanLowerOrGreaterThanUpperThreshold"}, "ValidationError",
     "anomaly detection"),
    ({"ExtendedStatistic": "p99"}, "InvalidParameterCombination", "Statistic"),
    ({"Statistic": None, "ExtendedStatistic": "tm99"}, "ValidationError", "tm99"),
    ({"TreatMissingData": "sometimes"}, "InvalidParameterValue", "TreatMissingData"),
    ({"Threshold": None}, "MissingParameter", "Threshold"),
    ({"AlarmActions": ["arn:aws:lambda:us-east-1:123456789012:function:f"]},
     "ValidationError", "not supported by the emulator"),
    ({"AlarmActions": ["not-an-arn"]}, "InvalidParameterValue", "Invalid arn"),
    ({"OKActions": [f"arn:aws:sns:us-east-1:123456789012:t{i}" for i in range(6)]},
     "InvalidParameterValue", "5"),
    ({"EvaluationInterval": 60}, "ValidationError", "EvaluationInterval"),
    ({"Dimensions": [{"Name": "Job", "Value": "a"}, {"Name": "Job", "Value": "b"}]},
     "InvalidParameterValue", "given twice"),
    ({"Metrics": [{"Id": "m1", "MetricStat": {"Metric": {"Namespace": NAMESPACE,
                                                         "MetricName": "x"},
                                              "Period": 60, "Stat": "Sum"}}]},
     "InvalidParameterCombination", "Metrics"),
]


@pytest.mark.parametrize(("change", "code", "words"), BAD_ALARMS)
def test_bad_alarms_are_refused_and_change_nothing(served: EmulatorServer,
                                                   change: dict[str, Any], code: str,
                                                   words: str) -> None:
    cw = _cw(served.url)
    params = {k: v for k, v in {**_alarm("bad", "x"), **change}.items() if v is not None}
    with pytest.raises(ClientError) as raised:
        cw.put_metric_alarm(**params)
    error = raised.value.response["Error"]
    assert error["Code"] == code and words in error["Message"], error
    assert cw.describe_alarms(AlarmNames=["bad"])["MetricAlarms"] == []


def test_other_bad_requests(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    cw.put_metric_alarm(**_alarm("kept", "x", TreatMissingData="ignore"))

    def code(call: Callable[[], Any]) -> tuple[str, int]:
        with pytest.raises(ClientError) as raised:
            call()
        response = raised.value.response
        return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]

    assert code(lambda: cw.set_alarm_state(AlarmName="nope", StateValue="OK",
                                           StateReason="x")) == ("ResourceNotFound", 404)
    assert code(lambda: cw.set_alarm_state(AlarmName="kept", StateValue="OK", StateReason="x",
                                           StateReasonData="{not json")) == (
        "InvalidFormat", 400)
    assert code(lambda: cw.delete_alarms(AlarmNames=["kept", "nope"])) == (
        "ResourceNotFound", 404)
    assert code(lambda: cw.put_composite_alarm(AlarmName="c", AlarmRule="ALARM(nope)"))[0] == \
        "ValidationError"
    assert code(lambda: cw.put_composite_alarm(AlarmName="c", AlarmRule="ALARM(kept) AND")) \
        [0] == "ValidationError"
    assert code(lambda: cw.describe_alarms(AlarmNames=["kept"], AlarmNamePrefix="k")) == (
        "InvalidParameterCombination", 400)
    assert code(lambda: cw.describe_alarms(NextToken="bogus")) == ("InvalidNextToken", 400)
    assert code(lambda: cw.put_metric_data(Namespace="AWS/SageMaker", MetricData=[
        {"MetricName": "Invocations", "Value": 1.0}])) == ("InvalidParameterValue", 400)
    assert code(lambda: cw.put_metric_data(Namespace=NAMESPACE, MetricData=[
        {"MetricName": "m", "Values": [1.0, 2.0], "Counts": [1.0]}])) == (
        "InvalidParameterValue", 400)
    assert code(lambda: cw.list_tags_for_resource(
        ResourceARN="arn:aws:cloudwatch:us-east-1:123456789012:alarm:nope")) == (
        "ResourceNotFoundException", 404)
    (kept,) = cw.describe_alarms(AlarmNames=["kept"])["MetricAlarms"]
    assert kept["StateValue"] == "INSUFFICIENT_DATA"  # nothing above changed it
    assert cw.describe_alarms(AlarmNames=["c"], AlarmTypes=["CompositeAlarm"])[
        "CompositeAlarms"] == []
    cw.delete_alarms(AlarmNames=["kept"])


@pytest.mark.parametrize("protocol", ["smithy-rpc-v2-cbor", "json", "query"])
def test_every_protocol_puts_describes_and_deletes(served: EmulatorServer,
                                                   protocol: str) -> None:
    name = f"wire-{protocol}"
    _raw(served.url, protocol, "PutMetricAlarm", {
        **_alarm(name, "x", TreatMissingData="ignore"),
        "Tags": [{"Key": "k", "Value": "v"}]})
    _raw(served.url, protocol, "SetAlarmState", {"AlarmName": name, "StateValue": "ALARM",
                                                 "StateReason": "over the wire"})
    out = _raw(served.url, protocol, "DescribeAlarms", {"AlarmNames": [name]})
    (alarm,) = out["MetricAlarms"]
    assert (alarm["StateValue"], alarm["StateReason"], alarm["Threshold"]) == (
        "ALARM", "over the wire", 1.0)
    assert alarm["Dimensions"] == [{"Name": "Job", "Value": "ci"}]
    history = _raw(served.url, protocol, "DescribeAlarmHistory", {"AlarmName": name})
    assert history["AlarmHistoryItems"][0]["HistoryItemType"] == "StateUpdate"
    tags = _raw(served.url, protocol, "ListTagsForResource", {"ResourceARN": alarm["AlarmArn"]})
    assert tags["Tags"] == [{"Key": "k", "Value": "v"}]
    error = _raw(served.url, protocol, "PutMetricAlarm", {**_alarm(name, "x"), "Period": 45})
    assert error["Error"]["Code"] == "InvalidParameterValue"
    _raw(served.url, protocol, "PutMetricData", {"Namespace": NAMESPACE, "MetricData": [
        {"MetricName": f"wire-{protocol}", "Value": 1.0}]})
    _raw(served.url, protocol, "DeleteAlarms", {"AlarmNames": [name]})
    assert _raw(served.url, protocol, "DescribeAlarms", {"AlarmNames": [name]})[
        "MetricAlarms"] == []


def test_alarms_and_their_state_survive_a_restart(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    server = _start(cache)
    try:
        cw = _cw(server.url)
        cw.put_metric_alarm(**_alarm("kept", "x", TreatMissingData="ignore"),
                            Tags=[{"Key": "team", "Value": "ml"}])
        cw.set_alarm_state(AlarmName="kept", StateValue="ALARM", StateReason="before")
        cw.put_composite_alarm(AlarmName="kept-composite", AlarmRule="ALARM(kept)")
        wait_for(lambda: _state(cw, "kept-composite") == "ALARM", 5, "the composite in ALARM")
        before = cw.describe_alarms(AlarmNames=["kept"])["MetricAlarms"][0]
    finally:
        server.stop()
    server = _start(cache)
    try:
        cw = _cw(server.url)
        after = cw.describe_alarms(AlarmNames=["kept"])["MetricAlarms"][0]
        for key in ("AlarmArn", "StateValue", "StateReason", "Threshold", "Period",
                    "TreatMissingData"):
            assert after[key] == before[key], key
        assert _state(cw, "kept-composite") == "ALARM"
        assert cw.list_tags_for_resource(ResourceARN=after["AlarmArn"])["Tags"] == [
            {"Key": "team", "Value": "ml"}]
        history = cw.describe_alarm_history(AlarmName="kept")["AlarmHistoryItems"]
        assert [h["HistorySummary"] for h in history][-1] == 'Alarm "kept" created'
        # and it still evaluates: a state set by hand moves on the next composite change
        cw.set_alarm_state(AlarmName="kept", StateValue="OK", StateReason="after")
        wait_for(lambda: _state(cw, "kept-composite") == "OK", 5, "the composite back to OK")
    finally:
        server.stop()
