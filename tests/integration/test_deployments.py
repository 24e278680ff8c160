"""Guarded deployments against a real emulator: boto3 (sagemaker, sagemaker-runtime, cloudwatch)
over HTTP, real Tritons for both generations, ``--clock-scale 60`` (a 240 s bake takes 4 s).

One emulator for the module (each generation is one Triton; at most two run at once). Blue
serves ``scale.tar.gz`` multiplying by 2, green the same TargetModel multiplying by 3, so every
answer says which generation served it. A steady client runs through every deployment and no
call may fail because of the deployment itself (shift, promotion, rollback, drain).
"""

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
from botocore.config import Config

from emulator.server import EmulatorServer
from emulator.settings import Settings
from tests import support
from tests.client_support import DUMMY_CREDENTIALS, create_generation_configs, runtime_client
from tests.integration import test_page
from tests.support import (
    SUITE_ENV,
    output_of,
    package,
    scale_request,
    stopped_after,
    write_scale_model,
)

pytestmark = pytest.mark.slow
browser_page = test_page.browser_page  # the page test's headless Chromium, as a fixture here
WAIT_MS = test_page.WAIT_MS

SCALE = 60.0
FAST = {"Delay": 0.25, "MaxAttempts": 480}
BLUE, GREEN = 2.0, 3.0
FACTOR = {"blue": BLUE, "green": GREEN}  # what each config's model answers
ROLE = "arn:aws:iam::123456789012:role/x"
# Between one client's calls: about a hundred a second in all still (over a hundred in each
# emulated minute at clock scale 60), without taking most of a core for it.
PAUSE_S = 0.02


class Module:
    """The module's emulator and what was put in it."""

    def __init__(self, root: Path, clock_scale: float = SCALE) -> None:
        self.root = root
        self.cache = root / "cache"
        self.clock_scale = clock_scale
        self.server = self._start()
        self.stores: dict[str, Path] = {}
        for name, factor in (("blue", BLUE), ("green", GREEN), ("broken", None)):
            store = root / "stores" / name
            store.mkdir(parents=True)
            folder = write_scale_model(root / "work" / name, "scale", factor or 1.0)
            if factor is None:  # a model that fails to load: every call on it is a ModelError
                (folder / "1" / "model.py").write_text("raise RuntimeError('broken on purpose')\n")
            package(folder, store / "scale.tar.gz", "folder")
            self.stores[name] = store

    def _start(self) -> EmulatorServer:
        return EmulatorServer(Settings.from_env(
            env=SUITE_ENV, cache_dir=self.cache, port=0, clock_scale=self.clock_scale,
            routing_seed=7)).start()

    def restart(self) -> None:
        self.server.stop()
        self.server = self._start()

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.url, **DUMMY_CREDENTIALS,
                            config=Config(retries={"max_attempts": 1}))


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    module = Module(tmp_path_factory.mktemp("deployments"))
    sm = module.client("sagemaker")
    create_generation_configs(sm, module.stores, ROLE)
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="blue")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    cw = module.client("cloudwatch")
    # The CI job's own health metric, alarmed on (it publishes with PutMetricData).
    cw.put_metric_alarm(AlarmName="ci-health", Namespace="CI/Health", MetricName="Failures",
                        Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=0,
                        ComparisonOperator="GreaterThanThreshold", TreatMissingData="notBreaching")
    put_model_errors_alarm(cw)
    yield from stopped_after(module)


def put_model_errors_alarm(cw: Any) -> None:
    """The endpoint's own metric alarmed on: a model error on any generation of the variant."""
    cw.put_metric_alarm(AlarmName="ep-model-errors", Namespace="AWS/SageMaker",
                        MetricName="InvocationModelErrors", Statistic="Sum", Period=60,
                        EvaluationPeriods=1, Threshold=0,
                        ComparisonOperator="GreaterThanThreshold", TreatMissingData="notBreaching",
                        Dimensions=[{"Name": "EndpointName", "Value": "ep"},
                                    {"Name": "VariantName", "Value": "AllTraffic"}])


class Traffic:
    """Clients calling the endpoint, each in its own thread, its calls ``PAUSE_S`` apart; every
    answer's factor (2 blue, 3 green) in order of arrival, and every failure."""

    def __init__(self, url: str, clients: int = 3) -> None:
        self.factors: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(runtime_client(url),),
                                          daemon=True) for _ in range(clients)]
        for thread in self._threads:
            thread.start()

    def _run(self, rt: Any) -> None:
        while not self._stop.is_set():
            try:
                answer = rt.invoke_endpoint(
                    EndpointName="ep", TargetModel="scale.tar.gz",
                    ContentType="application/json", Body=scale_request([1.0, 1.0, 1.0, 1.0]))
                self.factors.append(float(output_of(answer["Body"].read())[0]))
            except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
                self.failures.append(repr(exc))
                time.sleep(0.05)
            self._stop.wait(PAUSE_S)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def next_factors(self, what: str) -> set[float]:
        """The factors of the next five answers (``what`` they come after)."""
        mark = len(self.factors)
        wait_for(lambda: len(self.factors) >= mark + 5, what)
        return set(self.factors[mark:])


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    return support.wait_for(condition, timeout, what, interval_s=0.1)


def pending_status(described: dict[str, Any]) -> str | None:
    pending = described.get("PendingDeploymentSummary") or {}
    for variant in pending.get("ProductionVariants") or []:
        for status in variant.get("VariantStatus") or []:
            return str(status["Status"])
    return None


def baking(sm: Any) -> dict[str, Any] | None:
    described: dict[str, Any] = sm.describe_endpoint(EndpointName="ep")
    return described if pending_status(described) == "Baking" else None


def canary(percent: int, wait: int, alarms: tuple[str, ...] = ("ci-health",),
           **more: Any) -> dict[str, Any]:
    return {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
        "Type": "CANARY", "WaitIntervalInSeconds": wait,
        "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": percent}}, **more},
        "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": a} for a in alarms]}}


def running_and_other(sm: Any) -> tuple[str, str]:
    """The config the endpoint runs and the other one (tests run alone or in any order)."""
    running = sm.describe_endpoint(EndpointName="ep")["EndpointConfigName"]
    return running, "green" if running == "blue" else "blue"


def in_service_on(sm: Any, config: str) -> dict[str, Any]:
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    described: dict[str, Any] = sm.describe_endpoint(EndpointName="ep")
    assert described["EndpointConfigName"] == config, described.get("FailureReason")
    return described


def test_canary_bakes_and_completes_without_a_failed_call(emulator: Module) -> None:
    sm = emulator.client("sagemaker")
    running, other = running_and_other(sm)
    traffic = Traffic(emulator.url)
    try:
        wait_for(lambda: len(traffic.factors) >= 5, "the running fleet's first answers")
        # An 8-s bake (480 emulated s): room for calls on both fleets on a busy runner.
        config = canary(25, wait=480, TerminationWaitInSeconds=60)
        sm.update_endpoint(EndpointName="ep", EndpointConfigName=other, DeploymentConfig=config)
        during = wait_for(lambda: baking(sm), "the canary's bake")
        mark = len(traffic.factors)
        assert during["EndpointStatus"] == "Updating"
        assert during["EndpointConfigName"] == running
        (new_fleet,) = during["PendingDeploymentSummary"]["ProductionVariants"]
        assert new_fleet["CurrentInstanceCount"] == 1
        assert new_fleet["CurrentWeight"] == pytest.approx(0.25)
        assert during["ProductionVariants"][0]["CurrentWeight"] == pytest.approx(0.75)
        page = json.loads(urllib.request.urlopen(f"{emulator.url}/_emulator/page/state",
                                                 timeout=10).read())["Endpoints"]["ep"]
        shown = page["Deployment"]  # what the live page draws
        assert (shown["NewConfig"], shown["Routing"], shown["Phase"]) == (other, "CANARY",
                                                                         "baking")
        assert (shown["Step"], shown["Steps"], shown["GreenShare"]) == (1, 2, 0.25)
        assert 0 <= shown["BakeSecondsLeft"] <= 480
        assert shown["Alarms"] == {"ci-health": "OK"}
        assert shown["NewConfigInstances"] == 1
        # Calls on the canary, and the rest still on the running fleet.
        wait_for(lambda: {BLUE, GREEN} <= set(traffic.factors[mark:]), "calls on both fleets")
        described = in_service_on(sm, other)
        assert described["LastDeploymentConfig"] == config
        assert "FailureReason" not in described
        assert traffic.next_factors("answers after the deployment") == {FACTOR[other]}
    finally:
        traffic.stop()
    assert traffic.failures == []


def test_canary_rolled_back_by_an_alarm_on_a_published_metric(emulator: Module) -> None:
    sm, cw = emulator.client("sagemaker"), emulator.client("cloudwatch")
    running, other = running_and_other(sm)
    traffic = Traffic(emulator.url)
    try:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName=other,
                           DeploymentConfig=canary(50, wait=3600))  # a 60 s bake
        wait_for(lambda: baking(sm), "the canary's bake")
        mark = len(traffic.factors)
        wait_for(lambda: FACTOR[other] in traffic.factors[mark:], "a call on the canary")

        def failing() -> bool:
            """The CI job reports its failure each time it looks (as a health check publishes
            every period) until the deployment stops: a period the alarm was late to evaluate
            on a busy machine still has the failure in the next one."""
            cw.put_metric_data(Namespace="CI/Health",
                               MetricData=[{"MetricName": "Failures", "Value": 1.0}])
            return str(sm.describe_endpoint(EndpointName="ep")["EndpointStatus"]) != "Updating"

        wait_for(failing, "the deployment stopped by the alarm", timeout=120)
        described = in_service_on(sm, running)  # through RollingBack
        assert '"ci-health"' in described["FailureReason"]
        assert "PendingDeploymentSummary" not in described
        # Green stopped and its folder gone: one endpoint, one generation's folder.
        folders = emulator.cache / "endpoints"
        wait_for(lambda: len(list(folders.iterdir())) == 1, "the green generation's folder gone")
        assert traffic.next_factors("answers after the rollback") == {FACTOR[running]}
    finally:
        traffic.stop()
    assert traffic.failures == []
    wait_for(lambda: cw.describe_alarms(AlarmNames=["ci-health"])["MetricAlarms"][0][
        "StateValue"] == "OK", "the health alarm back to OK", timeout=60)


def test_green_model_failing_is_rolled_back_by_the_endpoints_own_metric(
        emulator: Module) -> None:
    sm = emulator.client("sagemaker")
    running, _ = running_and_other(sm)
    traffic = Traffic(emulator.url)
    try:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="broken",
                           DeploymentConfig=canary(50, wait=3600, alarms=("ep-model-errors",)))
        described = in_service_on(sm, running)  # through RollingBack
        assert '"ep-model-errors"' in described["FailureReason"]
        failed = len(traffic.failures)
        assert traffic.next_factors("answers after the rollback") == {FACTOR[running]}
        assert len(traffic.failures) == failed  # once rolled back, nothing fails
    finally:
        traffic.stop()
    # Every failure was the broken model's own answer on the canary, never the deployment's.
    assert traffic.failures and all("ModelError" in f for f in traffic.failures)


def test_linear_then_all_at_once(emulator: Module) -> None:
    sm = emulator.client("sagemaker")
    traffic = Traffic(emulator.url)
    try:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="blue", DeploymentConfig={
            "BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
                "Type": "LINEAR", "WaitIntervalInSeconds": 180,
                "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 50}}}})
        seen: set[str] = set()

        def steps() -> bool:
            described = sm.describe_endpoint(EndpointName="ep")
            for variant in (described.get("PendingDeploymentSummary") or {}).get(
                    "ProductionVariants") or []:
                for status in variant.get("VariantStatus") or []:
                    seen.add(status.get("StatusMessage", "")[:11])
            return described["EndpointStatus"] == "InService"

        wait_for(steps, "the linear deployment")
        assert {"Step 1 of 2", "Step 2 of 2"} <= seen
        in_service_on(sm, "blue")
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="green", DeploymentConfig={
            "BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": {
                "Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0}}})
        in_service_on(sm, "green")
        assert traffic.next_factors("answers after all at once") == {GREEN}
    finally:
        traffic.stop()
    assert traffic.failures == []


def test_rolling_update_moves_one_instance_at_a_time(emulator: Module) -> None:
    sm = emulator.client("sagemaker")
    sm.update_endpoint_weights_and_capacities(EndpointName="ep", DesiredWeightsAndCapacities=[
        {"VariantName": "AllTraffic", "DesiredInstanceCount": 2}])
    running, other = running_and_other(sm)
    in_service_on(sm, running)
    traffic = Traffic(emulator.url)
    try:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName=other,
                           RetainAllVariantProperties=True, DeploymentConfig={
                               "RollingUpdatePolicy": {
                                   "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1},
                                   "WaitIntervalInSeconds": 180}})

        def half_moved() -> dict[str, Any] | None:
            described = baking(sm)
            if described is None or described["ProductionVariants"][0][
                    "CurrentInstanceCount"] != 1:
                return None
            return described

        during = wait_for(half_moved, "the first batch baking")
        (new_fleet,) = during["PendingDeploymentSummary"]["ProductionVariants"]
        assert (new_fleet["CurrentInstanceCount"], new_fleet["DesiredInstanceCount"]) == (1, 2)
        assert new_fleet["CurrentWeight"] == pytest.approx(0.5)
        assert "Step 1 of 2" in new_fleet["VariantStatus"][0]["StatusMessage"]
        described = in_service_on(sm, other)
        assert described["ProductionVariants"][0]["CurrentInstanceCount"] == 2
    finally:
        traffic.stop()
    assert traffic.failures == []
    assert {BLUE, GREEN} <= set(traffic.factors)
    sm.update_endpoint_weights_and_capacities(EndpointName="ep", DesiredWeightsAndCapacities=[
        {"VariantName": "AllTraffic", "DesiredInstanceCount": 1}])
    in_service_on(sm, other)


def test_the_live_page_shows_the_deployment(emulator: Module, browser_page: Any) -> None:
    sm, cw = emulator.client("sagemaker"), emulator.client("cloudwatch")
    page = browser_page
    page.goto(f"{emulator.url}/_emulator/")
    page.wait_for_selector('#connection[data-connected="true"]', timeout=WAIT_MS)
    running, other = running_and_other(sm)
    sm.update_endpoint(EndpointName="ep", EndpointConfigName=other,
                       DeploymentConfig=canary(25, wait=3600))  # a 60 s bake
    block = '[data-deployment="ep"][data-phase="baking"]'
    page.wait_for_selector(block, timeout=WAIT_MS)
    assert page.get_attribute(f"{block} .split", "data-green-share") == "25"
    assert f"deployment to {other}" in page.inner_text(f"{block} h4")
    assert "baking step 1 of 2" in page.inner_text(f"{block} h4")
    assert page.inner_text(f'{block} [data-alarm="ci-health"]') == "ci-health OK"
    assert page.inner_text(f'{block} [data-figure="bake-left"]').endswith(" s")
    cw.set_alarm_state(AlarmName="ci-health", StateValue="ALARM", StateReason="a test says so")
    page.wait_for_selector('[data-deployment="ep"]', state="detached", timeout=WAIT_MS)
    described = in_service_on(sm, running)
    assert '"ci-health"' in described["FailureReason"]
    wait_for(lambda: cw.describe_alarms(AlarmNames=["ci-health"])["MetricAlarms"][0][
        "StateValue"] == "OK", "the health alarm back to OK", timeout=60)


def test_a_restart_mid_deployment_resumes_it(emulator: Module) -> None:
    sm = emulator.client("sagemaker")
    running, other = running_and_other(sm)
    sm.update_endpoint(EndpointName="ep", EndpointConfigName=other,
                       DeploymentConfig=canary(25, wait=600))  # a 10 s bake
    wait_for(lambda: baking(sm), "the canary's bake")
    emulator.restart()
    sm = emulator.client("sagemaker")
    resumed = wait_for(lambda: baking(sm), "the resumed bake")
    message = resumed["PendingDeploymentSummary"]["ProductionVariants"][0]["VariantStatus"][0][
        "StatusMessage"]
    assert "Step 1 of 2" in message and "resumed after an emulator restart" in message
    assert resumed["EndpointConfigName"] == running  # blue (the running config) came back
    rt = runtime_client(emulator.url)
    answer = rt.invoke_endpoint(EndpointName="ep", TargetModel="scale.tar.gz",
                                ContentType="application/json",
                                Body=scale_request([1.0, 1.0, 1.0, 1.0]))
    assert float(output_of(answer["Body"].read())[0]) in (BLUE, GREEN)
    in_service_on(sm, other)


def test_mme_deploy_runs_a_guarded_update_and_exits_3_on_a_rollback(
        emulator: Module, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.deploy_cli import main as mme

    cw = emulator.client("cloudwatch")
    # No data counts as breaching: this alarm is in ALARM from its first evaluation on.
    cw.put_metric_alarm(AlarmName="release-blocked", Namespace="CI/Release",
                        MetricName="Blocked", Statistic="Sum", Period=60, EvaluationPeriods=1,
                        Threshold=0, ComparisonOperator="GreaterThanThreshold",
                        TreatMissingData="breaching")
    common = ["--target", "local", "--endpoint-name", "demo", "--store-dir", str(tmp_path / "s"),
              "--emulator-url", emulator.url, "--instance-type", "ml.m5.xlarge",
              "--wait-delay", "0.2", "--no-progress"]
    guarded = ["--traffic", "canary", "--canary-size", "50%", "--bake", "120",
               "--termination-wait", "0"]

    def repo(factor: float) -> str:
        return str(write_scale_model(tmp_path / f"x{factor:g}", "scale", factor))

    # A first deployment has no fleet to shift traffic from: refused, nothing left behind.
    assert mme(["deploy", *common, *guarded, repo(2)]) == 2
    assert "deploy it without --traffic first" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    assert mme(["deploy", *common, repo(2)]) == 0
    # A rollback alarm that does not exist: refused before anything is copied or created.
    assert mme(["deploy", *common, *guarded, "--rollback-alarm", "no-such-alarm", repo(3)]) == 2
    assert "rollback alarm(s) no-such-alarm do not exist: create them first (mme alarm put" \
        in capsys.readouterr().err
    assert len(list((tmp_path / "s" / "demo").iterdir())) == 1
    assert mme(["deploy", *common, *guarded, "--rollback-alarm", "ci-health", repo(3)]) == 0
    out = capsys.readouterr().out
    assert '"DeploymentConfig": {"AutoRollbackConfiguration"' in out
    assert "deployment of demo: Updating; AllTraffic Baking: Step 1 of 2: 50% of traffic" in out
    assert "deployment of demo: InService on demo-" in out
    assert "smoke scale.tar.gz: ok" in out
    wait_for(lambda: cw.describe_alarms(AlarmNames=["release-blocked"])["MetricAlarms"][0][
        "StateValue"] == "ALARM", "the blocking alarm")
    assert mme(["deploy", *common, *guarded, "--rollback-alarm", "release-blocked",
                repo(4)]) == 3
    captured = capsys.readouterr()
    # RollingBack may be too short to be polled; the last step says it either way.
    assert "(rolled back: Endpoint update was rolled back because CloudWatch alarm " \
        '"release-blocked"' in captured.out
    assert "rolled back" in captured.err and '"release-blocked"' in captured.err
    assert mme(["teardown", *common[:8], "--wait-delay", "0.2"]) == 0
