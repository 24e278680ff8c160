"""Time and transitions under the test's control, on a real emulator at clock scale 1 (no
``--clock-scale``): ``POST /_emulator/clock/advance`` passes a guarded deployment's 600 s bakes,
an alarm's periods and a metric's age at once, and ``/_emulator/transitions`` shapes how an
endpoint's or a component's Creating goes. Clients are unmodified boto3.

One emulator for the module: the guarded deployments' endpoint ``ep`` (blue, green and a broken
config, as in ``test_deployments``), the alarm on its InvocationModelErrors, and endpoints for
components (no model of their own, so no Triton) for the transitions. The wall time each
canary took is printed (``-s``) beside the emulated time it covered.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from botocore.exceptions import ClientError, WaiterError

from tests.client_support import create_generation_configs, runtime_client
from tests.component_support import RESOURCES, create_component_endpoint
from tests.integration.test_deployments import (
    FAST,
    ROLE,
    Module,
    canary,
    in_service_on,
    put_model_errors_alarm,
    running_and_other,
)
from tests.multi_container_support import triton_tarball
from tests.support import SUITE_ENV, scale_request, stopped_after, wait_for

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

ALARM = "ep-model-errors"


def emulator_call(url: str, method: str, path: str, body: object | None = None
                  ) -> tuple[int, dict[str, Any]]:
    """One call to the emulator's own routes: (status, JSON answer)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def advance(url: str, seconds: float) -> dict[str, Any]:
    status, answer = emulator_call(url, "POST", "/_emulator/clock/advance", {"seconds": seconds})
    assert status == 200, answer
    return answer


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    root = tmp_path_factory.mktemp("clock")
    module = Module(root, clock_scale=1.0)
    sm = module.client("sagemaker")
    create_generation_configs(sm, module.stores, ROLE)  # blue, green and broken
    tarball = triton_tarball(root / "work", root / "components", "double", 2.0)
    sm.create_model(ModelName="double", ExecutionRoleArn=ROLE,
                    PrimaryContainer={"Image": "triton", "ModelDataUrl": tarball.as_uri()})
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="blue")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    put_model_errors_alarm(module.client("cloudwatch"))
    yield from stopped_after(module)


@pytest.fixture
def transitions(emulator: Module) -> Iterator[str]:
    """The emulator's URL; every transition rule is removed after the test."""
    yield emulator.url
    emulator_call(emulator.url, "DELETE", "/_emulator/transitions")


def alarm_state(cw: Any, name: str) -> str:
    return str(cw.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateValue"])


def alarm_quiet(emulator: Module) -> None:
    """The endpoint's model-error alarm out of ALARM (an advance past its period with no
    error: missing data is not breaching), so a deployment does not roll back at its start."""
    cw = emulator.client("cloudwatch")
    if alarm_state(cw, ALARM) == "ALARM":
        advance(emulator.url, 120)
    wait_for(lambda: alarm_state(cw, ALARM) == "OK", 30, "the model-error alarm OK")


def baking(sm: Any) -> bool:
    pending = sm.describe_endpoint(EndpointName="ep").get("PendingDeploymentSummary") or {}
    return any(s["Status"] == "Baking" for v in pending.get("ProductionVariants") or []
               for s in v.get("VariantStatus") or [])


def call_fails(rt: Any) -> bool:
    try:
        rt.invoke_endpoint(EndpointName="ep", TargetModel="scale.tar.gz",
                           ContentType="application/json", Body=scale_request([1.0] * 4))
    except ClientError as exc:
        return bool(exc.response["Error"]["Code"] == "ModelError")
    return False


def report(what: str, wall_s: float, emulated_s: float) -> None:
    print(f"\n{what}: {emulated_s:.0f} emulated s in {wall_s:.2f} s of wall time "
          f"({emulated_s / wall_s:.0f}x)")


# -- guarded deployments with 600 s bakes, at clock scale 1 -----------------------------------


def test_a_canary_with_a_600_s_bake_is_rolled_back_by_its_alarm_after_an_advance(
        emulator: Module) -> None:
    sm, cw = emulator.client("sagemaker"), emulator.client("cloudwatch")
    alarm_quiet(emulator)
    running, _ = running_and_other(sm)
    started = time.monotonic()
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="broken",
                       DeploymentConfig=canary(50, wait=600, alarms=(ALARM,)))
    wait_for(lambda: baking(sm), 60, "the canary's bake")
    rt = runtime_client(emulator.url)
    wait_for(lambda: call_fails(rt), 30, "a call on the broken canary")  # half the calls
    advanced = advance(emulator.url, 600)
    described = in_service_on(sm, running)  # rolled back, within the advance
    wall = time.monotonic() - started
    assert f'"{ALARM}"' in described["FailureReason"]
    assert "PendingDeploymentSummary" not in described
    # It went into ALARM at the period of the errors, in the emulated past of the answer's
    # present, and back to OK at the next period without errors: the advance walked both.
    history = cw.describe_alarm_history(AlarmName=ALARM, HistoryItemType="StateUpdate",
                                        StartDate=datetime.now(timezone.utc) - timedelta(
                                            hours=1))["AlarmHistoryItems"]
    fired = [h for h in history if h["HistorySummary"] == "Alarm updated from OK to ALARM"]
    assert fired, history
    reason = json.loads(fired[0]["HistoryData"])["newState"]["stateReason"]
    assert reason.startswith("Threshold Crossed"), reason
    assert fired[0]["Timestamp"].timestamp() < advanced["epoch"] - 400
    assert alarm_state(cw, ALARM) == "OK"
    report("canary (600 s bake) rolled back by its alarm", wall, advanced["advanced_s"])


def test_a_healthy_canary_with_600_s_bakes_completes_after_an_advance(emulator: Module) -> None:
    sm = emulator.client("sagemaker")
    alarm_quiet(emulator)
    _, other = running_and_other(sm)
    config = canary(50, wait=600, alarms=(ALARM,), TerminationWaitInSeconds=60)
    started = time.monotonic()
    sm.update_endpoint(EndpointName="ep", EndpointConfigName=other, DeploymentConfig=config)
    wait_for(lambda: baking(sm), 60, "the canary's bake")
    rt = runtime_client(emulator.url)
    assert not any(call_fails(rt) for _ in range(4))
    # The canary's bake, the full fleet's bake and the termination wait, in one advance.
    advanced = advance(emulator.url, 600 + 600 + 60)
    described = in_service_on(sm, other)
    wall = time.monotonic() - started
    assert described["LastDeploymentConfig"] == config
    assert "FailureReason" not in described
    report("canary (two 600 s bakes, 60 s termination wait) completed", wall,
           advanced["advanced_s"])
    assert wall < advanced["advanced_s"] / 10  # far faster than the time it covered


# -- alarms and metrics across an advance ------------------------------------------------------


def test_an_alarm_goes_from_ok_to_alarm_across_an_advance_and_its_datapoint_ages(
        emulator: Module) -> None:
    cw = emulator.client("cloudwatch")
    cw.put_metric_alarm(AlarmName="queue-depth", Namespace="Test/Clock", MetricName="Depth",
                        Statistic="Maximum", Period=300, EvaluationPeriods=1, Threshold=10,
                        ComparisonOperator="GreaterThanThreshold",
                        TreatMissingData="notBreaching")
    wait_for(lambda: alarm_state(cw, "queue-depth") == "OK", 30, "the new alarm OK")
    cw.put_metric_data(Namespace="Test/Clock", MetricData=[{"MetricName": "Depth",
                                                            "Value": 42.0}])
    published = datetime.now(timezone.utc)
    # Two one-minute evaluations pass, each over the last 300 s: the datapoint is in both.
    advanced = advance(emulator.url, 120)
    alarm = cw.describe_alarms(AlarmNames=["queue-depth"])["MetricAlarms"][0]
    assert alarm["StateValue"] == "ALARM"
    assert "Threshold Crossed: 1 datapoint [42.0" in alarm["StateReason"]
    # The datapoint put before the advance is 120 s older after it.
    now = datetime.now(timezone.utc)
    (point,) = cw.get_metric_statistics(
        Namespace="Test/Clock", MetricName="Depth", StartTime=now - timedelta(minutes=20),
        EndTime=now, Period=1, Statistics=["Maximum"])["Datapoints"]
    age = (now - point["Timestamp"]).total_seconds()
    assert 120 <= age <= 120 + (now - published).total_seconds() + 1
    assert advanced["total_advanced_s"] >= 120
    cw.delete_alarms(AlarmNames=["queue-depth"])


# -- a scaling cooldown passed by an advance ----------------------------------------------------


def test_a_step_policys_cooldown_is_passed_by_an_advance(emulator: Module) -> None:
    """An alarm that stays in ALARM runs its +1 step policy at every evaluation: the first
    scales out, the next ones fall within the 300 s cooldown, and the first after it scales out
    again. The endpoint is one for components (its instances start no Triton)."""
    sm, cw = emulator.client("sagemaker"), emulator.client("cloudwatch")
    asg = emulator.client("application-autoscaling")
    create_component_endpoint(sm, "scaled")
    key = {"ServiceNamespace": "sagemaker", "ResourceId": "endpoint/scaled/variant/AllTraffic",
           "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}
    asg.register_scalable_target(**key, MinCapacity=1, MaxCapacity=3)
    policy = asg.put_scaling_policy(
        **key, PolicyName="out", PolicyType="StepScaling", StepScalingPolicyConfiguration={
            "AdjustmentType": "ChangeInCapacity", "Cooldown": 300,
            "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]})
    # One datapoint in a 10-minute period keeps the alarm in ALARM for 10 emulated minutes.
    cw.put_metric_alarm(AlarmName="backlog", Namespace="Test/Clock", MetricName="Backlog",
                        Statistic="Maximum", Period=600, EvaluationPeriods=1, Threshold=10,
                        ComparisonOperator="GreaterThanThreshold",
                        AlarmActions=[policy["PolicyARN"]])
    cw.put_metric_data(Namespace="Test/Clock", MetricData=[{"MetricName": "Backlog",
                                                            "Value": 50.0}])

    def desired() -> int:
        variant = sm.describe_endpoint(EndpointName="scaled")["ProductionVariants"][0]
        return int(variant["DesiredInstanceCount"])

    def done_activities() -> int:
        activities = asg.describe_scaling_activities(ServiceNamespace="sagemaker")
        return sum(a["ResourceId"] == key["ResourceId"] and a["StatusCode"] == "Successful"
                   for a in activities["ScalingActivities"])

    advance(emulator.url, 60)
    wait_for(lambda: desired() == 2, 30, "the first scale-out")
    advance(emulator.url, 60)  # let the scale-out settle (its activity ends)
    wait_for(lambda: done_activities() == 1, 30, "the first activity done")
    advance(emulator.url, 120)  # two more evaluations in ALARM, within the cooldown
    assert desired() == 2
    advance(emulator.url, 180)  # past the cooldown: the next evaluation scales out again
    wait_for(lambda: desired() == 3, 30, "the scale-out after the cooldown")
    cw.delete_alarms(AlarmNames=["backlog"])
    asg.deregister_scalable_target(**key)
    wait_for(lambda: endpoint_status(sm, "scaled") == "InService", 30, "scaled InService")
    delete_endpoint(sm, "scaled")


# -- transitions ---------------------------------------------------------------------------


def put_rule(url: str, rule: dict[str, Any]) -> None:
    status, answer = emulator_call(url, "PUT", "/_emulator/transitions", rule)
    assert status == 200, answer


def endpoint_status(sm: Any, name: str) -> str:
    return str(sm.describe_endpoint(EndpointName=name)["EndpointStatus"])


def delete_endpoint(sm: Any, name: str) -> None:
    sm.delete_endpoint(EndpointName=name)

    def gone() -> bool:
        try:
            sm.describe_endpoint(EndpointName=name)
        except ClientError:
            return True
        return False

    wait_for(gone, 30, f"endpoint {name} deleted")


def create_endpoint(sm: Any, name: str) -> None:
    """An endpoint for components (no model of its own): its Create starts no Triton."""
    sm.create_endpoint_config(EndpointConfigName=name, ExecutionRoleArn=ROLE,
                              ProductionVariants=[{"VariantName": "AllTraffic",
                                                   "InstanceType": "ml.m5.xlarge",
                                                   "InitialInstanceCount": 1}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)


def test_a_creating_that_takes_30_emulated_seconds_ends_after_an_advance_of_30(
        emulator: Module, transitions: str) -> None:
    sm = emulator.client("sagemaker")
    put_rule(transitions, {"resource": "endpoint", "name": "slow-*", "status": "Creating",
                           "duration_s": 30})
    create_endpoint(sm, "slow-1")
    assert endpoint_status(sm, "slow-1") == "Creating"
    advance(transitions, 29)
    assert endpoint_status(sm, "slow-1") == "Creating"  # one emulated second to go
    advance(transitions, 1)
    wait_for(lambda: endpoint_status(sm, "slow-1") == "InService", 30, "slow-1 InService")
    delete_endpoint(sm, "slow-1")


def test_a_creating_that_fails_fails_the_waiter_with_its_reason(
        emulator: Module, transitions: str) -> None:
    sm = emulator.client("sagemaker")
    reason = "Insufficient capacity for ml.m5.xlarge (set by the test)."
    put_rule(transitions, {"resource": "endpoint", "name": "doomed", "status": "Creating",
                           "outcome": "Failed", "reason": reason})
    create_endpoint(sm, "doomed")
    with pytest.raises(WaiterError, match="Failed"):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="doomed", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="doomed")
    assert (described["EndpointStatus"], described["FailureReason"]) == ("Failed", reason)
    delete_endpoint(sm, "doomed")


def test_a_creating_that_never_ends_stays_creating_until_deleted(
        emulator: Module, transitions: str) -> None:
    sm = emulator.client("sagemaker")
    put_rule(transitions, {"resource": "endpoint", "name": "stuck", "status": "Creating",
                           "never": True})
    create_endpoint(sm, "stuck")
    advance(transitions, 3600)
    assert endpoint_status(sm, "stuck") == "Creating"
    _, listed = emulator_call(transitions, "GET", "/_emulator/transitions")
    assert listed == {"transitions": [{"resource": "endpoint", "name": "stuck",
                                       "status": "Creating", "never": True}]}
    delete_endpoint(sm, "stuck")  # the held Create is cancelled


def test_a_components_creating_takes_its_emulated_seconds(
        emulator: Module, transitions: str) -> None:
    sm = emulator.client("sagemaker")
    create_component_endpoint(sm, "ic-ep")
    put_rule(transitions, {"resource": "inference-component", "name": "ic-*",
                           "status": "Creating", "duration_s": 30})
    sm.create_inference_component(
        InferenceComponentName="ic-double", EndpointName="ic-ep", VariantName="AllTraffic",
        Specification={"ModelName": "double", "ComputeResourceRequirements": RESOURCES},
        RuntimeConfig={"CopyCount": 1})

    def status() -> str:
        return str(sm.describe_inference_component(InferenceComponentName="ic-double")[
            "InferenceComponentStatus"])

    assert status() == "Creating"
    advance(transitions, 30)
    wait_for(lambda: status() == "InService", 60, "ic-double InService")
    sm.delete_inference_component(InferenceComponentName="ic-double")

    def gone() -> bool:
        try:
            status()
        except ClientError:
            return True
        return False

    wait_for(gone, 60, "ic-double deleted")
    delete_endpoint(sm, "ic-ep")


def test_a_copys_start_waits_its_emulated_seconds_or_fails_with_its_reason(
        emulator: Module, transitions: str) -> None:
    sm = emulator.client("sagemaker")
    create_component_endpoint(sm, "copy-ep")
    put_rule(transitions, {"resource": "copy", "name": "slow-*", "status": "Creating",
                           "duration_s": 45})
    put_rule(transitions, {"resource": "copy", "name": "bad-*", "status": "Creating",
                           "outcome": "Failed", "reason": "CUDA error: no kernel image"})
    for name in ("slow-double", "bad-double"):
        sm.create_inference_component(
            InferenceComponentName=name, EndpointName="copy-ep", VariantName="AllTraffic",
            Specification={"ModelName": "double", "ComputeResourceRequirements": RESOURCES},
            RuntimeConfig={"CopyCount": 1})

    def described(name: str) -> dict[str, Any]:
        answer: dict[str, Any] = sm.describe_inference_component(InferenceComponentName=name)
        return answer

    failed = wait_for(lambda: (lambda d: d if d["InferenceComponentStatus"] == "Failed"
                               else None)(described("bad-double")), 60, "bad-double Failed")
    assert "CUDA error: no kernel image" in failed["FailureReason"]
    assert described("slow-double")["InferenceComponentStatus"] == "Creating"  # its copy waits
    advance(transitions, 45)
    wait_for(lambda: described("slow-double")["InferenceComponentStatus"] == "InService", 60,
             "slow-double InService")
    for name in ("slow-double", "bad-double"):
        sm.delete_inference_component(InferenceComponentName=name)
    wait_for(lambda: not sm.list_inference_components(
        EndpointNameEquals="copy-ep")["InferenceComponents"], 60, "the components deleted")
    delete_endpoint(sm, "copy-ep")


@pytest.mark.parametrize(("path", "method", "body", "says"), [
    ("/_emulator/clock/advance", "POST", {"seconds": -5}, ">= 0"),
    ("/_emulator/clock/advance", "POST", {"seconds": "600"}, "number"),
    ("/_emulator/clock/advance", "POST", {}, '{"seconds": N}'),
    ("/_emulator/transitions", "PUT", {"resource": "model", "status": "Creating",
                                       "duration_s": 1}, '"resource" must be one of'),
    ("/_emulator/transitions", "PUT", {"resource": "endpoint", "status": "InService",
                                       "duration_s": 1}, '"status" must be one of'),
    ("/_emulator/transitions", "PUT", {"resource": "endpoint", "status": "Creating",
                                       "duration_s": -1}, ">= 0"),
    ("/_emulator/transitions", "PUT", {"resource": "endpoint", "status": "Creating",
                                       "outcome": "Failed", "never": True}, "one or the other"),
    ("/_emulator/transitions", "PUT", {"resource": "copy", "status": "Deleting",
                                       "duration_s": 1}, '"status" must be one of Creating;'),
])
def test_what_could_never_apply_is_refused_with_what_to_fix(
        emulator: Module, path: str, method: str, body: dict[str, Any], says: str) -> None:
    status, answer = emulator_call(emulator.url, method, path, body)
    assert status == 400
    assert says in answer["error"]


def test_transition_rules_from_a_file_are_in_force_from_the_start(tmp_path: Any) -> None:
    from emulator.server import EmulatorServer
    from emulator.settings import Settings

    rules = tmp_path / "transitions.json"
    rules.write_text(json.dumps([{"resource": "endpoint", "name": "held-*",
                                  "status": "Creating", "never": True}]))
    with EmulatorServer(Settings.from_env(env=SUITE_ENV, cache_dir=tmp_path / "cache", port=0,
                                          transitions=rules)) as served:
        _, listed = emulator_call(served.url, "GET", "/_emulator/transitions")
        assert listed == {"transitions": [{"resource": "endpoint", "name": "held-*",
                                           "status": "Creating", "never": True}]}
    rules.write_text(json.dumps([{"resource": "model", "status": "Creating", "duration_s": 1}]))
    done = subprocess.run([sys.executable, "-m", "mme", "serve", "--transitions", str(rules),
                           "--port", "0", "--cache-dir", str(tmp_path / "c2")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "rule [0]" in done.stderr and '"resource" must be one of' in done.stderr


def test_the_plugins_mme_time_advances_and_removes_its_rules_after_a_failing_test(
        emulator: Module, transitions: str, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner="""
        import boto3

        def test_a_slow_create_passes_with_an_advance(mme_time):
            mme_time.transition("endpoint", "inner-*", "Creating", duration_s=120)
            assert mme_time.advance(120)["advanced_s"] == 120
            raise AssertionError("the test fails with its rule in force")

        def test_the_next_test_finds_none(mme_time):
            assert mme_time.transitions() == []
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--mme-url={emulator.url}")
    result.assert_outcomes(passed=1, failed=1)
    _, listed = emulator_call(emulator.url, "GET", "/_emulator/transitions")
    assert listed == {"transitions": []}
