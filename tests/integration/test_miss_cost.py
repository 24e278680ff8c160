"""The cost of a miss under a full budget, against a real Triton.

Triton's Python backend takes about a second to unload even a trivial model. Under a count budget
(--max-loaded-models) the load that needs the room starts once Triton has accepted the victim's
unload; so does a byte budget (--memory-budget: tests/integration/test_miss_overlap.py), except on
an instance that kills a model process past its memory when the victim's memory, held until its
unload completes, could pass that: there the load waits for the unload. A victim whose
``finalize`` blocks on a gate file makes the unload last as long as the test wants, so the order
is observed, never timed.
"""

from __future__ import annotations

import threading
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
from tests.support import wait_until


def test_a_count_budget_loads_once_the_victims_unload_is_accepted(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    gate = tmp_path / "finalize-gate"
    write_gated_store(store, tmp_path / "w", gate)
    server = start_emulator(model_data=str(store), max_loaded_models=1)
    rt = runtime_client(server.url)
    events = observe_steps(server)
    np.testing.assert_allclose(invoke(rt, "slow.tar.gz"), [2, 4, 6, 8])
    try:
        # Served while the victim's unload cannot complete: the load did not wait for it.
        np.testing.assert_allclose(invoke(rt, "next.tar.gz"), [3, 6, 9, 12])
        models = models_of(server)
        assert models["slow.tar.gz"]["State"] == "unloading"
        assert models["next.tar.gz"]["Loaded"]
        manager = instance_of(server).manager
        assert manager.memory.keys_lru_first() == ["next.tar.gz"]  # the budget still holds
        assert ("unloaded", "slow.tar.gz") not in events
        assert events.index(("unloading", "slow.tar.gz")) < events.index(
            ("loading", "next.tar.gz"))
    finally:
        gate.touch()
    wait_until(lambda: ("unloaded", "slow.tar.gz") in events, what="the victim's unload")
    assert models_of(server)["slow.tar.gz"]["State"] == "on_disk"
    # And back: the victim loads again (its own unload is complete), evicting the other.
    np.testing.assert_allclose(invoke(rt, "slow.tar.gz"), [2, 4, 6, 8])
    manager = instance_of(server).manager
    assert manager.memory.keys_lru_first() == ["slow.tar.gz"]
    wait_until(lambda: ("unloaded", "next.tar.gz") in events, what="the other's unload")
    # The stub records of unloaded models are gone: the registry (read while loads are pending)
    # holds the loaded model's stubs only, however many models came and went.
    loaded = set(manager.records["slow.tar.gz"].installed)
    assert {s.model for s in stubs.read(manager._stub_registry)} == loaded


def test_at_the_memory_limit_a_load_waits_until_the_victims_memory_is_free(  # type: ignore[no-untyped-def]
        start_emulator, store: Path, tmp_path: Path) -> None:
    server, gate = serve_gated_store_for_one(start_emulator, store, tmp_path)
    # As an instance type whose memory is the budget: both models at once would pass it.
    instance_of(server).manager.hard_memory_limit = 1 << 20
    rt = runtime_client(server.url)
    events = observe_steps(server)
    invoke(rt, "slow.tar.gz")
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(invoke(rt, "next.tar.gz")))
    caller.start()
    try:
        wait_until(lambda: models_of(server).get("slow.tar.gz", {}).get("State") == "unloading",
                   what="the victim's unload to start")
        # The unload cannot complete before the gate exists, so neither may the load start.
        assert ("loading", "next.tar.gz") not in events
        assert models_of(server)["next.tar.gz"]["State"] == "on_disk"
    finally:
        gate.touch()
        caller.join(timeout=120)
    np.testing.assert_allclose(answers[0], [3, 6, 9, 12])
    assert events.index(("unloaded", "slow.tar.gz")) < events.index(("loading", "next.tar.gz"))
