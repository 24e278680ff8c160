"""Fault suite: the emulator under a failing machine. Run with ``-s`` for the figures.

Triton SIGKILLed under traffic, the S3 server killed mid-download and restarted, a full disk, the
emulator SIGKILLed during CreateEndpoint, a model load and DeleteEndpoint then restarted on the
same cache, and a soak of 64 clients over 20 models with room for 5. Every loop is bounded by a
count and a time; assertions are about behaviour (answers, error shapes, leftovers), never about
absolute times, which are printed instead.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator.processes import free_port
from emulator.triton.stubs import process_state as stubs_state
from harness.live_endpoint import EmulatorProcess
from tests.client_support import DUMMY_CREDENTIALS, runtime_client
from tests.fault_support import (
    error_of,
    instance_of,
    invoke,
    leftovers_of,
    models_of,
    pid_alive,
    process_group_members,
    scale_store,
    stub_records,
)
from tests.support import package, wait_until, write_scale_model

pytestmark = pytest.mark.slow

VENV_BIN = Path(sys.executable).parent
SAGEMAKER_ERRORS = {"ValidationError", "ModelError", "ModelNotReadyException",
                    "ServiceUnavailable"}


def _traffic(rt: Any, targets: list[str], stop: threading.Event, outcomes: list[tuple],
             max_requests: int) -> None:
    """Invoke random targets until ``stop`` or ``max_requests``.

    Records (time the request was sent, outcome, detail, time it was answered); model i
    multiplies by i + 1.
    """
    for _ in range(max_requests):
        if stop.is_set():
            return
        i = random.randrange(len(targets))
        sent = time.monotonic()
        try:
            y = invoke(rt, targets[i])
            ok = np.allclose(y, (i + 1) * np.array([1, 2, 3, 4]))
            outcomes.append((sent, "ok" if ok else "WRONG", None, time.monotonic()))
        except ClientError as exc:
            code, status, message = error_of(exc)
            http = exc.response["ResponseMetadata"]["HTTPStatusCode"]
            outcomes.append((sent, code, (status, http, message[:300]), time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - not a SageMaker answer at all
            outcomes.append((sent, f"RAW:{type(exc).__name__}", str(exc)[:200],
                             time.monotonic()))


# --- Triton SIGKILLed under traffic ------------------------------------------------------------

def test_triton_sigkilled_under_traffic(start_emulator, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scale_store(store, tmp_path / "models", 3)
    targets = [f"m{i}.tar.gz" for i in range(3)]
    server = start_emulator(model_data=str(store), invocation_timeout_s=20)
    rt = runtime_client(server.url, max_pool_connections=8)
    for target in targets:
        invoke(rt, target)
    launcher = instance_of(server).launcher
    stop, outcomes = threading.Event(), []
    threads = [threading.Thread(target=_traffic, args=(rt, targets, stop, outcomes, 3000))
               for _ in range(6)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(outcomes) >= 30, what="traffic to flow")
        old_pid, old_stubs = launcher.pid, stub_records(launcher)
        killed_at = time.monotonic()
        os.kill(old_pid, signal.SIGKILL)
        wait_until(lambda: launcher.restarts == 1, what="Triton to restart")
        # Recovered: every model answered correctly again after the kill.
        wait_until(lambda: {o for t, o, *_ in outcomes if t > killed_at and o == "ok"}
                   and sum(1 for t, o, *_ in outcomes[-12:] if o == "ok" and t > killed_at) == 12,
                   timeout=60, what="traffic to recover")
        served_at = min(done for t, o, _, done in outcomes if t > killed_at and o == "ok")
    finally:
        stop.set()
        for t in threads:
            t.join()
    after = [o for t, o, *_ in outcomes if t > killed_at]
    errors = Counter(o for o in after if o != "ok")
    print(f"\n[triton-kill] requests={len(outcomes)} after-kill={len(after)} "
          f"recovery (kill -> first success for a request sent after it)="
          f"{served_at - killed_at:.2f}s "
          f"errors={dict(errors)}")
    assert "WRONG" not in {o for _, o, *_ in outcomes}
    assert set(errors) <= SAGEMAKER_ERRORS, [d for _, o, d, _ in outcomes if o.startswith("RAW")]
    # The killed Triton's stubs and shared-memory regions are gone, not orphaned.
    wait_until(lambda: leftovers_of(old_stubs, [old_pid]).processes == [], timeout=20,
               what="the old stubs to go")
    assert leftovers_of(old_stubs, [old_pid]).regions == []
    assert process_group_members(old_pid) == []
    new_pid, new_stubs = launcher.pid, stub_records(launcher)
    server.stop()
    left = leftovers_of(new_stubs, [new_pid])
    assert left.processes == [] and left.regions == [], left


# --- the S3 server killed mid-download, then restarted -----------------------------------------

class MotoProcess:
    """moto's S3 as its own process, so it can be killed like a real server."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = self.client()
        wait_until(lambda: self._answers(client), timeout=30, what="moto to start")

    def _answers(self, client: Any) -> bool:
        try:
            client.list_buckets()
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def client(self) -> Any:
        return boto3.client("s3", endpoint_url=self.url, **DUMMY_CREDENTIALS,
                            config=Config(retries={"max_attempts": 1}))

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


@pytest.fixture
def moto_process() -> Iterator[MotoProcess]:
    for key, value in DUMMY_CREDENTIALS.items():
        os.environ.setdefault(key.upper() if key != "region_name" else "AWS_DEFAULT_REGION", value)
    moto = MotoProcess(free_port())
    moto.start()
    yield moto
    if moto.process and moto.process.poll() is None:
        moto.kill()


def _big_model(work: Path, tarball: Path, name: str, size: int, scale: float) -> Path:
    """A model with ``size`` bytes of random weights, as a plain (quick to write) tar."""
    folder = write_scale_model(work / name, name, scale=scale)
    (folder / "1" / "weights.bin").write_bytes(os.urandom(size))
    with tarfile.open(tarball, "w") as tar:  # the emulator reads any tar, compressed or not
        tar.add(folder, arcname=name)
    return tarball


def test_s3_killed_mid_download_then_restarted(start_emulator, moto_process: MotoProcess,  # type: ignore[no-untyped-def]
                                               tmp_path: Path) -> None:
    tarball = _big_model(tmp_path / "w", tmp_path / "big.tar.gz", "big", 96 * 1024**2, 2)

    def publish() -> None:
        s3 = moto_process.client()
        s3.create_bucket(Bucket="models")
        s3.upload_file(str(tarball), "models", "mme/big.tar.gz")

    publish()
    server = start_emulator(model_data="s3://models/mme/", s3_endpoint_url=moto_process.url)
    rt = runtime_client(server.url)
    artifacts = instance_of(server).manager.artifacts_dir
    caught: list[BaseException] = []

    def call() -> None:
        try:
            invoke(rt, "big.tar.gz")
        except BaseException as exc:  # noqa: BLE001 - collected: asserted below
            caught.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    # Kill the server once the download has started (its temporary file has bytes).
    wait_until(lambda: any(p.name.startswith(".download-") and p.stat().st_size > 0
                           for p in artifacts.glob(".download-*")) if artifacts.is_dir()
               else False, timeout=60, what="the download to start")
    moto_process.kill()
    caller.join(timeout=120)
    assert caught, "the request succeeded although the store died mid-download"
    assert isinstance(caught[0], ClientError), repr(caught[0])
    code, status, message = error_of(caught[0])
    print(f"\n[s3-kill] error={code} OriginalStatusCode={status} message={message[:160]!r}")
    assert (code, status) == ("ModelError", 503), message
    assert "did not answer" in message and "retry" in message
    assert list(artifacts.iterdir()) == []  # nothing half-written
    # Restarted (moto keeps no state, so the object is published again), the model serves.
    moto_process.start()
    publish()
    started = time.monotonic()
    np.testing.assert_allclose(invoke(rt, "big.tar.gz"), [2, 4, 6, 8])
    print(f"[s3-kill] served after restart in {time.monotonic() - started:.2f}s")


# --- a full disk --------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or 'not root'}): "
                    "the full-disk test needs one")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk(start_emulator, small_disk: Path, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    package_work = tmp_path / "w"
    scale_store(store, package_work, 1)  # m0: small, fits
    _big_model(package_work, store / "huge.tar.gz", "huge", 48 * 1024**2, 2)  # does not fit
    # Fits once but not twice: downloads stream into extraction, with no archive copy on disk.
    _big_model(package_work, store / "half.tar.gz", "half", 22 * 1024**2, 2)
    server = start_emulator(model_data=str(store), cache_dir=small_disk / "cache")
    rt = runtime_client(server.url)
    np.testing.assert_allclose(invoke(rt, "m0.tar.gz"), [1, 2, 3, 4])
    artifacts = instance_of(server).manager.artifacts_dir
    before = sorted(p.name for p in artifacts.iterdir())
    with pytest.raises(ClientError) as caught:
        invoke(rt, "huge.tar.gz")
    code, status, message = error_of(caught.value)
    print(f"\n[full-disk] huge.tar.gz: {code} {status} {message[:150]!r}")
    assert (code, status) == ("ModelError", 507), message
    assert "no space left" in message and "downloading" in message and "--cache-dir" in message
    assert sorted(p.name for p in artifacts.iterdir()) == before  # nothing half-written
    np.testing.assert_allclose(invoke(rt, "m0.tar.gz"), [1, 2, 3, 4])  # still serving
    free = os.statvfs(small_disk)
    assert free.f_bavail * free.f_frsize > 20 * 1024**2  # the failed download was removed
    np.testing.assert_allclose(invoke(rt, "half.tar.gz"), [2, 4, 6, 8])


# --- the emulator SIGKILLed mid-operation, restarted on the same cache --------------------------

def _serve(cache: Path, log: Path) -> EmulatorProcess:
    """``mme serve`` as its own process (the control plane is on the same port), on ``cache``."""
    return EmulatorProcess({"MME_CACHE_DIR": str(cache), "MME_LOG_LEVEL": "INFO"}, log,
                           startup_timeout_s=90).start()


def _processes_under(folder: Path) -> set[int]:
    """Processes whose command line names ``folder`` (Tritons and stubs of that cache)."""
    found, needle = set(), str(folder).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "cmdline").read_bytes() and pid_alive(int(entry.name)):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def _wait_gone(old: set[int], cache: Path) -> float:
    """Wait until none of ``old`` (a killed run's Triton and stubs) is left; say which are."""
    try:
        return wait_until(lambda: not (old & _processes_under(cache)), timeout=30)
    except AssertionError:
        left = {p: (_cmdline(p)[:160], stubs_state(p)) for p in old & _processes_under(cache)}
        raise AssertionError(f"the killed run left processes behind: {left}") from None


def _cmdline(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def _invoke_quietly(rt: Any, target: str, endpoint: str) -> None:
    """A request the emulator's death cuts off: whatever it gets is fine."""
    with contextlib.suppress(Exception):
        invoke(rt, target, endpoint=endpoint)


def _sm(url: str) -> Any:
    return boto3.client("sagemaker", endpoint_url=url, **DUMMY_CREDENTIALS)


def _status(sm: Any, name: str) -> str:
    try:
        return str(sm.describe_endpoint(EndpointName=name)["EndpointStatus"])
    except ClientError as exc:
        if "Could not find" in error_of(exc)[2] or error_of(exc)[0] == "ValidationError":
            return "Absent"
        raise


def test_emulator_sigkilled_mid_operations_then_restarted(store: Path, tmp_path: Path) -> None:
    gate = tmp_path / "load-gate"
    scale_store(store, tmp_path / "models", 1)
    package(write_scale_model(tmp_path / "slow", "slow", scale=5, load_gate=str(gate)),
            store / "slow.tar.gz")
    cache, log = tmp_path / "cache", tmp_path / "serve.log"
    figures: dict[str, str] = {}
    serve = _serve(cache, log)
    try:
        sm = _sm(serve.url)
        sm.create_model(ModelName="m", ExecutionRoleArn="arn:aws:iam::123456789012:role/x",
                        PrimaryContainer={"Image": "triton", "Mode": "MultiModel",
                                          "ModelDataUrl": str(store)})
        sm.create_endpoint_config(EndpointConfigName="c", ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.m5.xlarge",
            "InitialInstanceCount": 1}])
        # 1. Killed during CreateEndpoint.
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="c")
        figures["create: status when killed"] = _status(sm, "ep")
        old = _processes_under(cache)
        serve.stop(signum=signal.SIGKILL)
        serve = _serve(cache, log)
        sm, rt = _sm(serve.url), runtime_client(serve.url)
        waited = wait_until(lambda: _status(sm, "ep") in ("InService", "Failed"), timeout=90,
                            what="the endpoint to settle after the restart")
        assert _status(sm, "ep") == "InService"
        figures["create: InService after restart (s)"] = f"{waited:.2f}"
        np.testing.assert_allclose(invoke(rt, "m0.tar.gz", endpoint="ep"), [1, 2, 3, 4])
        _wait_gone(old, cache)
        # 2. Killed during a model load (the load waits on a gate).
        caller = threading.Thread(target=_invoke_quietly, args=(rt, "slow.tar.gz", "ep"))
        caller.start()
        wait_until(lambda: any(b"slow--" in _cmdline(p) for p in _processes_under(cache)),
                   timeout=60, what="the slow model's stub to start loading")
        old = _processes_under(cache)
        serve.stop(signum=signal.SIGKILL)
        caller.join(timeout=60)
        gate.touch()
        serve = _serve(cache, log)
        sm, rt = _sm(serve.url), runtime_client(serve.url)
        wait_until(lambda: _status(sm, "ep") == "InService", timeout=90, what="ep back")
        started = time.monotonic()
        np.testing.assert_allclose(invoke(rt, "slow.tar.gz", endpoint="ep"), [5, 10, 15, 20])
        figures["load: served after restart (s)"] = f"{time.monotonic() - started:.2f}"
        _wait_gone(old, cache)
        # 3. Killed during DeleteEndpoint.
        sm.delete_endpoint(EndpointName="ep")
        figures["delete: status when killed"] = _status(sm, "ep")
        old = _processes_under(cache)
        serve.stop(signum=signal.SIGKILL)
        serve = _serve(cache, log)
        sm = _sm(serve.url)
        wait_until(lambda: _status(sm, "ep") in ("Absent", "InService", "Failed"), timeout=90,
                   what="the delete to be finished or rolled back")
        figures["delete: status after restart"] = _status(sm, "ep")
        assert figures["delete: status after restart"] in ("Absent", "InService")
        _wait_gone(old, cache)
        code = serve.stop()
        figures["clean stop exit code"] = str(code)
        wait_until(lambda: not _processes_under(cache), timeout=30, what="no process left")
    finally:
        serve.stop(signum=signal.SIGKILL)
        print("\n[emulator-kill] " + "; ".join(f"{k}={v}" for k, v in figures.items()))


# --- soak: 64 clients, 20 models, room for 5 ----------------------------------------------------

def test_soak_64_clients_20_models_room_for_5(start_emulator, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scale_store(store, tmp_path / "models", 20)
    targets = [f"m{i}.tar.gz" for i in range(20)]
    server = start_emulator(model_data=str(store), max_loaded_models=5, invocation_timeout_s=10)
    rt = runtime_client(server.url, max_pool_connections=64)
    launcher = instance_of(server).launcher
    stop, outcomes = threading.Event(), []
    threads = [threading.Thread(target=_traffic, args=(rt, targets, stop, outcomes, 400))
               for _ in range(64)]
    started = time.monotonic()
    for t in threads:
        t.start()
    try:
        wait_until(lambda: time.monotonic() - started > 15 or len(outcomes) >= 64 * 400,
                   timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join()
    elapsed = time.monotonic() - started
    counts = Counter(o for _, o, *_ in outcomes)
    statuses = Counter(d[1] for _, o, d, _ in outcomes if o not in ("ok", "WRONG") and d
                       and isinstance(d, tuple))
    model_errors = Counter(d[2] for _, o, d, _ in outcomes if o == "ModelError")
    manager = instance_of(server).manager
    print(f"\n[soak] {len(outcomes)} requests in {elapsed:.1f}s outcomes={dict(counts)} "
          f"http={dict(statuses)} loads={manager.loads} unloads={manager.unloading.completed} "
          f"loaded-now={sum(m['Loaded'] for m in models_of(server).values())} "
          f"model-errors={dict(model_errors)}")
    assert counts["WRONG"] == 0
    assert not any(o.startswith("RAW") for o in counts), counts
    assert not any(s >= 500 for s in statuses), statuses
    assert counts["ok"] > 0
    assert manager.memory.capacity_count == 5 and len(manager.memory) <= 5
    pid, records = launcher.pid, stub_records(launcher)
    server.stop()
    left = leftovers_of(records, [pid])
    assert left.processes == [] and left.regions == [], left
