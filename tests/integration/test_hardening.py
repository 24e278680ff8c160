"""Isolation between tarballs, eviction, broken stubs, the disk budget.

Each test runs a real Triton behind the emulator and a boto3 client, and fails without its fix.
Slow steps wait on conditions (gate files, process states), never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import socket
import tarfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from emulator.manager import repository
from emulator.manager.records import artifact_key
from emulator.settings import Settings
from harness.live_endpoint import EmulatorProcess
from mme.cli import build_parser, settings_from_args
from tests.client_support import runtime_client
from tests.fault_support import (
    error_of,
    instance_of,
    invoke,
    leftovers_of,
    models_of,
    pid_alive,
    stub_records,
    write_patched_model,
)
from tests.support import (
    SUITE_ENV,
    output_of,
    package,
    wait_until,
    write_scale_ensemble,
    write_scale_model,
)


def _ensemble_over(repo: Path, step_model: str) -> Path:
    folder = repo / "ensemble"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(f'''name: "ensemble"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "{step_model}" model_version: -1
  input_map {{ key: "X" value: "INPUT" }} output_map {{ key: "Y" value: "OUTPUT" }} }} ] }}
''')
    return folder


# --- 1. one tarball cannot run another tarball's model -----------------------------------------

def test_a_step_outside_the_tarball_is_refused_by_the_layout(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_scale_model(repo, "mine")
    _ensemble_over(repo, "add_one--0123456789ab")
    with pytest.raises(repository.InvalidModelRepository, match="not in this tarball"):
        repository.read_layout(repo)
    write_scale_ensemble(tmp_path / "fine")  # steps inside the tarball stay fine
    assert repository.read_layout(tmp_path / "fine").entry == "ensemble"


def test_a_tarball_cannot_reach_another_tarballs_installed_model(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    package(write_scale_model(tmp_path / "victim", "add_one", scale=7), store / "victim.tar.gz",
            "folder")
    thief = tmp_path / "thief"
    write_scale_model(thief, "decoy")
    # The victim's installed name is public knowledge: the model name and a hash of its key.
    _ensemble_over(thief, repository.namespaced("add_one", artifact_key("victim.tar.gz")))
    package(thief, store / "thief.tar.gz", "flat")
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    np.testing.assert_allclose(invoke(rt, "victim.tar.gz"), [7, 14, 21, 28])
    body = json.dumps({"inputs": [{"name": "INPUT", "shape": [1, 4], "datatype": "FP32",
                                   "data": [1, 1, 1, 1]}]})
    with pytest.raises(ClientError) as caught:
        rt.invoke_endpoint(EndpointName="local", TargetModel="thief.tar.gz", Body=body)
    code, status, message = error_of(caught.value)
    assert (code, status) == ("ModelError", 400)
    assert "not in this tarball" in message and "add the model's folder" in message


# --- 2. a model stuck loading is never an eviction victim ---------------------------------------

def test_a_loading_model_is_not_evicted_and_does_not_starve_others(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    package(write_scale_model(tmp_path / "s", "stuck", load_gate=str(gate)), store / "stuck.tar.gz")
    for i in (1, 2):
        package(write_scale_model(tmp_path / f"m{i}", f"m{i}", scale=i), store / f"m{i}.tar.gz")
    server = start_emulator(model_data=str(store), max_loaded_models=2, invocation_timeout_s=8)
    rt = runtime_client(server.url)
    try:
        with pytest.raises(ClientError) as caught:  # nobody waits for it any more
            invoke(rt, "stuck.tar.gz")
        assert error_of(caught.value)[0] == "ModelNotReadyException"
        np.testing.assert_allclose(invoke(rt, "m1.tar.gz"), [1, 2, 3, 4])
        # No room: the idle loaded m1 goes, not the (older) model that is still loading.
        np.testing.assert_allclose(invoke(rt, "m2.tar.gz"), [2, 4, 6, 8])
        models = models_of(server)
        assert models["stuck.tar.gz"]["State"] == "loading"
        assert not models["m1.tar.gz"]["Loaded"] and models["m2.tar.gz"]["Loaded"]
    finally:
        gate.touch()


# --- 3. a stub that dies at import fails the load at once ---------------------------------------

def test_a_stub_dying_at_import_is_a_prompt_model_error(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    broken = write_patched_model(tmp_path / "b", "crashes", prologue="import os\nos._exit(3)\n")
    package(broken, store / "crashes.tar.gz")
    package(write_scale_model(tmp_path / "ok", "ok", scale=3), store / "ok.tar.gz")
    # Without the fix the client gets ModelNotReady after 30 s, and again until the load timeout.
    # The stub that dies is the one Triton starts to auto-complete the config, as SageMaker's
    # Triton does (without it, Triton notices the instance's stub dying on its own).
    server = start_emulator(model_data=str(store), invocation_timeout_s=30,
                            model_load_timeout_s=300, triton_auto_complete=True)
    rt = runtime_client(server.url)
    for _ in range(2):  # the second attempt loads afresh and fails the same way, not stuck
        with pytest.raises(ClientError) as caught:
            invoke(rt, "crashes.tar.gz")
        code, status, message = error_of(caught.value)
        assert (code, status) == ("ModelError", 400), message
        assert "exited while the model was being imported" in message
        assert "crashes--" in message  # names the instance
    np.testing.assert_allclose(invoke(rt, "ok.tar.gz"), [3, 6, 9, 12])  # the rest still serve
    launcher = instance_of(server).launcher
    records, pid = stub_records(launcher), launcher.pid
    assert any(r.model.startswith("crashes--") for r in records)
    server.stop()  # a Triton with a load stuck for ever still stops, and leaves nothing behind
    left = leftovers_of(records, [pid])
    assert left.processes == [] and left.regions == []


def test_model_load_timeout_is_a_flag() -> None:
    args = build_parser().parse_args(["serve", "--model-load-timeout", "42",
                                      "--max-extracted-bytes", "2GiB"])
    settings = settings_from_args(args)
    assert settings.model_load_timeout_s == 42.0
    assert settings.max_extracted_bytes == 2 * 1024**3


# --- 4. a stub that died while serving is taken out and reloaded --------------------------------

def test_a_stub_that_died_serving_is_reloaded_on_the_next_request(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    poison = ("x = pb_utils.get_input_tensor_by_name(requests[0], 'X').as_numpy()\n"
              "if x.flat[0] == 666:\n    os._exit(5)")
    model = write_patched_model(tmp_path / "p", "fragile", in_execute=poison, scale=2)
    package(model, store / "fragile.tar.gz")
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    np.testing.assert_allclose(invoke(rt, "fragile.tar.gz"), [2, 4, 6, 8])
    errors = []
    for _ in range(2):  # the poisoned request, then at most one that meets the dead stub
        try:
            invoke(rt, "fragile.tar.gz", [666, 0, 0, 0])
        except ClientError as exc:
            errors.append(error_of(exc))
        else:
            raise AssertionError("the poisoned request was answered")
        if not models_of(server)["fragile.tar.gz"]["Loaded"]:
            break
    assert all(code == "ModelError" for code, _, _ in errors), errors
    assert not models_of(server)["fragile.tar.gz"]["Loaded"]  # taken out
    np.testing.assert_allclose(invoke(rt, "fragile.tar.gz"), [2, 4, 6, 8])  # loaded afresh
    assert instance_of(server).manager.stub_failures == 1


def test_container_failed_takes_a_loaded_model_out(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    package(write_scale_model(tmp_path / "m", "m", scale=5), store / "m.tar.gz")
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    invoke(rt, "m.tar.gz")
    manager = instance_of(server).manager
    loop = instance_of(server).launcher._watchdog.get_loop()  # the emulator's event loop

    def call(status: int, body: bytes) -> bool:
        return asyncio.run_coroutine_threadsafe(
            manager.container_failed("m.tar.gz", status, body), loop).result(10)

    assert not call(400, b'{"error":"unexpected shape for input X"}')  # the client's fault
    assert models_of(server)["m.tar.gz"]["Loaded"]
    assert call(500, b"{\"error\":\"Stub process 'm--x_0_0' is not healthy.\"}")
    assert not models_of(server)["m.tar.gz"]["Loaded"]
    np.testing.assert_allclose(invoke(rt, "m.tar.gz"), [5, 10, 15, 20])


# --- 5. the disk budget holds during extraction -------------------------------------------------

def _bomb(path: Path, expanded: int) -> None:
    """A tarball whose one model expands to ``expanded`` bytes of zeros (a few KiB gzipped)."""
    repo = path.parent / "bomb-repo"
    write_scale_model(repo, "bomb")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(repo / "bomb", arcname="bomb")
        info = tarfile.TarInfo("bomb/1/weights.bin")
        info.size = expanded
        tar.addfile(info, _Zeros(expanded))
    path.write_bytes(buffer.getvalue())


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def test_a_gzip_bomb_over_the_disk_budget_is_refused(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    _bomb(store / "bomb.tar.gz", 64 * 1024**2)
    assert (store / "bomb.tar.gz").stat().st_size < 1024**2
    package(write_scale_model(tmp_path / "ok", "ok", scale=3), store / "ok.tar.gz")
    server = start_emulator(model_data=str(store), disk_budget="8MiB")
    rt = runtime_client(server.url)
    invoke(rt, "ok.tar.gz")  # on disk, and evictable: it does not count against the bomb
    with pytest.raises(ClientError) as caught:
        invoke(rt, "bomb.tar.gz")
    code, status, message = error_of(caught.value)
    assert (code, status) == ("ModelError", 507), message
    assert "--disk-budget" in message and "bomb.tar.gz" in message
    artifacts = instance_of(server).manager.artifacts_dir
    # Nothing half-written: only the model that fits is on disk.
    assert [p.name for p in artifacts.iterdir()] == [artifact_key("ok.tar.gz")]
    np.testing.assert_allclose(invoke(rt, "ok.tar.gz"), [3, 6, 9, 12])


def test_the_extraction_cap_names_a_flag_that_exists(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    _bomb(store / "big.tar.gz", 4 * 1024**2)
    server = start_emulator(model_data=str(store), max_extracted_bytes="1MiB")
    with pytest.raises(ClientError) as caught:
        invoke(runtime_client(server.url), "big.tar.gz")
    code, status, message = error_of(caught.value)
    assert (code, status) == ("ModelError", 400)
    assert "--max-extracted-bytes" in message
    build_parser().parse_args(["serve", "--max-extracted-bytes", "1MiB"])  # the flag exists


# --- folder store: a name too long for the file system is a missing object ----------------------

def test_a_target_model_too_long_for_the_file_system_is_a_validation_error(  # type: ignore[no-untyped-def]
        start_emulator, store: Path) -> None:
    server = start_emulator(model_data=str(store))
    with pytest.raises(ClientError) as caught:
        invoke(runtime_client(server.url), "x" * 300 + ".tar.gz")
    assert error_of(caught.value)[0] == "ValidationError"


def test_concurrent_requests_during_a_take_out_all_get_sagemaker_answers(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    """Threads keep invoking while one request kills the stub: every answer is right or a
    ModelError, and the model serves again afterwards."""
    poison = ("x = pb_utils.get_input_tensor_by_name(requests[0], 'X').as_numpy()\n"
              "if x.flat[0] == 666:\n    os._exit(5)")
    package(write_patched_model(tmp_path / "p", "fragile", in_execute=poison, scale=2),
            store / "fragile.tar.gz")
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url, max_pool_connections=8)
    invoke(rt, "fragile.tar.gz")
    stop = threading.Event()
    outcomes: list[str] = []

    def client() -> None:
        for _ in range(200):
            if stop.is_set():
                return
            try:
                resp = rt.invoke_endpoint(EndpointName="local", TargetModel="fragile.tar.gz",
                                          Body=json.dumps({"inputs": [{
                                              "name": "X", "shape": [1, 4], "datatype": "FP32",
                                              "data": [1, 2, 3, 4]}]}))
                ok = np.allclose(output_of(resp["Body"].read()), [2, 4, 6, 8])
                outcomes.append("ok" if ok else "WRONG")
            except ClientError as exc:
                code, _status, message = error_of(exc)
                outcomes.append(code)
                if "timed out" in message:
                    timed_out.append(message)

    timed_out: list[str] = []
    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(outcomes) >= 8, what="traffic")
    with pytest.raises(ClientError):
        invoke(rt, "fragile.tar.gz", [666, 0, 0, 0])
    # The requests queued behind the dead stub are answered at once, not at the timeout.
    wait_until(lambda: outcomes[-4:] == ["ok"] * 4 and models_of(server)["fragile.tar.gz"]
               ["Loaded"], timeout=180, what="recovery")
    stop.set()
    for t in threads:
        t.join()
    print(f"\n[take-out under traffic] {Counter(outcomes)}")
    assert "WRONG" not in outcomes
    assert set(outcomes) <= {"ok", "ModelError", "ModelNotReadyException"}, set(outcomes)
    assert timed_out == []  # nobody waited out the invocation timeout behind the dead stub
    assert instance_of(server).manager.stub_failures == 1  # taken out once, not by chance



def test_folder_keys_are_literal_like_s3_keys(start_emulator, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One object is never served under several names."""
    (store / "team-a").mkdir()
    package(write_scale_model(tmp_path / "ok", "ok", scale=3), store / "ok.tar.gz")
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    np.testing.assert_allclose(invoke(rt, "ok.tar.gz"), [3, 6, 9, 12])
    for target in ("team-a/../ok.tar.gz", "./ok.tar.gz", "ok.tar.gz/", "team-a//ok.tar.gz",
                   str(store / "ok.tar.gz")):
        with pytest.raises(ClientError) as caught:
            invoke(rt, target)
        assert error_of(caught.value)[0] == "ValidationError", target


# --- 7. hostile input is a SageMaker error, a client that leaves is not an error ----------------

def test_a_control_plane_body_nested_too_deep_is_a_serialization_error() -> None:
    from emulator.contract import control_plane as wire

    for body in (b"[" * 100_000 + b"]" * 100_000,
                 b'{"ModelName": "m", "Tags": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"):
        with pytest.raises(wire.ControlPlaneError) as caught:
            wire.parse_request("SageMaker.CreateModel", body)
        assert (caught.value.code, caught.value.status) == ("SerializationException", 400)
        assert "nested too deeply" in caught.value.message


def _raw_request(url: str, head: str, body: bytes = b"") -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def test_a_client_leaving_mid_body_is_one_info_line(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = start_emulator(model_data=str(store))
    with caplog.at_level(logging.INFO, logger="emulator.routes.runtime"):
        sock = _raw_request(server.url, "POST /endpoints/local/invocations HTTP/1.1\r\n"
                            "Host: x\r\nContent-Length: 100000\r\n"
                            "X-Amzn-SageMaker-Target-Model: a.tar.gz\r\n", b"x" * 10)
        sock.close()
        wait_until(lambda: any("client-disconnected" in r.getMessage() for r in caplog.records),
                   what="the disconnect logged")
    runtime_records = [r for r in caplog.records if r.name == "emulator.routes.runtime"]
    assert all(r.levelno < logging.WARNING for r in runtime_records), runtime_records


# --- 8. limits on input --------------------------------------------------------------------------

def test_a_chunked_body_over_the_limit_is_refused_before_it_ends(  # type: ignore[no-untyped-def]
        start_emulator, store: Path) -> None:
    """The body never ends (no last chunk): the answer can only come from reading stopping."""
    server = start_emulator(model_data=str(store), max_payload_bytes="64KiB")
    chunk = b"x" * (64 * 1024 + 1)
    sock = _raw_request(server.url, "POST /endpoints/local/invocations HTTP/1.1\r\n"
                        "Host: x\r\nTransfer-Encoding: chunked\r\n"
                        "X-Amzn-SageMaker-Target-Model: a.tar.gz\r\n",
                        f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    sock.settimeout(60)  # a bound on a wait that, without the fix, never ends
    answer = b""
    with sock:
        while b"\r\n\r\n" not in answer or b"oversize" not in answer:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"ValidationError" in answer and b"has oversize body" in answer, answer


@pytest.mark.parametrize("field", ["ContentType", "Accept", "CustomAttributes"])
def test_headers_over_botocores_length_limit_are_refused(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, field: str) -> None:
    server = start_emulator(model_data=str(store))
    rt = runtime_client(server.url)
    with pytest.raises(ClientError) as caught:
        rt.invoke_endpoint(EndpointName="local", TargetModel="a.tar.gz", Body=b"{}",
                           **{field: "a/" + "b" * 1023})
    code, _, message = error_of(caught.value)
    assert code == "ValidationError"
    assert "1024" in message and field[0].lower() + field[1:] in message, message
    # exactly 1,024 characters is fine: the request gets as far as the store lookup
    with pytest.raises(ClientError) as caught:
        rt.invoke_endpoint(EndpointName="local", TargetModel="a.tar.gz", Body=b"{}",
                           **{field: "a/" + "b" * 1022})
    assert "1024" not in error_of(caught.value)[2]


# --- 9. a clean stop ------------------------------------------------------------------------------

def test_mme_serve_exits_0_after_sigterm(tmp_path: Path, store: Path) -> None:
    log = tmp_path / "serve.log"
    server = EmulatorProcess(
        {"MME_MODEL_DATA": str(store), "MME_CACHE_DIR": str(tmp_path / "cache")}, log,
        environment={k: v for k, v in os.environ.items() if not k.startswith("MME_")})
    try:
        server.start()
        assert server.stop(120) == 0, log.read_text()
    finally:
        server.stop()


def test_a_delete_cancelled_by_shutdown_still_stops_the_endpoint(
        tmp_path: Path, store: Path) -> None:
    from emulator.hosting.endpoint_registry import EndpointRegistry
    from emulator.hosting.factory import InstanceFactory
    from emulator.hosting.spec import single_variant

    settings = Settings.from_env(env=SUITE_ENV, cache_dir=tmp_path / "cache", model_data=str(store))

    async def scenario() -> tuple[Path, list[int]]:
        registry = EndpointRegistry(settings, InstanceFactory(settings).build)
        endpoint = await registry.create(single_variant("doomed", str(store)))
        pids = [i.launcher.pid for i in endpoint.instances]
        assert all(pid_alive(p) for p in pids)
        deleting = asyncio.create_task(registry.delete("doomed"))
        await asyncio.sleep(0)  # let the delete start (it forgets the endpoint first)
        assert registry.get("doomed") is None
        deleting.cancel()  # what the app's shutdown does to a DeleteEndpoint under way
        with contextlib.suppress(asyncio.CancelledError):
            await deleting
        await registry.close()
        return endpoint.work_dir, pids

    work_dir, pids = asyncio.run(scenario())
    assert not work_dir.exists()
    assert not any(pid_alive(p) for p in pids), pids


# --- 11. fidelity: the entry model's folder may differ from its config name ----------------------

def test_the_entry_model_folder_may_differ_from_its_config_name(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    repo = tmp_path / "bert"
    write_scale_model(repo, "bert", scale=5)
    (repo / "bert").rename(repo / "bert_0")  # the BERT-TensorRT MME notebook's layout
    assert repository.read_layout(repo).entry == "bert_0"
    with pytest.raises(repository.InvalidModelRepository, match="match"):
        repository.read_single_model_layout(repo, None)  # Triton's serve keeps the check
    package(repo, store / "bert.tar.gz", "folder")
    server = start_emulator(model_data=str(store))
    np.testing.assert_allclose(invoke(runtime_client(server.url), "bert.tar.gz"), [5, 10, 15, 20])


def test_a_step_folder_must_still_match_its_config_name(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_scale_ensemble(repo)
    (repo / "preprocess" / "config.pbtxt").write_text(
        (repo / "preprocess" / "config.pbtxt").read_text().replace('"preprocess"', '"pre"', 1))
    with pytest.raises(repository.InvalidModelRepository, match="match"):
        repository.read_layout(repo)
