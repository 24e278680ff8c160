"""The fast inner loop of ``mme serve``: ``--watch`` (a changed model folder or tarball is served
from its next call, other models stay loaded), ``--preload`` (loaded before the server listens)
and ``--init`` (declared resources applied through the APIs, idempotently), each on a real
``mme serve`` in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from harness.live_endpoint import EmulatorProcess
from tests.client_support import DUMMY_CREDENTIALS, runtime_client
from tests.support import output_of, package, scale_request, wait_for, write_scale_model

pytestmark = pytest.mark.timeout(600)


def _invoke(url: str, target: str) -> tuple[list[float], str]:
    """The model's output for [1, 2, 3, 4] and the call's X-Mme-Model-Cache-Hit."""
    resp = runtime_client(url).invoke_endpoint(EndpointName="local", TargetModel=target,
                                               Body=scale_request([1, 2, 3, 4]))
    output = [float(v) for v in output_of(resp["Body"].read())]
    return output, resp["ResponseMetadata"]["HTTPHeaders"]["x-mme-model-cache-hit"]


def _serve(tmp_path: Path, name: str, *flags: str) -> EmulatorProcess:
    settings = {"MME_CACHE_DIR": str(tmp_path / "cache"), "MME_LOG_LEVEL": "INFO"}
    return EmulatorProcess(settings, tmp_path / f"{name}.log", startup_timeout_s=180,
                           flags=flags)


def _serve_fails(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {"MME_CACHE_DIR": str(tmp_path / "cache-refused"), "MME_PORT": "0"}
    return subprocess.run([sys.executable, "-m", "mme", "serve", *flags], text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, **env})


# --- --watch ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatorProcess, Path]]:
    """``mme serve --watch`` on a folder of two model folders, a slow one and a tarball."""
    tmp = tmp_path_factory.mktemp("watch")
    models = tmp / "models"
    write_scale_model(models, "scale", scale=2.0)
    write_scale_model(models, "other", scale=10.0)
    write_scale_model(models, "slow", scale=2.0, run_gate=str(tmp / "gate"))
    package(write_scale_model(tmp / "src", "tarred", scale=4.0), models / "tarred.tar.gz",
            "folder")
    server = _serve(tmp, "watch", "--model-data", str(models), "--watch",
                    "--watch-interval", "0.05")
    server.start()
    try:
        yield server, models
    finally:
        server.stop()


def _served_as(url: str, target: str, expected: list[float]) -> bool:
    return _invoke(url, target)[0] == expected


def test_an_edited_config_is_served_on_the_next_call_while_others_stay_loaded(
        watched: tuple[EmulatorProcess, Path]) -> None:
    server, models = watched
    assert _invoke(server.url, "scale.tar.gz")[0] == [2, 4, 6, 8]
    assert _invoke(server.url, "other.tar.gz") == ([10, 20, 30, 40], "0")
    config = models / "scale" / "config.pbtxt"
    config.write_text(config.read_text().replace('string_value: "2.0"', 'string_value: "3.0"'))
    # Until the change is seen the old version answers; then the new one does.
    wait_for(lambda: _served_as(server.url, "scale.tar.gz", [3, 6, 9, 12]), 120,
             "the edited config served")
    assert _invoke(server.url, "other.tar.gz") == ([10, 20, 30, 40], "1")  # never unloaded
    assert "store: scale.tar.gz changed; its next call loads the new version" in \
        server.log_path.read_text()


def test_an_edited_model_py_is_served_on_the_next_call(
        watched: tuple[EmulatorProcess, Path]) -> None:
    server, models = watched
    _invoke(server.url, "other.tar.gz")
    code = models / "scale" / "1" / "model.py"
    code.write_text(code.read_text().replace("y = (x * self.scale)", "y = (x * self.scale + 1)"))
    current = _invoke(server.url, "scale.tar.gz")[0]
    expected = [v + 1 for v in current] if current[0] in (2, 3) else current
    wait_for(lambda: _served_as(server.url, "scale.tar.gz", expected), 120,
             "the edited model.py served")
    assert _invoke(server.url, "other.tar.gz")[1] == "1"


def test_a_replaced_tarball_is_served_on_the_next_call(
        watched: tuple[EmulatorProcess, Path], tmp_path: Path) -> None:
    server, models = watched
    assert _invoke(server.url, "tarred.tar.gz")[0] == [4, 8, 12, 16]
    _invoke(server.url, "other.tar.gz")
    package(write_scale_model(tmp_path / "v2", "tarred", scale=5.0), tmp_path / "v2.tar.gz",
            "folder")
    (tmp_path / "v2.tar.gz").replace(models / "tarred.tar.gz")
    wait_for(lambda: _served_as(server.url, "tarred.tar.gz", [5, 10, 15, 20]), 120,
             "the new tarball served")
    assert _invoke(server.url, "other.tar.gz")[1] == "1"


def test_a_call_under_way_finishes_on_the_old_version(
        watched: tuple[EmulatorProcess, Path]) -> None:
    server, models = watched
    gate = models.parent / "gate"
    gate.touch()
    assert _invoke(server.url, "slow.tar.gz")[0] == [2, 4, 6, 8]  # loaded
    gate.unlink()
    answers: list[list[float]] = []
    under_way = threading.Thread(target=lambda: answers.append(
        _invoke(server.url, "slow.tar.gz")[0]))
    under_way.start()
    wait_for(lambda: _pinned(server.url, "slow.tar.gz"), 60, "the call under way")
    config = models / "slow" / "config.pbtxt"
    config.write_text(config.read_text().replace('string_value: "2.0"', 'string_value: "3.0"'))
    wait_for(lambda: "store: slow.tar.gz changed" in server.log_path.read_text(), 60,
             "the change seen")
    gate.touch()
    under_way.join(120)
    assert answers == [[2, 4, 6, 8]]  # the old version answered the call it had
    assert _invoke(server.url, "slow.tar.gz") == ([3, 6, 9, 12], "0")


def _pinned(url: str, target: str) -> bool:
    """A call holds ``target`` now (its row of /_emulator/models says Pinned)."""
    with urllib.request.urlopen(f"{url}/_emulator/models") as resp:
        doc = json.loads(resp.read())
    return any(row["TargetModel"] == target and row["Pinned"] for row in _rows(doc))


def _rows(doc: Any) -> Iterator[dict[str, Any]]:
    """Every model row of /_emulator/models, however deep."""
    if isinstance(doc, dict):
        if "TargetModel" in doc:
            yield doc
        for value in doc.values():
            yield from _rows(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _rows(value)


# --- --preload and --init --------------------------------------------------------------------

def _init_file(folder: Path, store: Path, endpoint_config: str = "cfg-1") -> Path:
    endpoint = "declared"
    resource = f"endpoint/{endpoint}/variant/AllTraffic"
    document = {
        "models": [{"ModelName": "m", "ExecutionRoleArn": "arn:aws:iam::123456789012:role/x",
                    "PrimaryContainer": {"Image": "triton", "Mode": "MultiModel",
                                         "ModelDataUrl": f"file://{store}/"}}],
        "endpoint_configs": [{"EndpointConfigName": endpoint_config, "ProductionVariants": [{
            "VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.m5.large",
            "InitialInstanceCount": 1}]}],
        "endpoints": [{"EndpointName": endpoint, "EndpointConfigName": endpoint_config}],
        "scaling": [{"register": {"ServiceNamespace": "sagemaker", "ResourceId": resource,
                                  "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
                                  "MinCapacity": 1, "MaxCapacity": 2},
                     "policies": [{"PolicyName": "track", "ServiceNamespace": "sagemaker",
                                   "ResourceId": resource,
                                   "ScalableDimension":
                                       "sagemaker:variant:DesiredInstanceCount",
                                   "PolicyType": "TargetTrackingScaling",
                                   "TargetTrackingScalingPolicyConfiguration": {
                                       "TargetValue": 100.0,
                                       "PredefinedMetricSpecification": {
                                           "PredefinedMetricType":
                                               "SageMakerVariantInvocationsPerInstance"}}}]}],
        "alarms": [{"AlarmName": "declared-5xx", "Namespace": "AWS/SageMaker",
                    "MetricName": "Invocation5XXErrors", "Statistic": "Sum", "Period": 60,
                    "EvaluationPeriods": 1, "Threshold": 0,
                    "ComparisonOperator": "GreaterThanThreshold",
                    "Dimensions": [{"Name": "EndpointName", "Value": endpoint},
                                   {"Name": "VariantName", "Value": "AllTraffic"}]}],
    }
    import yaml

    path = folder / "init.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_preload_and_init_before_the_server_listens_and_again_on_restart(
        tmp_path: Path, store: Path) -> None:
    package(write_scale_model(tmp_path / "repo", "pre"), store / "pre.tar.gz", "folder")
    init = _init_file(tmp_path, store)
    flags = ("--model-data", str(store), "--preload", "pre.tar.gz", "--init", str(init))
    server = _serve(tmp_path, "first", *flags)
    server.start()
    try:
        assert _invoke(server.url, "pre.tar.gz") == ([2, 4, 6, 8], "1")  # loaded at start
        log = server.log_path.read_text()
        assert "preload: pre.tar.gz loaded on i-1 in" in log
        assert "init: Endpoint declared created" in log
        keys = {"endpoint_url": server.url, **DUMMY_CREDENTIALS}
        sm = boto3.client("sagemaker", **keys)
        assert sm.describe_endpoint(EndpointName="declared")["EndpointStatus"] == "InService"
        resp = runtime_client(server.url).invoke_endpoint(
            EndpointName="declared", TargetModel="pre.tar.gz", Body=scale_request([1, 2, 3, 4]))
        assert list(output_of(resp["Body"].read())) == [2, 4, 6, 8]
        asg = boto3.client("application-autoscaling", **keys)
        policies = asg.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
        assert [p["PolicyName"] for p in policies] == ["track"]
        cw = boto3.client("cloudwatch", **keys)
        # The declared alarm, beside the two the target tracking policy made for itself.
        alarms = [a["AlarmName"] for a in cw.describe_alarms()["MetricAlarms"]]
        assert "declared-5xx" in alarms and len(alarms) == 3
    finally:
        assert server.stop() == 0
    again = _serve(tmp_path, "again", *flags)
    again.start()
    try:
        log = again.log_path.read_text()
        assert f"init: {init} applied already; nothing changed" in log
        assert "emulator.init_file" not in log  # the lines of what an entry changed
        sm = boto3.client("sagemaker", endpoint_url=again.url, **DUMMY_CREDENTIALS)
        assert sm.describe_endpoint(EndpointName="declared")["EndpointConfigName"] == "cfg-1"
    finally:
        again.stop()
    # A changed model cannot be updated: refused, naming the entry, before the server listens.
    text = init.read_text().replace("ml.m5.large", "ml.m5.xlarge")
    init.write_text(text)
    refused = subprocess.run([sys.executable, "-m", "mme", "serve", *flags], text=True,
                             capture_output=True, timeout=300,
                             env={**os.environ, "MME_CACHE_DIR": str(tmp_path / "cache"),
                                  "MME_PORT": "0"})
    assert refused.returncode == 2, refused.stderr
    assert "endpoint_configs[0] (EndpointConfigName cfg-1)" in refused.stderr
    assert "cannot update" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_an_unknown_preload_target_fails_the_start_naming_the_stores_models(
        tmp_path: Path, store: Path) -> None:
    package(write_scale_model(tmp_path / "repo", "a"), store / "a.tar.gz", "folder")
    result = _serve_fails(tmp_path, "--model-data", str(store), "--preload", "nope.tar.gz")
    assert result.returncode == 2
    assert "--preload nope.tar.gz: not in the store" in result.stderr
    assert "it holds: a.tar.gz" in result.stderr


def test_a_bad_init_entry_fails_the_start_naming_it(tmp_path: Path) -> None:
    init = tmp_path / "init.json"
    init.write_text(json.dumps({"endpoint_configs": [{
        "EndpointConfigName": "cfg", "ProductionVariants": [{
            "VariantName": "AllTraffic", "ModelName": "missing", "InstanceType": "ml.m5.large",
            "InitialInstanceCount": 1}]}]}))
    result = _serve_fails(tmp_path, "--init", str(init))
    assert result.returncode == 2, result.stderr
    assert f"--init {init}: endpoint_configs[0] (EndpointConfigName cfg): " \
           "ValidationException: " in result.stderr
    assert "missing" in result.stderr
    assert "Traceback" not in result.stderr
    shapeless = tmp_path / "init.yaml"
    shapeless.write_text("endpoints: {EndpointName: x}\n")
    result = _serve_fails(tmp_path, "--init", str(shapeless))
    assert result.returncode == 2
    assert "endpoints must be a list of entries" in result.stderr
