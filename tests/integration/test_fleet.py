"""The endpoint as a fleet, against real Tritons: variants with weights, several instances each
with its own cache and budgets, model-affinity routing, live capacity changes, restarts.

Every instance is its own embedded Triton process; the clients are unmodified boto3 clients.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from mme.cli import build_parser, settings_from_args
from tests.client_support import runtime_client
from tests.prometheus_support import scrape, value
from tests.support import output_of, package, scale_request, wait_until, write_scale_model

pytestmark = pytest.mark.slow
FAST = {"Delay": 1, "MaxAttempts": 120}


def sagemaker(url: str) -> Any:
    return boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="x", aws_secret_access_key="x")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url) as resp:
        return json.loads(resp.read())


def make_models(store: Path, work: Path, count: int) -> list[str]:
    """``m<i>.tar.gz`` multiplies by i + 1, so every answer says which model gave it."""
    names = []
    for i in range(count):
        package(write_scale_model(work / f"m{i}", f"model{i}", scale=i + 1),
                store / f"m{i}.tar.gz", "folder")
        names.append(f"m{i}.tar.gz")
    return names


def invoke(rt: Any, endpoint: str, target: str, **extra: Any) -> tuple[list[float], dict]:
    resp = rt.invoke_endpoint(EndpointName=endpoint, TargetModel=target,
                              Body=scale_request([1, 2, 3, 4]), **extra)
    return output_of(resp["Body"].read()).tolist(), resp


def deploy_ab(sm: Any, store: Path, name: str = "ab") -> None:
    """AWS's A/B example: A on 2 instances with weight 3, B on 1 instance with weight 1."""
    for model in ("m-a", "m-b"):
        sm.create_model(ModelName=model, ExecutionRoleArn="arn:aws:iam::123456789012:role/x",
                        PrimaryContainer={"Image": "triton", "Mode": "MultiModel",
                                          "ModelDataUrl": str(store) + "/"})
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[
        {"VariantName": "A", "ModelName": "m-a", "InitialInstanceCount": 2,
         "InitialVariantWeight": 3, "InstanceType": "ml.g5.xlarge"},
        {"VariantName": "B", "ModelName": "m-b", "InitialInstanceCount": 1,
         "InitialVariantWeight": 1, "InstanceType": "ml.g5.xlarge"}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)


def variants_of(sm: Any, name: str) -> dict[str, dict[str, Any]]:
    described = sm.describe_endpoint(EndpointName=name)
    return {v["VariantName"]: v for v in described["ProductionVariants"]}


def test_weights_target_variant_and_per_variant_metrics(start_emulator, store: Path,
                                                        tmp_path: Path) -> None:
    (target,) = make_models(store, tmp_path, 1)
    server = start_emulator(routing_seed=7)
    sm, rt = sagemaker(server.url), runtime_client(server.url)
    deploy_ab(sm, store)
    variants = variants_of(sm, "ab")
    assert {n: (v["CurrentInstanceCount"], v["CurrentWeight"]) for n, v in variants.items()} \
        == {"A": (2, 3.0), "B": (1, 1.0)}

    served = Counter()
    for _ in range(200):
        values, resp = invoke(rt, "ab", target)
        assert values == [1, 2, 3, 4]
        served[resp["InvokedProductionVariant"]] += 1
    # 3:1 weights: A's share of 200 is binomial(200, 0.75), 150 +- 6 (one sd).
    assert served["A"] + served["B"] == 200 and 125 <= served["A"] <= 175, served
    for _ in range(10):
        assert invoke(rt, "ab", target, TargetVariant="B")[1]["InvokedProductionVariant"] == "B"

    metrics = get_json(f"{server.url}/_emulator/metrics")["Endpoints"]["ab"]
    assert metrics["Metrics"]["Invocations"]["Sum"] == 210
    assert metrics["Variants"]["A"]["Metrics"]["Invocations"]["Sum"] == served["A"]
    assert metrics["Variants"]["B"]["Metrics"]["Invocations"]["Sum"] == served["B"] + 10
    assert metrics["Variants"]["B"]["Dimensions"] == {"EndpointName": "ab", "VariantName": "B"}
    _types, samples = scrape(server.url)  # prometheus_client's parser
    assert value(samples, "sagemaker_invocations_total", endpoint_name="ab",
                 variant_name="A") == served["A"]

    with pytest.raises(ClientError) as excinfo:
        invoke(rt, "ab", target, TargetVariant="C")
    assert excinfo.value.response["Error"]["Code"] == "ValidationError"
    assert "Variant C not found" in excinfo.value.response["Error"]["Message"]

    # Weight 0 takes A out of unnamed traffic; it still answers when named.
    sm.update_endpoint_weights_and_capacities(EndpointName="ab", DesiredWeightsAndCapacities=[
        {"VariantName": "A", "DesiredWeight": 0}])
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ab", WaiterConfig=FAST)
    assert {invoke(rt, "ab", target)[1]["InvokedProductionVariant"] for _ in range(20)} == {"B"}
    assert invoke(rt, "ab", target, TargetVariant="A")[1]["InvokedProductionVariant"] == "A"


def test_affinity_each_model_stays_on_one_instance_with_per_instance_budgets(
        start_emulator, store: Path, tmp_path: Path) -> None:
    targets = make_models(store, tmp_path, 3)
    server = start_emulator(model_data=str(store), instances=3, max_loaded_models=1)
    rt = runtime_client(server.url)
    placed: dict[str, set[str]] = {t: set() for t in targets}
    for call in range(15):
        target = targets[call % 3]
        values, resp = invoke(rt, "local", target)
        assert values == [(call % 3 + 1) * v for v in (1, 2, 3, 4)]
        placed[target].add(resp["ResponseMetadata"]["HTTPHeaders"]["x-mme-instance"])
    # Three instances with room for one model each: every model loads once, on its own instance.
    assert all(len(where) == 1 for where in placed.values()), placed
    assert len(set().union(*placed.values())) == 3
    fleet = get_json(f"{server.url}/_emulator/models")["Endpoints"]["local"]
    instances = fleet["Variants"]["AllTraffic"]["Instances"]
    assert [i["MaxLoadedModels"] for i in instances] == [1, 1, 1]
    assert [i["LoadedModelCount"] for i in instances] == [1, 1, 1]
    assert {m["TargetModel"]: m["Instance"] for m in fleet["Models"]} == {
        t: next(iter(where)).split("/")[1] for t, where in placed.items()}
    metrics = get_json(f"{server.url}/_emulator/metrics")["Endpoints"]["local"]["Metrics"]
    assert metrics["ModelCacheHit"]["Sum"] == 12 and metrics["ModelCacheHit"]["SampleCount"] == 15
    assert metrics["LoadedModelCount"]["Current"] == 3

    # The instance metrics AWS publishes per instance: one sample per instance and period.
    before = metrics["CPUUtilization"]["SampleCount"]
    server.registry.sample_utilization()
    server.registry.sample_utilization()
    fleet = get_json(f"{server.url}/_emulator/models")["Endpoints"]["local"]
    for instance in fleet["Variants"]["AllTraffic"]["Instances"]:
        figures = instance["Utilization"]
        assert figures["CPUUtilization"] >= 0 and 0 < figures["MemoryUtilization"] < 100
        assert 0 <= figures["DiskUtilization"] <= 100 and figures["LoadedModelCount"] == 1
    metrics = get_json(f"{server.url}/_emulator/metrics")["Endpoints"]["local"]["Metrics"]
    assert metrics["CPUUtilization"]["SampleCount"] - before == 3  # the first sample sets a base
    assert metrics["MemoryUtilization"]["Namespace"] == "/aws/sagemaker/Endpoints"


def test_scale_out_and_in_under_traffic_drops_nothing(start_emulator, store: Path,
                                                      tmp_path: Path) -> None:
    targets = make_models(store, tmp_path, 4)
    server = start_emulator(model_data=str(store))
    sm, rt = sagemaker(server.url), runtime_client(server.url)
    failures: list[str] = []
    answered: list[str] = []
    stop = threading.Event()

    def traffic(worker: int) -> None:
        call = 0
        while not stop.is_set():
            i = (worker + call) % len(targets)
            call += 1
            try:
                values, resp = invoke(rt, "local", targets[i])
                if values != [(i + 1) * v for v in (1, 2, 3, 4)]:
                    failures.append(f"wrong answer from {targets[i]}: {values}")
                answered.append(resp["ResponseMetadata"]["HTTPHeaders"]["x-mme-instance"])
            except ClientError as exc:
                failures.append(str(exc))

    threads = [threading.Thread(target=traffic, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    try:
        for count in (3, 1):
            before = len(answered)
            sm.update_endpoint_weights_and_capacities(
                EndpointName="local",
                DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic",
                                              "DesiredInstanceCount": count}])
            assert sm.describe_endpoint(EndpointName="local")["EndpointStatus"] == "Updating"
            sm.get_waiter("endpoint_in_service").wait(EndpointName="local", WaiterConfig=FAST)
            variant = variants_of(sm, "local")["AllTraffic"]
            assert (variant["CurrentInstanceCount"], variant["DesiredInstanceCount"]) == \
                (count, count)
            fleet = get_json(f"{server.url}/_emulator/models")["Endpoints"]["local"]
            assert len(fleet["Variants"]["AllTraffic"]["Instances"]) == count
            wanted = len(answered) + 20  # traffic keeps flowing on the new shape
            wait_until(lambda n=wanted: len(answered) >= n or bool(failures),
                       what=f"{wanted} calls")
            assert len(answered) > before
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert failures == []
    print(f"\n{len(answered)} calls while scaling 1 -> 3 -> 1, instances used: "
          f"{sorted(Counter(answered).items())}")


def test_bad_capacity_requests_change_nothing(start_emulator, store: Path,
                                              tmp_path: Path) -> None:
    make_models(store, tmp_path, 1)
    server = start_emulator()
    sm = sagemaker(server.url)
    deploy_ab(sm, store)

    def error(call: Any, **params: Any) -> tuple[str, str]:
        with pytest.raises(ClientError) as excinfo:
            call(**params)
        return excinfo.value.response["Error"]["Code"], excinfo.value.response["Error"]["Message"]

    update = sm.update_endpoint_weights_and_capacities
    code, message = error(update, EndpointName="ab", DesiredWeightsAndCapacities=[
        {"VariantName": "C", "DesiredInstanceCount": 2}])
    assert code == "ValidationException" and '"C" does not exist' in message
    code, message = error(update, EndpointName="ab", DesiredWeightsAndCapacities=[
        {"VariantName": "A", "DesiredWeight": 0}, {"VariantName": "B", "DesiredWeight": 0}])
    assert code == "ValidationException" and "greater than 0" in message
    code, message = error(update, EndpointName="ab", DesiredWeightsAndCapacities=[
        {"VariantName": "A", "DesiredInstanceCount": 0}])
    assert code == "ValidationException" and "at least 1" in message
    code, message = error(update, EndpointName="ab", DesiredWeightsAndCapacities=[
        {"VariantName": "A", "DesiredInstanceCount": 40}])
    assert code == "ResourceLimitExceeded" and "at most 16" in message
    code, message = error(update, EndpointName="ab", DesiredWeightsAndCapacities=[
        {"VariantName": "A"}])
    assert code == "ValidationException" and "DesiredWeight or DesiredInstanceCount" in message
    code, _ = error(update, EndpointName="nope", DesiredWeightsAndCapacities=[
        {"VariantName": "A", "DesiredWeight": 1}])
    assert code == "ValidationException"
    assert variants_of(sm, "ab")["A"]["DesiredInstanceCount"] == 2  # nothing changed

    update(EndpointName="ab", DesiredWeightsAndCapacities=[
        {"VariantName": "B", "DesiredInstanceCount": 2}])
    code, message = error(update, EndpointName="ab", DesiredWeightsAndCapacities=[
        {"VariantName": "A", "DesiredInstanceCount": 1}])
    assert code == "ValidationException" and "in-progress" in message
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ab", WaiterConfig=FAST)
    assert {n: v["CurrentInstanceCount"] for n, v in variants_of(sm, "ab").items()} == \
        {"A": 2, "B": 2}

    variant = {"ModelName": "m-a", "InitialInstanceCount": 1, "InstanceType": "ml.m5.xlarge"}
    code, message = error(sm.create_endpoint_config, EndpointConfigName="twice",
                          ProductionVariants=[{**variant, "VariantName": "X"},
                                              {**variant, "VariantName": "X"}])
    assert code == "ValidationException" and "unique" in message
    code, message = error(sm.create_endpoint_config, EndpointConfigName="weightless",
                          ProductionVariants=[{**variant, "VariantName": "X",
                                               "InitialVariantWeight": 0}])
    assert code == "ValidationException" and "greater than 0" in message
    sm.create_endpoint_config(EndpointConfigName="huge", ProductionVariants=[
        {**variant, "VariantName": "X", "InitialInstanceCount": 17}])
    code, message = error(sm.create_endpoint, EndpointName="huge", EndpointConfigName="huge")
    assert code == "ResourceLimitExceeded"
    assert [e["EndpointName"] for e in sm.list_endpoints()["Endpoints"]] == ["ab"]


def test_capacity_and_weights_survive_a_restart(start_emulator, store: Path,
                                                tmp_path: Path) -> None:
    (target,) = make_models(store, tmp_path, 1)
    cache = tmp_path / "shared-cache"
    server = start_emulator(cache_dir=cache)
    sm = sagemaker(server.url)
    deploy_ab(sm, store)
    sm.update_endpoint_weights_and_capacities(EndpointName="ab", DesiredWeightsAndCapacities=[
        {"VariantName": "A", "DesiredInstanceCount": 1, "DesiredWeight": 1},
        {"VariantName": "B", "DesiredInstanceCount": 2}])
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ab", WaiterConfig=FAST)
    server.stop()

    again = start_emulator(cache_dir=cache)
    sm = sagemaker(again.url)
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ab", WaiterConfig=FAST)
    assert {n: (v["CurrentInstanceCount"], v["CurrentWeight"])
            for n, v in variants_of(sm, "ab").items()} == {"A": (1, 1.0), "B": (2, 1.0)}
    fleet = again.registry.get("ab")
    assert [len(v.instances) for v in fleet.variants] == [1, 2]
    rt = runtime_client(again.url)
    for name in ("A", "B"):
        assert invoke(rt, "ab", target, TargetVariant=name)[1]["InvokedProductionVariant"] == name


def test_instances_flag_and_environment() -> None:
    args = build_parser().parse_args(["serve", "--instances", "3", "--routing-seed", "5"])
    settings = settings_from_args(args)
    assert (settings.instances, settings.routing_seed) == (3, 5)
    with pytest.raises(ValueError, match="--instances must be 1 or more"):
        settings_from_args(build_parser().parse_args(["serve", "--instances", "0"]))


def test_update_endpoint_moves_to_a_config_of_another_shape(start_emulator, store: Path,
                                                            tmp_path: Path) -> None:
    (target,) = make_models(store, tmp_path, 1)
    server = start_emulator()
    sm, rt = sagemaker(server.url), runtime_client(server.url)
    deploy_ab(sm, store)
    sm.create_endpoint_config(EndpointConfigName="c-only", ProductionVariants=[
        {"VariantName": "C", "ModelName": "m-b", "InitialInstanceCount": 3,
         "InstanceType": "ml.g5.xlarge"}])
    sm.update_endpoint(EndpointName="ab", EndpointConfigName="c-only")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ab", WaiterConfig=FAST)
    assert {n: v["CurrentInstanceCount"] for n, v in variants_of(sm, "ab").items()} == {"C": 3}
    assert {invoke(rt, "ab", target)[1]["InvokedProductionVariant"] for _ in range(5)} == {"C"}
    with pytest.raises(ClientError):
        invoke(rt, "ab", target, TargetVariant="A")
