"""Reset, snapshots and restore (``/_emulator/reset``, ``/_emulator/snapshot``, ``mme snapshot``,
``mme serve --restore``, the plugin's ``mme_clean_server``) on a real emulator with real Tritons,
through unmodified boto3 clients: a reset stops every Triton and leaves the cache folder as it
was at start; a snapshot carries a fleet (a guarded deployment's result, alarms with their
state, a scaling policy) into a new server, whose models are loaded before it answers."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from emulator.server import EmulatorServer
from emulator.settings import Settings
from harness.emulator_routes import call
from harness.faults import FaultRules
from harness.server_state import ServerState, StateRequestRefused
from mme.cli import main as mme
from tests.client_support import (
    DUMMY_CREDENTIALS,
    create_generation_configs,
    put_target_tracking,
    runtime_client,
)
from tests.fault_support import pid_alive
from tests.prometheus_support import get_json
from tests.support import (
    SUITE_ENV,
    output_of,
    package,
    scale_request,
    stopped_after,
    wait_for,
    write_scale_model,
)

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

ROLE = "arn:aws:iam::123456789012:role/x"
FAST = {"Delay": 0.25, "MaxAttempts": 480}
KEY = {"ServiceNamespace": "sagemaker", "ResourceId": "endpoint/ep/variant/AllTraffic",
       "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}
ALL_AT_ONCE = {"BlueGreenUpdatePolicy": {
    "TrafficRoutingConfiguration": {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0},
    "TerminationWaitInSeconds": 0},
    "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "ep-errors"}]}}


class Module:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.stores: dict[str, Path] = {}
        for name, factor in (("default", 1.0), ("blue", 2.0), ("green", 3.0)):
            store = self.stores[name] = root / "stores" / name
            store.mkdir(parents=True)
            package(write_scale_model(root / "work" / name, "scale", factor), store / "a.tar.gz",
                    "folder")
        self.cache = root / "cache"
        self.server = EmulatorServer(Settings.from_env(
            env=SUITE_ENV, cache_dir=self.cache, port=0, clock_scale=60.0,
            model_data=str(self.stores["default"]))).start()
        self.fresh = files_under(self.cache)  # the cache folder as a new server has it

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    module = Module(tmp_path_factory.mktemp("reset"))
    yield from stopped_after(module)


@pytest.fixture
def state(emulator: Module) -> Iterator[ServerState]:
    yield ServerState(emulator.url)
    ServerState(emulator.url).reset()  # each test starts from an empty server


def client(service: str, url: str) -> Any:
    return boto3.client(service, endpoint_url=url, **DUMMY_CREDENTIALS,
                        config=Config(retries={"max_attempts": 1}))


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def invoke(url: str, endpoint: str = "ep") -> tuple[float, str]:
    """The factor the endpoint's a.tar.gz multiplies by, and whether it was loaded already."""
    answer = runtime_client(url).invoke_endpoint(
        EndpointName=endpoint, TargetModel="a.tar.gz", ContentType="application/json",
        Body=scale_request([1.0, 1.0, 1.0, 1.0]))
    factor = float(output_of(answer["Body"].read())[0])
    return factor, answer["ResponseMetadata"]["HTTPHeaders"]["x-mme-model-cache-hit"]


def build_fleet(emulator: Module) -> None:
    """An endpoint updated by a guarded deployment from blue to green, a model loaded on it,
    an alarm in ALARM, a target-tracking policy (two alarms of its own) and a fault rule."""
    sm, cw = client("sagemaker", emulator.url), client("cloudwatch", emulator.url)
    create_generation_configs(sm, {n: emulator.stores[n] for n in ("blue", "green")}, ROLE)
    # Missing data leaves its state as set: it stays in ALARM until put OK.
    cw.put_metric_alarm(AlarmName="ep-errors", Namespace="CI/Health", MetricName="Failures",
                        Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=0,
                        ComparisonOperator="GreaterThanThreshold", TreatMissingData="ignore")
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="blue")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="green",
                       DeploymentConfig=ALL_AT_ONCE)
    wait_for(lambda: sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService"
             and sm.describe_endpoint(EndpointName="ep")["EndpointConfigName"] == "green",
             what="the guarded deployment's end")
    assert invoke(emulator.url) == (3.0, "0")  # green's model, loaded by this call
    cw.set_alarm_state(AlarmName="ep-errors", StateValue="ALARM", StateReason="set by the test")
    asg = client("application-autoscaling", emulator.url)
    asg.register_scalable_target(**KEY, MinCapacity=1, MaxCapacity=2)
    put_target_tracking(asg, KEY, "per-instance", 1000.0,
                        "SageMakerVariantInvocationsPerInstance")
    FaultRules(emulator.url).add({"error": "ThrottlingException"}, match={"endpoint": "nope"})
    call(emulator.url, "PUT", "/_emulator/transitions",
         {"resource": "endpoint", "name": "nope*", "status": "Creating", "duration_s": 30})


def create_endpoint(emulator: Module, name: str, store: str) -> None:
    sm = client("sagemaker", emulator.url)
    sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer={
        "Image": "triton", "Mode": "MultiModel",
        "ModelDataUrl": emulator.stores[store].as_uri() + "/"})
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.m5.xlarge",
        "InitialInstanceCount": 1}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)


def triton_pids(server: EmulatorServer) -> list[int]:
    return [i.launcher.pid for e in server.registry.all() for v in e.variants
            for i in v.instances if isinstance(getattr(i.launcher, "pid", None), int)]


def post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_reset_stops_every_triton_and_leaves_the_server_as_it_started(
        emulator: Module, state: ServerState) -> None:
    build_fleet(emulator)
    pids = triton_pids(emulator.server)
    assert len(pids) == 2  # the --model-data endpoint's and ep's

    answer = state.reset()

    assert answer["removed"] == {
        "models": 2, "endpoint_configs": 2, "endpoints": 1, "inference_components": 0,
        "alarms": 3, "scalable_targets": 1, "scaling_policies": 1,
        "metric_series": answer["removed"]["metric_series"], "fault_rules": 1,
        "transition_rules": 1}
    assert answer["removed"]["metric_series"] > 0
    assert (answer["stopped_endpoints"], answer["restarted"]) == (2, ["local"])
    assert [pid for pid in pids if pid_alive(pid)] == []  # stopped before the answer
    assert files_under(emulator.cache) == emulator.fresh
    sm, cw = client("sagemaker", emulator.url), client("cloudwatch", emulator.url)
    assert [e["EndpointName"] for e in sm.list_endpoints()["Endpoints"]] == ["local"]
    assert sm.list_models()["Models"] == sm.list_endpoint_configs()["EndpointConfigs"] == []
    assert cw.describe_alarms()["MetricAlarms"] == []
    asg = client("application-autoscaling", emulator.url)
    assert asg.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []
    assert FaultRules(emulator.url).rules() == []
    models = get_json(f"{emulator.url}/_emulator/models")["Endpoints"]
    assert list(models) == ["local"] and models["local"]["Models"] == []
    # The server goes on as new: the store's endpoint and a new endpoint both serve.
    assert invoke(emulator.url, "local") == (1.0, "0")
    create_endpoint(emulator, "ep", "blue")
    assert invoke(emulator.url) == (2.0, "0")
    assert invoke(emulator.url) == (2.0, "1")


def test_keep_cache_leaves_the_stopped_models_on_disk_until_a_plain_reset(
        emulator: Module, state: ServerState) -> None:
    create_endpoint(emulator, "kept", "blue")
    invoke(emulator.url, "kept")
    state.reset(keep_cache=True)
    kept = emulator.cache / "endpoints" / "kept" / "AllTraffic" / "i-1" / "artifacts"
    assert any(p.is_file() for p in kept.rglob("*")), files_under(emulator.cache)
    state.reset()
    assert files_under(emulator.cache) == emulator.fresh


def test_a_reset_refuses_a_body_it_cannot_read_saying_what_to_send(emulator: Module) -> None:
    url = f"{emulator.url}/_emulator/reset"
    status, answer = post(url, b"{not json")
    assert status == 400 and "not JSON" in answer["error"] and "keep_cache" in answer["error"]
    assert post(url, b'{"keep": true}') == (400, {
        "error": 'Unknown fields keep; a reset takes only "keep_cache" (true|false).'})
    assert post(url, b'{"keep_cache": "yes"}') == (400, {
        "error": '"keep_cache" is true or false, not "yes".'})
    assert post(url, b"[]")[0] == 400


def test_a_snapshot_restarts_into_a_warm_fleet_with_its_deployment_alarms_and_policy(
        emulator: Module, state: ServerState, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    build_fleet(emulator)
    folder = tmp_path / "fleet"
    assert mme(["snapshot", "save", str(folder), "--url", emulator.url, "--with-models"]) == 0
    assert "1 endpoints" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet"]  # no temporary left
    # Into a server that holds something: refused, saying to reset first.
    with pytest.raises(StateRequestRefused, match="reset") as refused:
        state.load(folder)
    assert refused.value.status == 409

    settings = Settings.from_env(env=SUITE_ENV, cache_dir=tmp_path / "cache", port=0,
                                 clock_scale=60.0, restore=str(folder))
    with EmulatorServer(settings) as restored:
        sm = client("sagemaker", restored.url)
        described = sm.describe_endpoint(EndpointName="ep")
        assert (described["EndpointStatus"], described["EndpointConfigName"]) == (
            "InService", "green")
        assert described["LastDeploymentConfig"] == ALL_AT_ONCE
        loaded = get_json(f"{restored.url}/_emulator/models")["Endpoints"]["ep"]["Models"]
        assert [(m["TargetModel"], m["Loaded"]) for m in loaded] == [("a.tar.gz", True)]
        assert invoke(restored.url) == (3.0, "1")  # loaded at start: no download on the call
        alarms = {a["AlarmName"]: a for a in
                  client("cloudwatch", restored.url).describe_alarms()["MetricAlarms"]}
        assert len(alarms) == 3  # the test's and the policy's two
        assert (alarms["ep-errors"]["StateValue"], alarms["ep-errors"]["StateReason"]) == (
            "ALARM", "set by the test")
        asg = client("application-autoscaling", restored.url)
        (target,) = asg.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
        assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 2)
        (policy,) = asg.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
        assert policy["PolicyName"] == "per-instance"
        assert sorted(a["AlarmName"] for a in policy["Alarms"]) == sorted(
            n for n in alarms if n != "ep-errors")

    # `mme snapshot load` into the module's server once it is reset: the same fleet, warm.
    state.reset()
    assert mme(["snapshot", "load", str(folder), "--url", emulator.url]) == 0
    assert "ep InService" in capsys.readouterr().out
    assert invoke(emulator.url) == (3.0, "1")


def test_a_folder_that_is_not_a_snapshot_is_refused_before_anything_changes(
        emulator: Module, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("not a snapshot")
    assert mme(["snapshot", "load", str(tmp_path), "--url", emulator.url]) == 2
    assert "has no manifest.json" in capsys.readouterr().err
    assert mme(["snapshot", "save", str(tmp_path), "--url", emulator.url]) == 2
    assert "not a snapshot and not empty" in capsys.readouterr().err
    status, answer = post(f"{emulator.url}/_emulator/snapshot", b'{"format": "x"}')
    assert status == 400 and "not a snapshot" in answer["error"]


def test_the_plugins_clean_server_fixture_gives_each_test_an_empty_server(
        emulator: Module, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=f"""
        import boto3

        def clients(url):
            kwargs = dict(endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="x", aws_secret_access_key="x")
            return boto3.client("sagemaker", **kwargs), boto3.client("cloudwatch", **kwargs)

        def test_leaves_a_model_and_an_alarm(mme_clean_server):
            sm, cw = clients(mme_clean_server.url)
            sm.create_model(ModelName="left", ExecutionRoleArn="{ROLE}", PrimaryContainer={{
                "Image": "triton", "Mode": "MultiModel", "ModelDataUrl": "s3://b/p/"}})
            cw.put_metric_alarm(AlarmName="left", Namespace="N", MetricName="M",
                                Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=0,
                                ComparisonOperator="GreaterThanThreshold")

        def test_finds_neither(mme_clean_server):
            sm, cw = clients(mme_clean_server.url)
            assert sm.list_models()["Models"] == []
            assert cw.describe_alarms()["MetricAlarms"] == []
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--mme-url={emulator.url}",
                                "--mme-endpoint-name=local")
    result.assert_outcomes(passed=2)
