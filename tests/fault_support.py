"""Helpers for the hardening and fault suites: conditions to wait on, broken models, leftovers."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from emulator.triton import embedded, stubs
from harness.testmodels import write_scale_model
from tests.support import output_of, package, scale_request

SHM = Path("/dev/shm")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def instance_of(server: Any, endpoint: str = "local") -> Any:
    """The object holding ``launcher`` and ``manager`` (an endpoint, or its first instance)."""
    found = server.registry.get(endpoint)
    instances = getattr(found, "instances", None)
    return instances[0] if instances else found


def observe_steps(server: Any) -> list[tuple[str, str]]:
    """``(step, target)`` of each lifecycle step of the first instance's models, from now on."""
    events: list[tuple[str, str]] = []
    instance_of(server).manager.add_observer(
        lambda step, target, _details: events.append((step, target)))
    return events


def models_of(server: Any, endpoint: str = "local") -> dict[str, dict[str, Any]]:
    """The first instance's models, read over HTTP as a user would: the manager's records
    belong to the server's event loop and change while a test thread would iterate them."""
    described = get_json(f"{server.url}/_emulator/models")["Endpoints"][endpoint]
    first = instance_of(server, endpoint).id
    return {row["TargetModel"]: row for row in described["Models"] if row["Instance"] == first}


def invoke(rt: Any, target: str, values: list[float] | None = None,
           endpoint: str = "local") -> np.ndarray:
    resp = rt.invoke_endpoint(EndpointName=endpoint, TargetModel=target,
                              Body=scale_request(values or [1, 2, 3, 4]))
    return output_of(resp["Body"].read())


def error_of(exc: Any) -> tuple[str, int | None, str]:
    """(error code, OriginalStatusCode, message + OriginalMessage) of a boto3 ClientError."""
    response = exc.response
    return (response["Error"]["Code"], response.get("OriginalStatusCode"),
            f'{response["Error"].get("Message", "")} {response.get("OriginalMessage", "")}')


def write_patched_model(repo: Path, name: str, prologue: str = "", in_execute: str = "",
                        **params: str) -> Path:
    """The scale model with code put at the top of model.py and/or at the start of execute."""
    folder = write_scale_model(repo, name, **params)
    source = folder / "1" / "model.py"
    text = source.read_text()
    if in_execute:
        marker = "    def execute(self, requests):\n"
        body = "".join(f"        {line}\n" for line in in_execute.splitlines())
        text = text.replace(marker, marker + body)
    source.write_text(prologue + text)
    return folder


@dataclass(frozen=True)
class Leftovers:
    processes: list[int]
    regions: list[str]


@dataclass(frozen=True)
class RecordedStub:
    """A stub as its record named it, with the folder its shm region is in and the inode it
    had when recorded: a restarted Triton numbers its regions afresh, so a same-named region may
    be a new one."""
    pid: int
    model: str
    shm_region: str | None
    region_dir: Path
    region_inode: int | None


def regions_dir_of(launcher: Any) -> Path:
    """Where this Triton's stubs make their regions: its private /dev/shm, reached through its
    own root while it lives (gone with it), or the machine's. The machine's /dev/shm also holds
    the regions of a user's own Triton another test runs, under the same names."""
    return (Path(f"/proc/{launcher.pid}/root/dev/shm") if embedded.private_shm_wrapper()
            else SHM)


def stub_records(launcher: Any) -> list[RecordedStub]:
    recorded = []
    folder = regions_dir_of(launcher)
    for stub in stubs.read(stubs.registry_for(launcher.repository)):
        inode = None
        if stub.shm_region:
            with contextlib.suppress(FileNotFoundError):
                inode = (folder / stub.shm_region).stat().st_ino
        recorded.append(RecordedStub(stub.pid, stub.model, stub.shm_region, folder, inode))
    return recorded


def _same_region_exists(stub: RecordedStub) -> bool:
    if not stub.shm_region:
        return False
    try:
        return (stub.region_dir / stub.shm_region).stat().st_ino == stub.region_inode
    except OSError:  # gone, or its Triton's root with it
        return False


def leftovers_of(records: list[RecordedStub], triton_pids: list[int]) -> Leftovers:
    """Which of these stubs and Tritons still run, which of their shm regions still exist."""
    alive = [pid for pid in [*triton_pids, *(s.pid for s in records)]
             if stubs.process_state(pid) not in (None, "Z")]
    regions = [s.shm_region for s in records if s.shm_region and _same_region_exists(s)]
    return Leftovers(alive, regions)


def process_group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":
                members.append(int(entry.name))
    return members


def scale_store(store: Path, work: Path, count: int, **params: str) -> None:
    """``m<i>.tar.gz``: model i multiplies by i + 1, so every answer names its model."""
    from tests.support import package

    for i in range(count):
        folder = write_scale_model(work / f"m{i}", f"model{i}", scale=i + 1, **params)
        package(folder, store / f"m{i}.tar.gz", "folder")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return stubs.process_state(pid) not in (None, "Z")


FINALIZE_GATED = '''
    def finalize(self):
        # The test's unload lasts until it creates this file (or 120 s pass).
        deadline = time.time() + 120
        while not os.path.exists({gate!r}) and time.time() < deadline:
            time.sleep(0.02)
'''


def write_gated_store(store: Path, work: Path, gate: Path, pad_bytes: int = 0,
                      extra: str = "") -> None:
    """``slow.tar.gz`` (x2) unloads only once ``gate`` exists; ``next.tar.gz`` (x3) does not.
    ``extra``: Python appended to both models' model.py."""
    for name, scale, gated in (("slow", 2, FINALIZE_GATED.format(gate=str(gate))),
                               ("next", 3, "")):
        folder = write_scale_model(work / name, name, scale=scale)
        model_py = folder / "1" / "model.py"
        model_py.write_text(model_py.read_text() + gated + extra)
        if pad_bytes:
            (folder / "1" / "weights.bin").write_bytes(b"\0" * pad_bytes)
        package(folder, store / f"{name}.tar.gz", "folder")


def serve_gated_store_for_one(start_emulator: Any, store: Path, tmp_path: Path) -> tuple[Any, Path]:
    """The gated store, 600 kB of files each, served under a byte budget (files) with room for
    one of its models: the server and the gate."""
    gate = tmp_path / "finalize-gate"
    write_gated_store(store, tmp_path / "w", gate, pad_bytes=600_000)
    server = start_emulator(model_data=str(store), memory_budget="1MiB", model_memory="files")
    return server, gate
