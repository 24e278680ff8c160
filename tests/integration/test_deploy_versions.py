"""``mme deploy`` keeps every version of an endpoint's model data under its own prefix: a
rolled-back or refused update leaves the running config's bytes as they were, so whatever makes
the old fleet read the store again (an eviction, a new instance, a restart) serves the old model.

v1 is ``scale.tar.gz`` multiplying by 2 and ``other.tar.gz``; v2's ``scale.tar.gz`` fails to load.
"""

from __future__ import annotations

import io
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator.server import EmulatorServer
from emulator.settings import Settings
from harness.deploy_cli import main as mme
from harness.deployer import Deployer, deployment_config, make_clients
from harness.deployment import DeployConfig
from tests import support
from tests.client_support import DUMMY_CREDENTIALS, CallLoop, runtime_client
from tests.support import SUITE_ENV, output_of, scale_request, write_scale_model

pytestmark = pytest.mark.slow

FAST = {"Delay": 0.25, "MaxAttempts": 480}


def _client(url: str, service: str) -> Any:
    return boto3.client(service, endpoint_url=url, **DUMMY_CREDENTIALS,
                        config=Config(retries={"max_attempts": 1}))


def _server(cache: Path, **settings: Any) -> EmulatorServer:
    return EmulatorServer(Settings.from_env(env=SUITE_ENV, cache_dir=cache, port=0,
                                            clock_scale=60.0, routing_seed=7,
                                            **settings)).start()


def _factor(url: str, target: str = "scale.tar.gz") -> tuple[float, str]:
    answer = runtime_client(url).invoke_endpoint(
        EndpointName="demo", TargetModel=target, ContentType="application/json",
        Body=scale_request([1.0, 1.0, 1.0, 1.0]))
    instance = answer["ResponseMetadata"]["HTTPHeaders"].get("x-mme-instance", "")
    return float(output_of(answer["Body"].read())[0]), instance


def _unload(url: str, target: str) -> None:
    request = urllib.request.Request(
        f"{url}/_emulator/endpoints/demo/models/{target}/unload", method="POST")
    with urllib.request.urlopen(request, timeout=60):
        pass


def _models(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/_emulator/models", timeout=10) as response:
        found: list[dict[str, Any]] = json.load(response)["Endpoints"]["demo"]["Models"]
    return found


class _Traffic(CallLoop):
    """One client calling scale.tar.gz while a deployment runs, 10 ms apart: dozens of calls in
    each 60 s period (1 s at clock scale 60), where the error alarm needs one, without taking a
    core for the whole change."""

    stop_timeout_s = 120.0
    pause_s = 0.01

    def call(self, rt: Any) -> None:
        try:
            rt.invoke_endpoint(EndpointName="demo", TargetModel="scale.tar.gz",
                               ContentType="application/json",
                               Body=scale_request([1.0, 1.0, 1.0, 1.0]))
        except Exception:  # noqa: BLE001 - green's broken model answers with errors
            time.sleep(0.05)


def test_a_rolled_back_canary_leaves_v1_served_on_a_new_instance_and_after_a_restart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache, store = tmp_path / "cache", tmp_path / "store"
    v1 = [write_scale_model(tmp_path / "v1", "scale", 2.0),
          write_scale_model(tmp_path / "v1", "other", 5.0)]
    v2 = [write_scale_model(tmp_path / "v2", "scale", 3.0, fail_load="broken on purpose"),
          write_scale_model(tmp_path / "v2", "other", 5.0)]
    # A memory budget: a new instance, with more room, takes a model no instance has loaded.
    budget = {"memory_budget": "4GiB"}
    server = _server(cache, **budget)
    try:
        url = server.url
        cw = _client(url, "cloudwatch")
        cw.put_metric_alarm(
            AlarmName="demo-model-errors", Namespace="AWS/SageMaker",
            MetricName="InvocationModelErrors", Statistic="Sum", Period=60,
            EvaluationPeriods=1, Threshold=0, ComparisonOperator="GreaterThanThreshold",
            TreatMissingData="notBreaching",
            Dimensions=[{"Name": "EndpointName", "Value": "demo"},
                        {"Name": "VariantName", "Value": "AllTraffic"}])
        common = ["--target", "local", "--endpoint-name", "demo", "--store-dir", str(store),
                  "--emulator-url", url, "--instance-type", "ml.m5.xlarge",
                  "--wait-delay", "0.2", "--no-progress"]
        assert mme(["deploy", *common, *map(str, v1)]) == 0
        capsys.readouterr()
        traffic = _Traffic(url)
        try:
            code = mme(["deploy", *common, "--traffic", "canary", "--canary-size", "50%",
                        "--bake", "3600", "--termination-wait", "0",
                        "--rollback-alarm", "demo-model-errors", *map(str, v2)])
        finally:
            traffic.stop()
        out = capsys.readouterr().out
        assert code == 3, out
        sm = _client(url, "sagemaker")
        assert _factor(url)[0] == 2.0

        # A new instance: it downloads from the store.
        sm.update_endpoint_weights_and_capacities(
            EndpointName="demo", DesiredWeightsAndCapacities=[
                {"VariantName": "AllTraffic", "DesiredInstanceCount": 2}])
        sm.get_waiter("endpoint_in_service").wait(EndpointName="demo", WaiterConfig=FAST)
        old = _factor(url, "other.tar.gz")[1]  # the first instance, other.tar.gz loaded on it
        _unload(url, "scale.tar.gz")
        factor, instance = _factor(url)
        assert (factor, instance != old) == (2.0, True), instance
        assert not any(m.get("StoreChanged") for m in _models(url))

        # A restart: every instance starts with an empty disk.
        server.stop()
        server = _server(cache, **budget)
        sm = _client(server.url, "sagemaker")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="demo", WaiterConfig=FAST)
        assert _factor(server.url)[0] == 2.0

        # The rolled-back version's config, model and data are gone; v1's are as they were.
        running = sm.describe_endpoint(EndpointName="demo")["EndpointConfigName"]
        assert [c["EndpointConfigName"] for c in sm.list_endpoint_configs(
            NameContains="demo")["EndpointConfigs"]] == [running]
        assert [m["ModelName"] for m in sm.list_models(NameContains="demo")["Models"]] == [
            running]
        assert len(list((store / "demo").iterdir())) == 1
        assert "call sagemaker.DeleteEndpointConfig" in out and f"delete {store}" in out
    finally:
        server.stop()


def test_a_dry_run_after_a_refused_update_plans_it_and_teardown_spares_another_servers_data(
        start_emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = start_emulator()
    store = tmp_path / "store"
    # ModelCacheSetting Disabled: every call evicts the model (memory and disk), so every call
    # reads the store again.
    common = ["--target", "local", "--endpoint-name", "demo", "--store-dir", str(store),
              "--emulator-url", server.url, "--instance-type", "ml.m5.xlarge",
              "--wait-delay", "0.2", "--no-progress", "--model-cache", "disabled"]
    v1 = write_scale_model(tmp_path / "v1", "scale", 2.0)
    v2 = write_scale_model(tmp_path / "v2", "scale", 3.0)
    assert mme(["deploy", *common, str(v1)]) == 0
    capsys.readouterr()
    # SageMaker refuses an UpdateEndpoint whose linear step is outside 10-50%.
    # An update SageMaker refuses (a canary above half the fleet; the deployer's API, which
    # leaves that check to the service, not mme deploy's flags, which refuse it first).
    deployer = Deployer(make_clients(boto3.Session(**DUMMY_CREDENTIALS), "local", server.url),
                        out=io.StringIO(), progress=False)
    with pytest.raises(ClientError, match="CanarySize"):
        deployer.deploy(DeployConfig(
            "demo", [v2], store_dir=store, prefix="demo/", instance_type="ml.m5.xlarge",
            model_cache=False, wait_delay_s=0.2,
            deployment_config=deployment_config("canary", 0, canary_size="60%")))
    for _ in range(2):  # each call an eviction, then a download from the store
        assert _factor(server.url)[0] == 2.0
        support.wait_for(lambda: not _models(server.url), 60, "the model evicted")

    assert mme(["deploy", *common, "--dry-run", str(v2)]) == 0
    planned = capsys.readouterr().out
    assert "unchanged" not in planned, planned
    assert "would copy scale.tar.gz" in planned and "would call sagemaker.UpdateEndpoint" in planned
    assert _factor(server.url)[0] == 2.0
    assert len(list((store / "demo").iterdir())) == 1

    # A teardown pointed at another emulator, which has no endpoint demo, deletes nothing in
    # the store this one's demo reads; the right one deletes its version and the folder.
    other = start_emulator()
    assert mme(["teardown", *common[:6], "--emulator-url", other.url, "--wait-delay", "0.2"]) == 0
    assert "endpoint demo does not exist" in capsys.readouterr().out
    assert len(list((store / "demo").iterdir())) == 1
    assert _factor(server.url)[0] == 2.0
    assert mme(["teardown", *common[:8], "--wait-delay", "0.2"]) == 0
    assert not (store / "demo").exists()
