"""The MME model lifecycle against a real Triton: store -> disk -> memory, LRU, pins, restarts.

Slow steps are made observable with gate files (a model's load or execute blocks until the test
creates the file), so every assertion waits on a condition, never on a timing.

Every scenario runs on each launcher in turn (``triton_launcher``: embedded, then docker).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from tests.client_support import DUMMY_CREDENTIALS, create_mme_endpoint, runtime_client
from tests.launcher_support import TritonLauncher
from tests.support import (
    output_of,
    package,
    scale_request,
    wait_until,
    write_scale_ensemble,
    write_scale_model,
)

pytestmark = pytest.mark.usefixtures("triton_launcher")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url) as resp:
        return json.loads(resp.read())


def models_of(server: Any) -> dict[str, dict[str, Any]]:
    rows = get_json(f"{server.url}/_emulator/models")["Endpoints"]["local"]["Models"]
    return {row["TargetModel"]: row for row in rows}


def metrics_of(server: Any) -> dict[str, Any]:
    return get_json(f"{server.url}/_emulator/metrics")["Endpoints"]["local"]["Metrics"]


def invoke(rt: Any, target: str, values: list[float] | None = None) -> np.ndarray:
    resp = rt.invoke_endpoint(EndpointName="local", TargetModel=target,
                              Body=scale_request(values or [1, 2, 3, 4]))
    return output_of(resp["Body"].read())


def make_store(store: Path, work: Path, count: int, pad_bytes: int = 0, **params: str) -> None:
    for i in range(count):
        folder = write_scale_model(work / f"m{i}", f"model{i}", scale=i + 1, **params)
        if pad_bytes:
            (folder / "1" / "weights.bin").write_bytes(b"\0" * pad_bytes)
        package(folder, store / f"m{i}.tar.gz", "folder")


def test_lru_eviction_by_count(start_emulator, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_store(store, tmp_path, 3)
    server = start_emulator(model_data=str(store), max_loaded_models=2)
    rt = runtime_client(server.url)
    np.testing.assert_allclose(invoke(rt, "m0.tar.gz"), [1, 2, 3, 4])
    invoke(rt, "m1.tar.gz")
    invoke(rt, "m0.tar.gz")  # m1 is now the least recently used
    np.testing.assert_allclose(invoke(rt, "m2.tar.gz"), [3, 6, 9, 12])
    # Under a count budget m2's load started once Triton accepted m1's unload, which may still
    # be completing.
    wait_until(lambda: models_of(server)["m1.tar.gz"]["State"] == "on_disk", what="m1's unload")
    models = models_of(server)
    assert {t for t, m in models.items() if m["Loaded"]} == {"m0.tar.gz", "m2.tar.gz"}
    assert models["m1.tar.gz"]["State"] == "on_disk" and models["m1.tar.gz"]["OnDisk"]
    assert models["m0.tar.gz"]["LruPosition"] == 0 and models["m2.tar.gz"]["LruPosition"] == 1
    metrics = metrics_of(server)
    assert metrics["ModelUnloadingTime"]["SampleCount"] == 1
    assert metrics["LoadedModelCount"]["Current"] == 2
    assert metrics["ModelCacheHit"]["Sum"] == 1 and metrics["ModelCacheHit"]["SampleCount"] == 4
    # Coming back from disk: no second download.
    invoke(rt, "m1.tar.gz")
    assert metrics_of(server)["ModelDownloadingTime"]["SampleCount"] == 3


def test_lru_eviction_by_memory_budget(start_emulator, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_store(store, tmp_path, 3, pad_bytes=400_000)
    server = start_emulator(model_data=str(store), memory_budget="1MiB",
                            model_memory="files")  # room for two
    rt = runtime_client(server.url)
    for target in ("m0.tar.gz", "m1.tar.gz", "m2.tar.gz"):
        invoke(rt, target)
    models = models_of(server)
    assert not models["m0.tar.gz"]["Loaded"]
    assert models["m1.tar.gz"]["Loaded"] and models["m2.tar.gz"]["Loaded"]
    listing = get_json(f"{server.url}/_emulator/models")["Endpoints"]["local"]
    assert listing["LoadedBytes"] <= 1024 * 1024


def test_model_larger_than_the_budget_is_a_507_model_error(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                            tmp_path: Path) -> None:
    make_store(store, tmp_path, 1, pad_bytes=2_000_000)
    server = start_emulator(model_data=str(store), memory_budget="1MiB",
                            model_memory="files")
    with pytest.raises(ClientError) as caught:
        invoke(runtime_client(server.url), "m0.tar.gz")
    assert caught.value.response["Error"]["Code"] == "ModelError"
    assert caught.value.response["OriginalStatusCode"] == 507


def test_disk_budget_deletes_lru_artifacts_not_loaded(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                      tmp_path: Path) -> None:
    make_store(store, tmp_path, 3, pad_bytes=400_000)
    server = start_emulator(model_data=str(store), max_loaded_models=1, disk_budget="1MiB")
    rt = runtime_client(server.url)
    for target in ("m0.tar.gz", "m1.tar.gz", "m2.tar.gz"):
        invoke(rt, target)
    models = models_of(server)
    assert "m0.tar.gz" not in models or not models["m0.tar.gz"]["OnDisk"]
    assert models["m2.tar.gz"]["Loaded"]
    artifacts = list((server.registry.get("local").instances[0].work_dir / "artifacts").iterdir())
    assert len(artifacts) == 2


def test_single_flight_one_download_one_load(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                             tmp_path: Path) -> None:
    gate = tmp_path / "load-gate"
    make_store(store, tmp_path, 1, load_gate=str(gate))
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url, max_pool_connections=16)
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(invoke, rt, "m0.tar.gz") for _ in range(8)]
        wait_until(lambda: models_of(server).get("m0.tar.gz", {}).get("State") == "loading",
                   what="the load to start")
        gate.touch()
        results = [f.result() for f in futures]
    for result in results:
        np.testing.assert_allclose(result, [1, 2, 3, 4])
    metrics = metrics_of(server)
    assert metrics["ModelDownloadingTime"]["SampleCount"] == 1
    assert metrics["ModelLoadingTime"]["SampleCount"] == 1
    assert metrics["ModelLoadingWaitTime"]["SampleCount"] == 8


def test_loads_of_different_models_run_side_by_side(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                    tmp_path: Path) -> None:
    gate = tmp_path / "load-gate"
    make_store(store, tmp_path, 2, load_gate=str(gate))
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(invoke, rt, t) for t in ("m0.tar.gz", "m1.tar.gz")]
        # Both are loading at once: neither waits for the other to finish.
        wait_until(lambda: [m["State"] for m in models_of(server).values()] == ["loading"] * 2
                   if len(models_of(server)) == 2 else False, what="both loads under way")
        gate.touch()
        for future in futures:
            future.result()


def test_a_model_serving_a_request_is_never_unloaded(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                     tmp_path: Path) -> None:
    gate = tmp_path / "run-gate"
    folder = write_scale_model(tmp_path / "slow", "slow", scale=5, run_gate=str(gate))
    package(folder, store / "slow.tar.gz", "folder")
    make_store(store, tmp_path, 1)
    server = start_emulator(model_data=str(store), max_loaded_models=1)
    rt = runtime_client(server.url)
    with ThreadPoolExecutor(2) as pool:
        serving = pool.submit(invoke, rt, "slow.tar.gz")
        wait_until(lambda: models_of(server).get("slow.tar.gz", {}).get("InFlight") == 1,
                   what="the slow request to be in flight")
        waiting = pool.submit(invoke, rt, "m0.tar.gz")
        # m0 needs the only slot, but slow.tar.gz is pinned: m0 waits, slow keeps serving.
        wait_until(lambda: "m0.tar.gz" in models_of(server), what="m0 to be requested")
        assert models_of(server)["slow.tar.gz"]["Loaded"]
        assert not waiting.done()
        gate.touch()
        np.testing.assert_allclose(serving.result(), [5, 10, 15, 20])
        np.testing.assert_allclose(waiting.result(), [1, 2, 3, 4])
    assert not models_of(server)["slow.tar.gz"]["Loaded"]


def test_same_named_models_in_two_tarballs_side_by_side(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                        tmp_path: Path) -> None:
    write_scale_ensemble(tmp_path / "a", scale_a=2, scale_b=3)
    write_scale_ensemble(tmp_path / "b", scale_a=10, scale_b=10)
    package(tmp_path / "a", store / "a.tar.gz", "flat")
    package(tmp_path / "b", store / "b.tar.gz", "folder")
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)

    def run(target: str) -> np.ndarray:
        body = json.dumps({"inputs": [{"name": "INPUT", "shape": [1, 4], "datatype": "FP32",
                                       "data": [1, 1, 1, 1]}]})
        resp = rt.invoke_endpoint(EndpointName="local", TargetModel=target, Body=body)
        return output_of(resp["Body"].read(), "OUTPUT")

    for _ in range(2):
        np.testing.assert_allclose(run("a.tar.gz"), [6] * 4)
        np.testing.assert_allclose(run("b.tar.gz"), [100] * 4)
    assert sum(m["Loaded"] for m in models_of(server).values()) == 2


def _gated_model(start_emulator, store: Path, tmp_path: Path, step: str,  # type: ignore[no-untyped-def]
                 timeout_s: float) -> tuple[Path, Any, Any]:
    """One model (m0.tar.gz) whose ``step`` ("load" or "run") waits until its gate file is
    touched, served with an invocation timeout of ``timeout_s``: the gate, the server, a
    client."""
    gate = tmp_path / f"{step}-gate"
    make_store(store, tmp_path, 1, **{f"{step}_gate": str(gate)})
    server = start_emulator(model_data=str(store), invocation_timeout_s=timeout_s)
    return gate, server, runtime_client(server.url)


def test_cold_load_past_the_timeout_is_model_not_ready_then_served(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                                   tmp_path: Path) -> None:
    gate, server, rt = _gated_model(start_emulator, store, tmp_path, "load", 1.0)
    with pytest.raises(ClientError) as caught:
        invoke(rt, "m0.tar.gz")
    assert caught.value.response["Error"]["Code"] == "ModelNotReadyException"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert models_of(server)["m0.tar.gz"]["State"] == "loading"  # loading goes on
    gate.touch()
    wait_until(lambda: models_of(server)["m0.tar.gz"]["Loaded"], what="the load to finish")
    np.testing.assert_allclose(invoke(rt, "m0.tar.gz"), [1, 2, 3, 4])


def test_slow_inference_times_out_as_a_model_error_with_status_0(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                                 tmp_path: Path) -> None:
    gate, server, rt = _gated_model(start_emulator, store, tmp_path, "run", 3.0)
    try:
        with pytest.raises(ClientError) as caught:
            invoke(rt, "m0.tar.gz")
        if caught.value.response["Error"]["Code"] == "ModelNotReadyException":
            # The cold load itself outlasted the 3 s (a busy machine, a container): the model
            # is loaded now, and its inference is the slow one.
            wait_until(lambda: models_of(server)["m0.tar.gz"]["Loaded"], what="the load")
            with pytest.raises(ClientError) as caught:
                invoke(rt, "m0.tar.gz")
    finally:
        gate.touch()
    assert caught.value.response["Error"]["Code"] == "ModelError"
    assert caught.value.response["OriginalStatusCode"] == 0
    assert "timed out" in caught.value.response["OriginalMessage"]


def test_s3_store_new_objects_and_deleted_ones(start_emulator, s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bucket = s3_server.bucket("models-lifecycle")
    work = tmp_path / "s3"
    make_store(work / "store", work, 3, pad_bytes=400_000)
    s3 = s3_server.client
    s3.upload_file(str(work / "store" / "m0.tar.gz"), bucket, "prefix/team/m0.tar.gz")
    server = start_emulator(model_data=f"s3://{bucket}/prefix",
                            s3_endpoint_url=s3_server.endpoint_url,
                            max_loaded_models=1, disk_budget="1MiB")  # two artifacts on disk
    rt = runtime_client(server.url)
    np.testing.assert_allclose(invoke(rt, "team/m0.tar.gz"), [1, 2, 3, 4])
    # A new object under a new name is invokable at once.
    s3.upload_file(str(work / "store" / "m1.tar.gz"), bucket, "prefix/team/m1-v2.tar.gz")
    s3.upload_file(str(work / "store" / "m2.tar.gz"), bucket, "prefix/team/m2.tar.gz")
    # A deleted object is still served while cached...
    s3.delete_object(Bucket=bucket, Key="prefix/team/m0.tar.gz")
    np.testing.assert_allclose(invoke(rt, "team/m0.tar.gz"), [1, 2, 3, 4])
    np.testing.assert_allclose(invoke(rt, "team/m1-v2.tar.gz"), [2, 4, 6, 8])  # m0 unloaded
    assert models_of(server)["team/m0.tar.gz"]["OnDisk"]
    np.testing.assert_allclose(invoke(rt, "team/m2.tar.gz"), [3, 6, 9, 12])  # m0 off the disk
    assert "team/m0.tar.gz" not in models_of(server)
    # ...and gone once evicted.
    with pytest.raises(ClientError) as caught:
        invoke(rt, "team/m0.tar.gz")
    assert caught.value.response["Error"]["Code"] == "ValidationError"
    assert f"s3://{bucket}/prefix" in caught.value.response["Error"]["Message"]


def test_triton_killed_mid_run_restarts_and_models_reload(  # type: ignore[no-untyped-def]
        start_emulator, triton_launcher: TritonLauncher, store: Path, tmp_path: Path) -> None:
    make_store(store, tmp_path, 1)
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    invoke(rt, "m0.tar.gz")
    launcher = triton_launcher.of(server)
    first = triton_launcher.identity(launcher)
    triton_launcher.kill(launcher)
    wait_until(lambda: launcher.restarts == 1 and launcher.is_running()
               and not models_of(server)["m0.tar.gz"]["Loaded"],
               timeout=180, what="Triton to be restarted")
    assert triton_launcher.identity(launcher) != first
    np.testing.assert_allclose(invoke(rt, "m0.tar.gz"), [1, 2, 3, 4])
    assert metrics_of(server)["ModelLoadingTime"]["SampleCount"] == 2


def test_stop_leaves_no_triton_behind(start_emulator, triton_launcher: TritonLauncher,  # type: ignore[no-untyped-def]
                                      store: Path, tmp_path: Path) -> None:
    make_store(store, tmp_path, 1)
    server = start_emulator(model_data=str(store))
    invoke(runtime_client(server.url), "m0.tar.gz")
    triton = triton_launcher.identity(triton_launcher.of(server))
    assert triton_launcher.exists(triton)
    server.stop()
    assert not triton_launcher.exists(triton)


def test_concurrent_traffic_over_many_models_stays_correct(start_emulator, store: Path,  # type: ignore[no-untyped-def]
                                                           tmp_path: Path) -> None:
    """Thrash a 2-slot cache with 4 models from 8 threads: every answer must be right."""
    make_store(store, tmp_path, 4)
    server = start_emulator(model_data=str(store), max_loaded_models=2)
    rt = runtime_client(server.url, max_pool_connections=16)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(6):
            i = int(rng.integers(0, 4))
            try:
                expected = np.array([1, 2, 3, 4]) * (i + 1)
                np.testing.assert_allclose(invoke(rt, f"m{i}.tar.gz"), expected)
            except BaseException as exc:  # noqa: BLE001 - collected: asserted below
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert metrics_of(server)["LoadedModelCount"]["Maximum"] <= 2


def test_model_cache_disabled_unloads_and_deletes_after_each_invocation(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    """MultiModelConfig.ModelCacheSetting=Disabled, set up through the control plane."""
    import boto3

    make_store(store, tmp_path, 1)
    server = start_emulator()
    sm = boto3.client("sagemaker", endpoint_url=server.url, **DUMMY_CREDENTIALS)
    create_mme_endpoint(sm, "nocache", f"file://{store}", "ml.m5.xlarge",
                        MultiModelConfig={"ModelCacheSetting": "Disabled"})
    rt = runtime_client(server.url)
    for _ in range(2):
        resp = rt.invoke_endpoint(EndpointName="nocache", TargetModel="m0.tar.gz",
                                  Body=scale_request([1, 2, 3, 4]))
        np.testing.assert_allclose(output_of(resp["Body"].read()), [1, 2, 3, 4])
    endpoint = get_json(f"{server.url}/_emulator/models")["Endpoints"]["nocache"]
    assert endpoint["Models"] == [] and endpoint["DiskBytes"] == 0
    metrics = get_json(f"{server.url}/_emulator/metrics")["Endpoints"]["nocache"]["Metrics"]
    assert metrics["ModelDownloadingTime"]["SampleCount"] == 2  # fetched again every time
    assert metrics["ModelUnloadingTime"]["SampleCount"] == 2
    assert metrics["ModelCacheHit"]["Sum"] == 0
