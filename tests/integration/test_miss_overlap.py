"""A miss under a full byte budget: the load goes on while Triton tears the victim down.

Triton's Python backend sleeps a second before it finalizes a model being unloaded (its stub's
health check), so the new model's load starts once Triton has accepted the victim's unload
(docs/memory.md, "Where a miss goes"). What must still hold, shown with a victim whose
``finalize`` blocks on a gate file (its unload lasts as long as the test wants, so order is
observed, never timed): the budget counts the new model alone, the victim is never served while
its unload is in flight (a request for it waits, then loads it afresh), a model's memory is read
once its victims are gone, and no stub outlives its model.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from emulator.triton import stubs
from tests.client_support import runtime_client
from tests.fault_support import (
    instance_of,
    invoke,
    models_of,
    observe_steps,
    serve_gated_store_for_one,
    write_gated_store,
)
from tests.support import (
    output_of,
    package,
    scale_request,
    wait_until,
    write_scale_ensemble,
    write_scale_model,
)

# Memory a model holds from initialize on, so that measured sizes leave room for one model only.
BALLAST = '''
_BALLAST = []
_initialize = TritonPythonModel.initialize
def _initialize_with_ballast(self, args):
    _BALLAST.append(bytearray(80 << 20))  # zero-filled: every page written, so resident
    _initialize(self, args)
TritonPythonModel.initialize = _initialize_with_ballast
'''


def _call_in_background(rt: Any, target: str) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(invoke(rt, target)))
    caller.start()
    return caller, answers


def _stub_pids(server: Any, model_prefix: str) -> set[int]:
    """Pids of the recorded Python stubs of Triton models whose name starts with the prefix."""
    registry = stubs.registry_for(instance_of(server).launcher.repository)
    return {s.pid for s in stubs.read(registry) if s.model.startswith(model_prefix)}


def test_a_byte_budget_miss_loads_while_the_victim_unloads(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    server, gate = serve_gated_store_for_one(start_emulator, store, tmp_path)
    rt = runtime_client(server.url)
    events = observe_steps(server)
    manager = instance_of(server).manager
    np.testing.assert_allclose(invoke(rt, "slow.tar.gz"), [2, 4, 6, 8])
    slow_stubs = _stub_pids(server, "slow")
    assert slow_stubs
    try:
        # Served while the victim's unload cannot complete: the load did not wait for it.
        np.testing.assert_allclose(invoke(rt, "next.tar.gz"), [3, 6, 9, 12])
        assert models_of(server)["slow.tar.gz"]["State"] == "unloading"
        assert manager.memory.keys_lru_first() == ["next.tar.gz"]  # the victim is not counted
        assert ("unloaded", "slow.tar.gz") not in events
        assert events.index(("unloading", "slow.tar.gz")) < events.index(
            ("loading", "next.tar.gz"))
        # The victim asked for again while its unload is in flight: not served by the model
        # being torn down; the request waits for the unload, then loads it afresh.
        caller, answers = _call_in_background(rt, "slow.tar.gz")
        wait_until(lambda: manager.records["slow.tar.gz"].demand >= 1,
                   what="the request for the victim to wait")
        assert not answers and events.count(("loading", "slow.tar.gz")) == 1
    finally:
        gate.touch()
    caller.join(timeout=120)
    np.testing.assert_allclose(answers[0], [2, 4, 6, 8])
    reload = len(events) - events[::-1].index(("loading", "slow.tar.gz")) - 1
    assert events.index(("unloaded", "slow.tar.gz")) < reload
    # No stub outlives its model: the first slow's stubs have exited, and once next has been
    # evicted in turn, its stubs too; the registry lists the loaded model's stubs only.
    wait_until(lambda: ("unloaded", "next.tar.gz") in events, what="next's unload")
    assert all(stubs.process_state(pid) in (None, "Z") for pid in slow_stubs)
    assert manager.memory.keys_lru_first() == ["slow.tar.gz"]
    assert not _stub_pids(server, "next")
    assert not slow_stubs & _stub_pids(server, "slow")


def _triton_state(server: Any, target_prefix: str) -> str | None:
    """The state Triton itself reports for the model whose name starts with the prefix."""
    url = instance_of(server).launcher.http_url
    request = urllib.request.Request(f"{url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=30) as resp:
        index = json.loads(resp.read())
    return next((m.get("state") for m in index if m["name"].startswith(target_prefix)), None)


def _next_evicted_by_slow(start_emulator: Any, store: Path,
                          tmp_path: Path) -> tuple[Any, Any, list[tuple[str, str]], Path]:
    """The gated store with ballast (about 100 MB each once loaded) under a budget with room for
    one, both models measured, ``slow`` loaded: (server, runtime client, the steps seen, the
    gate that ends ``slow``'s unload)."""
    gate = tmp_path / "finalize-gate"
    write_gated_store(store, tmp_path / "w", gate, extra=BALLAST)
    server = start_emulator(model_data=str(store), memory_budget="160MiB")
    rt = runtime_client(server.url)
    events = observe_steps(server)
    invoke(rt, "next.tar.gz")  # measured: from now on it makes room before it loads
    invoke(rt, "slow.tar.gz")  # measured after its first load; next evicted then
    wait_until(lambda: ("unloaded", "next.tar.gz") in events, what="next's eviction")
    return server, rt, events, gate


def test_a_measured_model_is_read_once_its_victims_are_gone(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    server, rt, events, gate = _next_evicted_by_slow(start_emulator, store, tmp_path)
    caller, answers = _call_in_background(rt, "next.tar.gz")
    try:
        # Loaded in Triton while the victim's finalize holds: the load went on beside it.
        wait_until(lambda: _triton_state(server, "next") == "READY",
                   what="next to load beside the victim's unload")
        # But it is measured (and answers) only once the victim's memory is free: the victim's
        # stub would otherwise share its pages with next's and halve them in next's figure.
        assert models_of(server)["slow.tar.gz"]["State"] == "unloading"
        assert events.count(("loaded", "next.tar.gz")) == 1 and not answers
    finally:
        gate.touch()
    caller.join(timeout=120)
    np.testing.assert_allclose(answers[0], [3, 6, 9, 12])
    assert events.index(("unloaded", "slow.tar.gz")) < len(events) - 1 - events[::-1].index(
        ("loaded", "next.tar.gz"))
    assert models_of(server)["next.tar.gz"]["MeasuredBytes"] >= 80 << 20


def test_an_evicted_ensemble_is_unloaded_once_its_steps_are(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    # Triton reports an ensemble gone at once (it has no process of its own) while it still
    # tears down the steps its unload took with it: their memory is free only after that.
    write_scale_ensemble(tmp_path / "ens", pad_bytes=600_000)
    package(tmp_path / "ens", store / "ens.tar.gz", "flat")
    folder = write_scale_model(tmp_path / "w", "next", scale=3)
    (folder / "1" / "weights.bin").write_bytes(b"\0" * 600_000)
    package(folder, store / "next.tar.gz", "folder")
    server = start_emulator(model_data=str(store), memory_budget="1MiB",
                            model_memory="files")  # room for one
    rt = runtime_client(server.url)
    events = observe_steps(server)
    answer = rt.invoke_endpoint(EndpointName="local", TargetModel="ens.tar.gz",
                                Body=scale_request([1, 2, 3, 4], "INPUT"))
    np.testing.assert_allclose(output_of(answer["Body"].read(), "OUTPUT"), [6, 12, 18, 24])
    step_stubs = _stub_pids(server, "")  # only the ensemble is loaded: its steps' stubs
    assert len(step_stubs) >= 2
    running_at_unloaded: list[list[int]] = []  # read when the manager says it is unloaded

    def on_step(step: str, target: str, _details: Any) -> None:
        if (step, target) == ("unloaded", "ens.tar.gz"):
            running_at_unloaded.append(
                [pid for pid in step_stubs if stubs.process_state(pid) not in (None, "Z")])

    instance_of(server).manager.add_observer(on_step)
    np.testing.assert_allclose(invoke(rt, "next.tar.gz"), [3, 6, 9, 12])
    wait_until(lambda: ("unloaded", "ens.tar.gz") in events, what="the ensemble's unload")
    assert running_at_unloaded == [[]]


def test_a_load_measured_while_triton_is_replaced_loads_again_in_the_new_one(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    # Triton has loaded next, and the manager waits for the victim's teardown to measure it,
    # when the instance replaces its Triton (as it does after a load that never ends): next is
    # not in the new Triton, so the call loads it there.
    server, rt, _events, gate = _next_evicted_by_slow(start_emulator, store, tmp_path)
    instance = instance_of(server)
    old_pid = instance.launcher.pid
    answers: list[Any] = []
    errors: list[str] = []

    def call() -> None:
        try:
            answers.append(invoke(rt, "next.tar.gz"))
        except Exception as exc:  # noqa: BLE001 - the test reports what the client got
            errors.append(repr(exc))

    caller = threading.Thread(target=call)
    caller.start()
    try:
        wait_until(lambda: _triton_state(server, "next") == "READY",
                   what="next to load beside the victim's unload")
        loop = instance.launcher._watchdog.get_loop()  # the server's event loop
        loop.call_soon_threadsafe(instance._recycle_soon, "slow.tar.gz", "replaced by a test")
        wait_until(lambda: instance.launcher.pid not in (None, old_pid), 60, "the new Triton")
    finally:
        gate.touch()
        caller.join(timeout=120)
    assert errors == []
    np.testing.assert_allclose(answers[0], [3, 6, 9, 12])
    assert _triton_state(server, "next") == "READY"  # in the new Triton
