"""Memory as SageMaker sees it: measured model memory and instance-type budgets.

A Python model whose tarball is a few KB but whose ``initialize`` fills 300 MiB counts as what
its stub holds, not as its files: two of them do not fit a 500 MiB budget, whatever their files
weigh. An endpoint created through boto3 with an InstanceType gets that type's budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError

from emulator import instance_types
from tests.client_support import create_mme_endpoint, runtime_client
from tests.fault_support import error_of, get_json, instance_of, invoke, models_of
from tests.prometheus_support import scrape, value
from tests.support import package, wait_until, write_scale_model

pytestmark = pytest.mark.slow
MIB = 1024**2
BALLAST_MIB = 300  # filled, not only reserved: the stub really holds them


def _ballast_store(store: Path, work: Path) -> None:
    for name, scale in (("big1", 2), ("big2", 3)):
        folder = write_scale_model(work / name, name, scale=scale, ballast_mib=str(BALLAST_MIB))
        package(folder, store / f"{name}.tar.gz", "folder")


def _events(server: Any) -> list[tuple[str, str, Any]]:
    """(step, model, the model an unload made room for) of every lifecycle step."""
    events: list[tuple[str, str, Any]] = []
    instance_of(server).manager.add_observer(
        lambda step, target, details: events.append((step, target, details.get("for"))))
    return events


def _ballast_server(start_emulator, store: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                    memory_budget: str) -> tuple[Any, Any, list[tuple[str, str, Any]]]:
    """The two ballast models served under ``memory_budget``: the server, a client, and the
    lifecycle steps as they come."""
    _ballast_store(store, tmp_path / "w")
    server = start_emulator(model_data=str(store), memory_budget=memory_budget)
    return server, runtime_client(server.url), _events(server)


def test_a_model_counts_as_what_its_processes_hold_and_evicts_by_it(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    server, rt, events = _ballast_server(start_emulator, store, tmp_path, "500MiB")

    invoke(rt, "big1.tar.gz")
    big1 = models_of(server)["big1.tar.gz"]
    assert big1["SizeBytes"] < MIB  # its files
    assert big1["MeasuredBytes"] >= BALLAST_MIB * MIB  # what its stub holds
    assert big1["MemoryBytes"] == big1["MeasuredBytes"]  # what the budget counts

    # Its files and big2's fit the budget many times over; their memory does not: once big2
    # has loaded and measured, big1 (the least recently used) is unloaded for it.
    invoke(rt, "big2.tar.gz")
    wait_until(lambda: models_of(server)["big1.tar.gz"]["State"] == "on_disk",
               what="big1 unloaded for big2's measured memory")
    assert ("unloading", "big1.tar.gz", "big2.tar.gz") in events
    assert models_of(server)["big2.tar.gz"]["Loaded"]

    # Back again: big1 is now known to hold 300 MiB, so big2 is unloaded before big1 loads.
    del events[:]
    invoke(rt, "big1.tar.gz")
    assert events.index(("unloading", "big2.tar.gz", "big1.tar.gz")) < events.index(
        ("loading", "big1.tar.gz", None))
    listing = get_json(f"{server.url}/_emulator/models")["Endpoints"]["local"]
    assert BALLAST_MIB * MIB <= listing["LoadedBytes"] <= 500 * MIB

    # The metrics show both figures; MemoryUtilization is the processes' memory against the
    # instance's (here its budget: no InstanceType).
    _types, samples = scrape(server.url)
    labels = {"endpoint_name": "local", "variant_name": "AllTraffic",
              "instance_id": instance_of(server).id}
    assert value(samples, "mme_loaded_model_bytes", **labels) >= BALLAST_MIB * MIB
    assert value(samples, "mme_loaded_model_file_bytes", **labels) < MIB
    server.registry.sample_utilization()
    utilization = instance_of(server).metrics.latest["MemoryUtilization"]
    assert utilization >= 100 * BALLAST_MIB / 500


def test_an_endpoint_created_with_an_instance_type_gets_its_budget(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    write_scale_model(tmp_path / "w", "small")
    package(tmp_path / "w" / "small", store / "small.tar.gz", "folder")
    server = start_emulator()
    sm = boto3.client("sagemaker", endpoint_url=server.url, region_name="us-east-1",
                      aws_access_key_id="x", aws_secret_access_key="x")
    create_mme_endpoint(sm, "typed", f"file://{store}/", "ml.c5.large")
    invoke(runtime_client(server.url), "small.tar.gz", endpoint="typed")
    described = get_json(f"{server.url}/_emulator/models")["Endpoints"]["typed"]
    c5_large = instance_types.lookup("ml.c5.large")
    assert c5_large is not None
    assert described["MemoryBudgetBytes"] == c5_large.model_memory_bytes == int(4 * 1024**3 * 0.9)
    instance = instance_of(server, "typed").describe()
    assert (instance["InstanceType"], instance["MemoryBudgetSource"]) == ("ml.c5.large",) * 2


def test_a_model_too_large_for_the_instance_gets_sagemakers_out_of_memory_error(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    server, rt, events = _ballast_server(start_emulator, store, tmp_path, "200MiB")
    for attempt in ("measured at its load", "known before loading"):
        with pytest.raises(ClientError) as caught:
            invoke(rt, "big1.tar.gz")
        code, status, message = error_of(caught.value)
        assert (code, status) == ("ModelError", 507), (attempt, message)
        assert "out of memory" in message and "instance type with more memory" in message
        assert "(measured)" in message
        wait_until(lambda: models_of(server)["big1.tar.gz"]["State"] == "on_disk",
                   what="the model that does not fit unloaded")
    # The second time it was refused without loading: its measured size was known.
    assert [e for e in events if e[:2] == ("loading", "big1.tar.gz")] == [
        ("loading", "big1.tar.gz", None)]
    assert models_of(server)["big1.tar.gz"]["MeasuredBytes"] >= BALLAST_MIB * MIB


# The model fills memory in steps when asked (X[0] == 99) until it is killed (or 6 GiB).
HOG = '''        if pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy().flat[0] == 99:
            self.hog = []
            for _ in range(24):
                self.hog.append(np.ones(256 * 1024 * 1024 // 8))
                time.sleep(0.05)
            self.hog = []
'''
EXECUTE_LINE = "    def execute(self, requests):\n"


def test_a_model_process_past_the_instances_memory_is_killed_as_on_the_endpoint(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    """ml.t2.medium has 4 GiB: a model that fills more has its process killed (the kernel's OOM
    killer there, the instance's memory watch here) and the client gets Triton's "Stub process
    ... is not healthy", what users of such an endpoint see; the model then reloads."""
    folder = write_scale_model(tmp_path / "w", "hog")
    model_py = folder / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace(EXECUTE_LINE, EXECUTE_LINE + HOG))
    package(folder, store / "hog.tar.gz", "folder")
    server = start_emulator(model_data=str(store), instance_type="ml.t2.medium")
    rt = runtime_client(server.url)
    events = _events(server)
    invoke(rt, "hog.tar.gz")  # loaded, small
    with pytest.raises(ClientError) as caught:
        invoke(rt, "hog.tar.gz", [99, 1, 1, 1])
    code, status, message = error_of(caught.value)
    assert code == "ModelError" and status == 500, message
    assert "Stub process" in message and "is not healthy" in message
    assert any(e[:2] == ("oom-killed", "hog.tar.gz") for e in events)
    # Taken out as any dead stub: the next request loads it afresh and is served.
    np.testing.assert_allclose(invoke(rt, "hog.tar.gz"), [2, 4, 6, 8])


def test_an_overwritten_tarball_is_served_old_until_evicted_with_a_warning(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Same key, new bytes: as SageMaker, the copy loaded (and on disk) keeps being served
    until it is evicted; the log and /_emulator/models (the page) say why."""
    def publish(name: str, scale: float) -> None:
        folder = write_scale_model(tmp_path / f"w{scale}", name, scale=scale)
        (folder / "1" / "weights.bin").write_bytes(b"\0" * 400_000)
        package(folder, store / f"{name}.tar.gz", "folder")

    for name in ("a", "b", "c"):
        publish(name, 2)
    server = start_emulator(model_data=str(store), max_loaded_models=1, disk_budget="1MiB")
    rt = runtime_client(server.url)
    events = _events(server)
    np.testing.assert_allclose(invoke(rt, "a.tar.gz"), [2, 4, 6, 8])
    publish("a", 3)  # overwritten in the store
    instance_of(server).manager.store_check_s = 0.0  # look at every request (30 s by default)
    np.testing.assert_allclose(invoke(rt, "a.tar.gz"), [2, 4, 6, 8])  # the copy it loaded
    wait_until(lambda: models_of(server)["a.tar.gz"]["StoreChanged"],
               what="the page to say the store changed")
    assert any(e[:2] == ("store-changed", "a.tar.gz") for e in events)
    assert "step=store-changed" in caplog.text and "keeps serving the copy" in caplog.text
    np.testing.assert_allclose(invoke(rt, "a.tar.gz"), [2, 4, 6, 8])  # still, while loaded
    # Evicted from memory (b) and from disk (c needs a's room): the next call downloads anew.
    invoke(rt, "b.tar.gz")
    invoke(rt, "c.tar.gz")
    wait_until(lambda: not models_of(server).get("a.tar.gz", {}).get("OnDisk"),
               what="a deleted from disk")
    np.testing.assert_allclose(invoke(rt, "a.tar.gz"), [3, 6, 9, 12])
    assert not models_of(server)["a.tar.gz"]["StoreChanged"]
