"""CloudWatch that holds, through boto3 and botocore's own serializers against a real emulator
(``--clock-scale 60``, no model, no Triton): an alarm nobody can make fail the others, request
bodies botocore gzips, an SNS server that never answers, AWS's quotas on every protocol, and
DescribeAlarms pages that survive deletions."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests.client_support import DUMMY_CREDENTIALS, S3, cloudwatch_call, runtime_client
from tests.support import SUITE_ENV, output_of, package, scale_request, wait_for, write_scale_model

PROTOCOLS = ["smithy-rpc-v2-cbor", "json", "query"]
NAMESPACE = "CI/Holds"
TOPIC = "arn:aws:sns:us-east-1:123456789012:holds"


def _start(cache: Path, sns_url: str | None = None,
           model_data: Path | None = None) -> EmulatorServer:
    return EmulatorServer(Settings.from_env(
        env=SUITE_ENV, cache_dir=cache, port=0, clock_scale=60, sns_endpoint_url=sns_url,
        model_data=str(model_data) if model_data else None)).start()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, s3_server: S3) -> Iterator[EmulatorServer]:
    # moto's server answers SNS too: every notification of these tests is really published
    server = _start(tmp_path_factory.mktemp("holds") / "cache", s3_server.endpoint_url)
    yield server
    server.stop()


def _cw(url: str, **config: Any) -> Any:
    return boto3.client("cloudwatch", endpoint_url=url, config=Config(**config),
                        **DUMMY_CREDENTIALS)


def _state(cw: Any, name: str) -> str:
    found = cw.describe_alarms(AlarmNames=[name], AlarmTypes=["MetricAlarm", "CompositeAlarm"])
    (alarm,) = found["MetricAlarms"] + found["CompositeAlarms"]
    return str(alarm["StateValue"])


def _alarm(name: str, **overrides: Any) -> dict[str, Any]:
    return {"AlarmName": name, "Namespace": NAMESPACE, "MetricName": "m", "Statistic": "Maximum",
            "Period": 60, "EvaluationPeriods": 1, "Threshold": 1.0,
            "ComparisonOperator": "GreaterThanThreshold", **overrides}


def _code(call: Any) -> str:
    with pytest.raises(ClientError) as raised:
        call()
    return str(raised.value.response["Error"]["Code"])


def _history(cw: Any, name: str, kind: str) -> list[str]:
    items = cw.describe_alarm_history(AlarmName=name, HistoryItemType=kind,
                                      AlarmTypes=["MetricAlarm", "CompositeAlarm"])
    return [i["HistorySummary"] for i in items["AlarmHistoryItems"]]


# ---------------------------------------------------------------------------------------------
# One alarm never stops the others


def test_a_composite_with_a_deep_rule_stops_no_other_alarm(served: EmulatorServer,
                                                            s3_server: S3) -> None:
    cw = _cw(served.url)
    sns = boto3.client("sns", endpoint_url=s3_server.endpoint_url, **DUMMY_CREDENTIALS)
    topic = sns.create_topic(Name="deep-rule")["TopicArn"]
    cw.put_metric_alarm(**_alarm("deep-kid", TreatMissingData="ignore"))
    cw.put_composite_alarm(AlarmName="deep", AlarmRule="NOT " * 982 + "ALARM(deep-kid)")
    cw.put_composite_alarm(AlarmName="deep-watch", AlarmRule="ALARM(deep-kid)",
                           AlarmActions=[topic])
    cw.set_alarm_state(AlarmName="deep-kid", StateValue="ALARM", StateReason="test")
    wait_for(lambda: _state(cw, "deep-watch") == "ALARM", 10, "the working composite alarms")
    wait_for(lambda: f"Successfully executed action {topic}" in _history(
        cw, "deep-watch", "Action"), 10, "the working composite's action")
    assert _state(cw, "deep") == "ALARM"  # an even number of NOTs: the child's state


@pytest.mark.parametrize("expression", [
    "(" * 1000 + "m1" + ")" * 1000, "-" * 2000 + "m1", "SUM(" * 400 + "m1" + ")" * 400,
    "1^" * 600 + "m1"], ids=["parentheses", "minus", "sum", "power"])
def test_deep_metric_math_is_stored_and_evaluated(served: EmulatorServer,
                                                  expression: str) -> None:
    cw = _cw(served.url)
    name = f"deep-math-{len(expression)}-{expression[0]}"
    stat = {"Metric": {"Namespace": NAMESPACE, "MetricName": name}, "Period": 300,
            "Stat": "Maximum"}
    cw.put_metric_data(Namespace=NAMESPACE, MetricData=[{"MetricName": name, "Value": 5.0}])
    cw.put_metric_alarm(AlarmName=name, EvaluationPeriods=1, Threshold=0.5,
                        ComparisonOperator="GreaterThanThreshold", Metrics=[
                            {"Id": "m1", "MetricStat": stat, "ReturnData": False},
                            {"Id": "e1", "Expression": expression}])
    wait_for(lambda: _state(cw, name) == "ALARM", 10, "the alarm evaluated")


@pytest.mark.parametrize(("rule", "code"), [
    ("(" * 1000 + "TRUE" + ")" * 1000, "ValidationError"),
    (" OR ".join(["TRUE"] * 501), "ValidationError"),
    ("ALARM(" * 300, "ValidationError")])
def test_rules_over_the_limits_are_400(served: EmulatorServer, rule: str, code: str) -> None:
    cw = _cw(served.url)
    assert _code(lambda: cw.put_composite_alarm(AlarmName="too-deep", AlarmRule=rule)) == code
    assert cw.describe_alarms(AlarmNames=["too-deep"], AlarmTypes=["CompositeAlarm"])[
        "CompositeAlarms"] == []


def test_a_rule_of_2500_nots_is_stored_and_evaluated(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    cw.put_metric_alarm(**_alarm("nots-kid", TreatMissingData="ignore"))
    cw.put_composite_alarm(AlarmName="nots", AlarmRule="NOT " * 2501 + "ALARM(nots-kid)")
    cw.set_alarm_state(AlarmName="nots-kid", StateValue="ALARM", StateReason="test")
    wait_for(lambda: _state(cw, "nots") == "OK", 10, "an odd number of NOTs: not the child")
    cw.set_alarm_state(AlarmName="nots-kid", StateValue="OK", StateReason="test")
    wait_for(lambda: _state(cw, "nots") == "ALARM", 10, "and back")


# ---------------------------------------------------------------------------------------------
# Request compression


def test_boto3_publishes_200_metrics_in_one_call(served: EmulatorServer) -> None:
    cw = _cw(served.url)  # botocore gzips a body of 10,240 bytes or more: this one is
    cw.put_metric_data(Namespace=NAMESPACE, MetricData=[
        {"MetricName": f"batch-{k:03d}", "Value": float(k),
         "Dimensions": [{"Name": "Job", "Value": "ci-batch"}]} for k in range(200)])
    listed = cw.list_metrics(Namespace=NAMESPACE, Dimensions=[{"Name": "Job",
                                                               "Value": "ci-batch"}])
    assert len(listed["Metrics"]) == 200


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_gzip_body_is_read_on_every_protocol(served: EmulatorServer, protocol: str) -> None:
    status, _ = cloudwatch_call(served.url, protocol, "PutMetricData", {
        "Namespace": NAMESPACE, "MetricData": [{"MetricName": f"gz-{protocol}", "Value": 2.0}]},
        compress=True)
    assert status == 200
    listed = _cw(served.url).list_metrics(Namespace=NAMESPACE, MetricName=f"gz-{protocol}")
    assert len(listed["Metrics"]) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_gzip_bomb_is_refused_with_413(served: EmulatorServer, protocol: str) -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB in about 64 KB
    path, headers = {
        "smithy-rpc-v2-cbor": ("/service/GraniteServiceVersion20100801/operation/PutMetricData",
                               {"smithy-protocol": "rpc-v2-cbor",
                                "Content-Type": "application/cbor"}),
        "json": ("/", {"X-Amz-Target": "GraniteServiceVersion20100801.PutMetricData",
                       "Content-Type": "application/x-amz-json-1.0"}),
        "query": ("/", {"Content-Type": "application/x-www-form-urlencoded"})}[protocol]
    request = urllib.request.Request(served.url + path, data=bomb, method="POST",
                                     headers={**headers, "Content-Encoding": "gzip"})
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request)
    assert raised.value.code == 413
    assert b"RequestEntityTooLarge" in raised.value.read() + str(raised.value.headers).encode()


def test_put_metric_data_over_one_mb_is_refused(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    data = [{"MetricName": "too-much", "Values": [v + 0.123456789 for v in range(150)],
             "Dimensions": [{"Name": "Shard", "Value": f"s{k:04d}"}]} for k in range(1000)]
    assert _code(lambda: cw.put_metric_data(Namespace=NAMESPACE, MetricData=data)) == \
        "RequestEntityTooLarge"
    assert cw.list_metrics(Namespace=NAMESPACE, MetricName="too-much")["Metrics"] == []


# ---------------------------------------------------------------------------------------------
# Quotas and rules, both ways


def test_the_evaluation_range_is_a_week_for_periods_of_an_hour(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    cw.put_metric_alarm(**_alarm("week", Period=3600, EvaluationPeriods=168))
    cw.put_metric_alarm(**_alarm("week-daily", Period=86400, EvaluationPeriods=7))
    assert _code(lambda: cw.put_metric_alarm(**_alarm("over-week", Period=3600,
                                                      EvaluationPeriods=169))) == "ValidationError"
    assert _code(lambda: cw.put_metric_alarm(**_alarm("over-day", Period=60,
                                                      EvaluationPeriods=1441))) == "ValidationError"
    (alarm,) = cw.describe_alarms(AlarmNames=["week"])["MetricAlarms"]
    assert alarm["EvaluationPeriods"] == 168


CONTROL_CASES = [
    ("PutMetricAlarm", {**_alarm("bad\x01name")}),
    ("PutMetricAlarm", {**_alarm("ok-name"), "MetricName": "m\x7f"}),
    ("PutMetricAlarm", {**_alarm("ok-name"), "Dimensions": [{"Name": "J\x1fob", "Value": "x"}]}),
    ("PutCompositeAlarm", {"AlarmName": "bad\x07composite", "AlarmRule": "TRUE"}),
    ("PutMetricData", {"Namespace": "CI\x00X", "MetricData": [{"MetricName": "m", "Value": 1}]}),
    ("PutMetricData", {"Namespace": NAMESPACE, "MetricData": [{"MetricName": "m\x1b[31m",
                                                               "Value": 1}]}),
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("operation", "params"), CONTROL_CASES,
                         ids=[f"{op}-{k}" for k, (op, _) in enumerate(CONTROL_CASES)])
def test_control_characters_in_names_are_refused(served: EmulatorServer, protocol: str,
                                                 operation: str, params: dict[str, Any]) -> None:
    status, answer = cloudwatch_call(served.url, protocol, operation, params)
    assert status == 400
    assert answer["Error"]["Code"] == "InvalidParameterValue"
    assert "control characters" in answer["Error"]["Message"]
    # nothing was stored, and the query protocol's XML still parses
    status, listed = cloudwatch_call(served.url, "query", "DescribeAlarms", {
        "AlarmTypes": ["MetricAlarm", "CompositeAlarm"], "AlarmNamePrefix": "bad"})
    assert status == 200 and listed["MetricAlarms"] == listed["CompositeAlarms"] == []


@pytest.mark.parametrize(("dimension", "words"), [
    ({"Name": ":job", "Value": "ci"}, "colon"), ({"Name": "job", "Value": "  "}, "whitespace"),
    ({"Name": "jöb", "Value": "ci"}, "ASCII")])
def test_dimension_names_follow_aws_rules(served: EmulatorServer, dimension: dict[str, str],
                                          words: str) -> None:
    cw = _cw(served.url)
    for call in (lambda: cw.put_metric_data(Namespace=NAMESPACE, MetricData=[
                     {"MetricName": "dims", "Value": 1.0, "Dimensions": [dimension]}]),
                 lambda: cw.put_metric_alarm(**_alarm("dims", Dimensions=[dimension]))):
        with pytest.raises(ClientError) as raised:
            call()
        assert raised.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert words in raised.value.response["Error"]["Message"]


def test_names_aws_allows_are_accepted(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    cw.put_metric_alarm(**_alarm("späť alarm: ✓", Dimensions=[{"Name": "job name",
                                                               "Value": "a b"}]))
    assert _state(cw, "späť alarm: ✓") == "INSUFFICIENT_DATA"
    status, listed = cloudwatch_call(served.url, "query", "DescribeAlarms", {"AlarmNames": [
        "späť alarm: ✓"]})
    assert status == 200 and listed["MetricAlarms"][0]["Dimensions"][0]["Value"] == "a b"


def test_the_query_protocol_answers_xml_that_parses_whatever_is_stored(
        served: EmulatorServer) -> None:
    cw = _cw(served.url)  # CBOR carries a control character in a description or a reason
    cw.put_metric_alarm(**_alarm("odd-text", AlarmDescription="line\x01two\x0bthree",
                                 TreatMissingData="ignore"))  # the state set below stays
    cw.set_alarm_state(AlarmName="odd-text", StateValue="ALARM", StateReason="why\x02not")
    status, listed = cloudwatch_call(served.url, "query", "DescribeAlarms",
                                     {"AlarmNames": ["odd-text"]})
    assert status == 200
    (alarm,) = listed["MetricAlarms"]
    assert alarm["AlarmDescription"] == "line\ufffdtwo\ufffdthree"
    assert alarm["StateReason"] == "why\ufffdnot"
    (same,) = cw.describe_alarms(AlarmNames=["odd-text"])["MetricAlarms"]  # CBOR: as stored
    assert same["StateReason"] == "why\x02not"


def test_one_alarm_is_in_at_most_150_composites(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    cw.put_metric_alarm(**_alarm("popular"))
    for k in range(150):
        cw.put_composite_alarm(AlarmName=f"fan-{k:03d}", AlarmRule="ALARM(popular)")
    cw.put_composite_alarm(AlarmName="fan-000", AlarmRule="OK(popular)")  # an update: fine
    assert _code(lambda: cw.put_composite_alarm(
        AlarmName="fan-150", AlarmRule="ALARM(popular)")) == "LimitExceeded"
    cw.delete_alarms(AlarmNames=[f"fan-{k:03d}" for k in range(100)])
    cw.delete_alarms(AlarmNames=[f"fan-{k:03d}" for k in range(100, 150)])


def test_500_elements_are_accepted(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    cw.put_composite_alarm(AlarmName="wide", AlarmRule=" OR ".join(["FALSE"] * 500))
    wait_for(lambda: _state(cw, "wide") == "OK", 10, "the wide rule evaluated")


# ---------------------------------------------------------------------------------------------
# Paging


def test_describe_alarms_pages_survive_deletions(served: EmulatorServer) -> None:
    cw = _cw(served.url)
    names = [f"page-{k:02d}" for k in range(25)]
    for name in names:
        cw.put_metric_alarm(**_alarm(name))
    first = cw.describe_alarms(AlarmNamePrefix="page-", MaxRecords=10)
    assert [a["AlarmName"] for a in first["MetricAlarms"]] == names[:10]
    cw.delete_alarms(AlarmNames=names[:5])  # the ones already shown go
    second = cw.describe_alarms(AlarmNamePrefix="page-", MaxRecords=10,
                                NextToken=first["NextToken"])
    assert [a["AlarmName"] for a in second["MetricAlarms"]] == names[10:20]
    cw.delete_alarms(AlarmNames=names[20:22])  # and some not shown yet
    third = cw.describe_alarms(AlarmNamePrefix="page-", MaxRecords=10,
                               NextToken=second["NextToken"])
    assert [a["AlarmName"] for a in third["MetricAlarms"]] == names[22:]
    assert "NextToken" not in third
    assert _code(lambda: cw.describe_alarms(NextToken="not-a-token")) == "InvalidNextToken"


# ---------------------------------------------------------------------------------------------
# An SNS server that never answers


class Hanging:
    """Accepts connections, reads nothing, answers nothing, until closed."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(connection)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() below
        self.listener.close()
        self._thread.join()
        for connection in self.held:
            connection.close()


def test_a_hanging_sns_server_holds_up_nothing_else(tmp_path: Path) -> None:
    store = tmp_path / "models"
    store.mkdir()
    package(write_scale_model(tmp_path / "repo", "cold", scale=3.0), store / "cold.tar.gz")
    hanging = Hanging()
    server = _start(tmp_path / "cache", hanging.url, store)
    try:
        cw = _cw(server.url)
        names = [f"noisy-{k:02d}" for k in range(12)]
        for name in names:
            cw.put_metric_alarm(**_alarm(name, TreatMissingData="ignore"),
                                AlarmActions=[TOPIC], OKActions=[TOPIC])
        cw.put_composite_alarm(AlarmName="follows", AlarmRule="ALARM(noisy-00)")
        for burst in ("ALARM", "OK", "ALARM"):  # three bursts of notifications
            for name in names:
                cw.set_alarm_state(AlarmName=name, StateValue=burst, StateReason="burst")
        wait_for(lambda: len(hanging.held) >= 1, 10, "publishes hanging on the SNS server")
        # Everything else answers while every publish is still waiting for SNS
        cw.put_metric_data(Namespace=NAMESPACE, MetricData=[{"MetricName": "busy", "Value": 1}])
        now = time.time()
        cw.get_metric_statistics(Namespace=NAMESPACE, MetricName="busy", Period=3600,
                                 StartTime=now - 86400, EndTime=now + 3600, Statistics=["Sum"])
        assert len(cw.describe_alarms(AlarmNamePrefix="noisy-")["MetricAlarms"]) == 12
        wait_for(lambda: _state(cw, "follows") == "ALARM", 10, "the composite follows")
        cw.set_alarm_state(AlarmName="noisy-00", StateValue="OK", StateReason="calm")
        wait_for(lambda: _state(cw, "follows") == "OK", 10, "the composite follows again")
        answer = runtime_client(server.url).invoke_endpoint(  # a cold load: a download first
            EndpointName="local", TargetModel="cold.tar.gz",
            ContentType="application/octet-stream", Body=scale_request([1.0, 2.0, 3.0, 4.0]))
        assert output_of(answer["Body"].read()).tolist() == [3.0, 6.0, 9.0, 12.0]
        failed = [s for n in names for s in _history(cw, n, "Action") if s.startswith("Failed")]
        assert failed == [], "the calls above waited for a publish to give up"
        # and the history says what failed, once a publish has given up
        found = wait_for(lambda: [s for s in _history(cw, "noisy-00", "Action")
                                  if s.startswith(f"Failed to execute action {TOPIC}")],
                         120, "a failed publish in the history")
        assert "timeout" in found[0].lower()
    finally:
        hanging.close()
        server.stop()
