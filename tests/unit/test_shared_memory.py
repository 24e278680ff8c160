"""Which bodies go to Triton through shared memory, how their JSON is rewritten, and the region's
lending of pieces (emulator.triton.shared_memory)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from emulator.triton.shared_memory import ALIGNMENT, REGION_NAME, Region, shared_header


def header(*inputs: dict[str, object], **top: object) -> bytes:
    return json.dumps({"inputs": list(inputs), **top}).encode()


def binary(name: str, shape: list[int], datatype: str = "FP32", size: int | None = None,
           **parameters: object) -> dict[str, object]:
    element = {"FP32": 4, "FP16": 2, "INT64": 8, "UINT8": 1}.get(datatype, 4)
    if size is None:
        size = element * (shape[0] * shape[1] if len(shape) == 2 else shape[0])
    return {"name": name, "shape": shape, "datatype": datatype,
            "parameters": {"binary_data_size": size, **parameters}}


def test_binary_inputs_are_read_from_the_region_one_after_the_other() -> None:
    text = header(binary("A", [2, 3]), {"name": "B", "shape": [1], "datatype": "INT32",
                                        "data": [7]},
                  binary("C", [5], "FP16", tag="kept"),
                  outputs=[{"name": "Y", "parameters": {"binary_data": True}}], id="r1")

    rewritten = json.loads(shared_header(text, 24 + 10, REGION_NAME, 4096) or b"null")

    a, b, c = rewritten["inputs"]
    assert a["parameters"] == {"shared_memory_region": REGION_NAME,
                               "shared_memory_byte_size": 24, "shared_memory_offset": 4096}
    assert b == {"name": "B", "shape": [1], "datatype": "INT32", "data": [7]}
    assert c["parameters"] == {"tag": "kept", "shared_memory_region": REGION_NAME,
                               "shared_memory_byte_size": 10, "shared_memory_offset": 4120}
    assert rewritten["outputs"] == [{"name": "Y", "parameters": {"binary_data": True}}]
    assert rewritten["id"] == "r1"


@pytest.mark.parametrize("text, binary_bytes", [
    # Triton checks these over HTTP and not for shared memory, or answers them its own way:
    pytest.param(header(binary("X", [10], size=36)), 36, id="size-not-the-shapes"),
    pytest.param(header(binary("X", [10])), 44, id="bytes-left-over"),
    pytest.param(header(binary("X", [10])), 36, id="bytes-missing"),
    pytest.param(header(binary("S", [2], "BYTES", size=20)), 20, id="bytes-datatype"),
    pytest.param(header(binary("X", [2], "FP31", size=8)), 8, id="unknown-datatype"),
    pytest.param(header({**binary("X", [2]), "data": [1, 2]}), 8, id="data-and-binary"),
    pytest.param(header({**binary("X", [2]), "shape": [2.0]}), 8, id="float-dimension"),
    pytest.param(header({**binary("X", [2]), "shape": [-1, 2]}), 8, id="negative-dimension"),
    pytest.param(header(binary("X", [2], shared_memory_region="theirs")), 8,
                 id="client-region"),
    pytest.param(header({"name": "X", "shape": [2], "datatype": "FP32", "parameters": [1]}), 0,
                 id="parameters-not-an-object"),
    pytest.param(header({"name": "X", "shape": [1], "datatype": "FP32", "data": [1]}), 0,
                 id="no-binary-input"),
    pytest.param(b'{"inputs": [', 8, id="not-json"),
    pytest.param(b'\xff\xfe', 8, id="not-utf8"),
    pytest.param(b'[1, 2]', 8, id="not-an-object"),
])
def test_a_body_triton_might_read_otherwise_goes_over_http(text: bytes,
                                                           binary_bytes: int) -> None:
    assert shared_header(text, binary_bytes, REGION_NAME, 0) is None


@pytest.fixture
def region(tmp_path: Path) -> Region:
    made, path = Region.create(tmp_path, 16 * ALIGNMENT)
    path.unlink()
    return made


def test_pieces_are_aligned_and_lent_once_until_given_back(region: Region) -> None:
    first = region.lend(1)
    second = region.lend(ALIGNMENT + 1)
    assert (first, second) == (0, ALIGNMENT)
    assert region.lend(14 * ALIGNMENT) is None  # 13 left
    region.give_back(first)
    assert region.lend(ALIGNMENT) == 0


def test_given_back_pieces_join_their_free_neighbours(region: Region) -> None:
    pieces = [region.lend(4 * ALIGNMENT) for _ in range(4)]
    assert region.lend(1) is None
    for index in (0, 2, 1, 3):  # freed out of order: the holes must merge into one
        region.give_back(pieces[index])  # type: ignore[arg-type]
    assert region.free_bytes == region.size
    assert region.lend(16 * ALIGNMENT) == 0


def test_a_full_region_lends_to_waiting_calls_first_come_first_served(region: Region) -> None:
    async def scenario() -> None:
        held = [region.lend(8 * ALIGNMENT), region.lend(8 * ALIGNMENT)]
        big = asyncio.ensure_future(region.lend_when_free(12 * ALIGNMENT))
        small = asyncio.ensure_future(region.lend_when_free(ALIGNMENT))
        await asyncio.sleep(0)
        assert not big.done() and not small.done()
        region.give_back(held[0])  # 8 free: the first in line needs 12, the small one queues
        await asyncio.sleep(0)
        assert not big.done() and not small.done()
        region.give_back(held[1])
        assert await big == 0
        assert await small == 12 * ALIGNMENT
        # 3 free. A newcomer does not overtake a call already waiting, though it would fit.
        first = asyncio.ensure_future(region.lend_when_free(4 * ALIGNMENT))
        newcomer = asyncio.ensure_future(region.lend_when_free(ALIGNMENT))
        await asyncio.sleep(0)
        assert not first.done() and not newcomer.done()
        region.give_back(await small)
        assert await first == 12 * ALIGNMENT
        region.give_back(await big)
        assert await newcomer == 0

    asyncio.run(scenario())


def test_a_body_longer_than_the_region_is_not_kept_waiting(region: Region) -> None:
    assert asyncio.run(region.lend_when_free(region.size + 1)) is None


def test_a_call_that_stops_waiting_lets_those_behind_it_through(region: Region) -> None:
    async def scenario() -> None:
        held = region.lend(16 * ALIGNMENT)
        assert held is not None
        with pytest.raises(asyncio.TimeoutError):
            await region.lend_when_free(16 * ALIGNMENT, timeout=0.01)
        behind = asyncio.ensure_future(region.lend_when_free(ALIGNMENT))
        await asyncio.sleep(0)
        region.give_back(held)
        assert await behind == 0
        assert region.free_bytes == region.size - ALIGNMENT  # the timed-out call holds none

    asyncio.run(scenario())


def test_a_call_lent_room_as_it_is_cancelled_gives_it_back(region: Region) -> None:
    async def scenario() -> None:
        held = region.lend(16 * ALIGNMENT)
        waiting = asyncio.ensure_future(region.lend_when_free(ALIGNMENT))
        await asyncio.sleep(0)
        region.give_back(held)  # lent to the waiting call, which has not run since
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert region.free_bytes == region.size

    asyncio.run(scenario())


def test_closing_the_region_sends_waiting_calls_over_http(tmp_path: Path) -> None:
    made, path = Region.create(tmp_path, 4096)
    path.unlink()

    async def scenario() -> None:
        assert made.lend(4096) == 0
        waiting = asyncio.ensure_future(made.lend_when_free(1))
        await asyncio.sleep(0)
        made.close()  # Triton was replaced
        assert await waiting is None
        assert await made.lend_when_free(1) is None

    asyncio.run(scenario())


def test_what_is_written_lands_where_the_piece_is(tmp_path: Path) -> None:
    made, path = Region.create(tmp_path, 4096)
    try:
        offset = made.lend(5)
        assert offset is not None
        made.write(offset, [b"he", memoryview(b"xllo")[1:]])
        with open(path, "rb") as other_mapping:  # what Triton maps
            other_mapping.seek(offset)
            assert other_mapping.read(5) == b"hello"
    finally:
        path.unlink()
        made.close()


def test_a_regions_pages_are_allocated_when_it_is_made(tmp_path: Path) -> None:
    """Else a write to a page a full tmpfs cannot give would be a SIGBUS."""
    made, path = Region.create(tmp_path, 1 << 20)
    try:
        assert path.stat().st_blocks * 512 >= 1 << 20
    finally:
        path.unlink()
        made.close()


def test_no_region_where_the_folder_has_not_twice_its_room(tmp_path: Path) -> None:
    room = os.statvfs(tmp_path)
    with pytest.raises(OSError, match="MiB free"):
        Region.create(tmp_path, room.f_bavail * room.f_frsize // 2 + 4096)
    assert os.listdir(tmp_path) == []


def test_a_region_that_cannot_be_made_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        Region.create(tmp_path, 0)
    assert os.listdir(tmp_path) == []
