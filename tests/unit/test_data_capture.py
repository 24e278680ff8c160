"""Data capture without a server: a DataCaptureConfig's rules, the records and where they go
(``contract.data_capture``), and an endpoint's capture drawing, keeping and writing its calls
(``hosting.data_capture``) through a writer that stands in for S3."""

from __future__ import annotations

import asyncio
import base64
import calendar
import json
import random
import re
from typing import Any

import pytest

from emulator.contract.data_capture import CaptureRules, file_name, record
from emulator.contract.runtime import InvokeRequest
from emulator.hosting import data_capture
from emulator.hosting.data_capture import DataCapture
from emulator.hosting.instance import ContainerAnswer

CONFIG = {"InitialSamplingPercentage": 100, "DestinationS3Uri": "s3://bucket/capture/",
          "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
          "CaptureContentTypeHeader": {"CsvContentTypes": ["text/csv"],
                                       "JsonContentTypes": ["application/json"]}}
NOON = calendar.timegm((2026, 11, 30, 12, 5, 7)) + 0.25  # 2026-11-30T12:05:07.250Z


def rules(**changes: Any) -> CaptureRules:
    return CaptureRules.of({**CONFIG, **changes})


def line(capture: CaptureRules, **changes: Any) -> dict[str, Any]:
    call: dict[str, Any] = {
        "event_id": "e-1", "epoch_s": NOON, "input_type": "text/csv", "input_body": b"1,2,3",
        "output_type": "application/json; charset=utf-8", "output_body": b'{"y": [2]}',
        "inference_id": None, "target_model": None}
    parsed: dict[str, Any] = json.loads(record(capture, **{**call, **changes}))
    return parsed


def test_a_record_is_model_monitors_captured_data() -> None:
    assert line(rules(), inference_id="order-17", target_model="a.tar.gz") == {
        "captureData": {
            "endpointInput": {"observedContentType": "text/csv", "mode": "INPUT",
                              "data": "1,2,3", "encoding": "CSV"},
            # The media type is what a list names: its parameters do not count.
            "endpointOutput": {"observedContentType": "application/json; charset=utf-8",
                               "mode": "OUTPUT", "data": '{"y": [2]}', "encoding": "JSON"}},
        "eventMetadata": {"eventId": "e-1", "inferenceTime": "2026-11-30T12:05:07Z",
                          "inferenceId": "order-17", "targetModel": "a.tar.gz"},
        "eventVersion": "0"}


def test_a_body_no_list_names_is_base64_and_so_is_every_body_without_the_lists() -> None:
    binary = bytes(range(256))
    captured = line(rules(), input_type="application/octet-stream", input_body=binary)
    assert captured["captureData"]["endpointInput"]["encoding"] == "BASE64"
    assert base64.b64decode(captured["captureData"]["endpointInput"]["data"]) == binary
    bare = {k: v for k, v in CONFIG.items() if k != "CaptureContentTypeHeader"}
    both = line(CaptureRules.of(bare))["captureData"]
    assert [both[side]["encoding"] for side in ("endpointInput", "endpointOutput")] == \
        ["BASE64", "BASE64"]
    assert base64.b64decode(both["endpointOutput"]["data"]) == b'{"y": [2]}'
    # A body its type calls text that is not UTF-8 is kept whole, as base64.
    odd = line(rules(), input_body=b"\xff\xfe1,2")["captureData"]["endpointInput"]
    assert odd["encoding"] == "BASE64" and base64.b64decode(odd["data"]) == b"\xff\xfe1,2"


@pytest.mark.parametrize(("modes", "sides"), [
    (["Input"], ["endpointInput"]),
    (["Output"], ["endpointOutput"]),
    (["InputAndOutput"], ["endpointInput", "endpointOutput"]),
])
def test_the_capture_options_choose_the_sides(modes: list[str], sides: list[str]) -> None:
    capture = rules(CaptureOptions=[{"CaptureMode": m} for m in modes])
    assert sorted(line(capture)["captureData"]) == sides


def test_files_go_under_the_endpoint_the_variant_and_the_utc_hour() -> None:
    capture = rules()
    assert capture.folder("ep", "AllTraffic", NOON) == \
        "s3://bucket/capture/ep/AllTraffic/2026/11/30/12"
    assert file_name(NOON, "u-1") == "05-07-250-u-1.jsonl"
    assert rules(DestinationS3Uri="s3://bucket").folder("ep", "v", NOON) == \
        "s3://bucket/ep/v/2026/11/30/12"


def test_describe_endpoints_summary() -> None:
    assert rules(KmsKeyId="alias/capture").summary() == {
        "EnableCapture": True, "CaptureStatus": "Started", "CurrentSamplingPercentage": 100,
        "DestinationS3Uri": "s3://bucket/capture", "KmsKeyId": "alias/capture"}
    stopped = rules(EnableCapture=False, InitialSamplingPercentage=20).summary()
    assert (stopped["EnableCapture"], stopped["CaptureStatus"],
            stopped["CurrentSamplingPercentage"]) == (False, "Stopped", 20)


# --- an endpoint's capture -----------------------------------------------------------------

class Bucket:
    """Stands in for S3: what was written where, or a refusal while ``refusing``."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.keys: list[str | None] = []
        self.refusing = False

    async def put(self, url: str, body: bytes, content_type: str | None,
                  kms_key_id: str | None) -> None:
        if self.refusing:
            raise RuntimeError("NoSuchBucket: The specified bucket does not exist")
        self.objects[url] = body
        self.keys.append(kms_key_id)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(text) for body in self.objects.values()
                for text in body.decode().splitlines()]


def call(number: int, target: str | None = None) -> tuple[InvokeRequest, ContainerAnswer]:
    request = InvokeRequest("ep", f"r-{number}", f"{number}".encode(), "text/csv", None,
                            target, None, f"id-{number}", None)
    return request, ContainerAnswer(f"{number * 2}".encode(), "text/csv", None, 0.001, True)


def capture_calls(capture: DataCapture, numbers: range, variant: str = "AllTraffic") -> None:
    for number in numbers:
        capture.offer(*call(number), variant)


def test_every_call_drawn_is_written_once_when_the_endpoint_stops() -> None:
    bucket = Bucket()

    async def scenario() -> None:
        capture = DataCapture(rules(KmsKeyId="alias/capture"), "ep", bucket.put,
                              random.Random(1))
        capture_calls(capture, range(5))
        capture_calls(capture, range(5, 7), variant="Canary")
        await capture.close()

    asyncio.run(scenario())
    assert sorted(int(r["eventMetadata"]["inferenceId"][3:]) for r in bucket.records()) == \
        list(range(7))
    folders = {url.rsplit("/", 1)[0].split("/capture/", 1)[1] for url in bucket.objects}
    assert {f.rsplit("/", 4)[0] for f in folders} == {"ep/AllTraffic", "ep/Canary"}
    assert all(re.fullmatch(r"\d\d-\d\d-\d{3}-[0-9a-f-]{36}\.jsonl", url.rsplit("/", 1)[1])
               for url in bucket.objects)
    assert set(bucket.keys) == {"alias/capture"}  # every file encrypted with the config's key
    ids = [r["eventMetadata"]["eventId"] for r in bucket.records()]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(("percentage", "low", "high"), [(0, 0, 0), (30, 200, 400),
                                                         (100, 1000, 1000)])
def test_the_sampling_percentage_draws_the_calls(percentage: int, low: int, high: int) -> None:
    bucket = Bucket()

    async def scenario() -> None:
        capture = DataCapture(rules(InitialSamplingPercentage=percentage), "ep", bucket.put,
                              random.Random(7))
        capture_calls(capture, range(1000))
        await capture.close()

    asyncio.run(scenario())
    assert low <= len(bucket.records()) <= high


def test_a_disabled_capture_keeps_nothing() -> None:
    bucket = Bucket()

    async def scenario() -> None:
        capture = DataCapture(rules(EnableCapture=False), "ep", bucket.put, random.Random(1))
        capture_calls(capture, range(10))
        await capture.close()

    asyncio.run(scenario())
    assert bucket.objects == {}


def test_calls_s3_refused_are_written_at_the_next_flush(caplog: pytest.LogCaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_capture, "FLUSH_INTERVAL_S", 0.01)
    bucket = Bucket()
    bucket.refusing = True

    async def scenario() -> None:
        capture = DataCapture(rules(), "ep", bucket.put, random.Random(1))
        capture_calls(capture, range(3))
        while not any("could not write" in r.message for r in caplog.records):
            await asyncio.sleep(0.01)  # the flush task's turn: it meets the refusal
        bucket.refusing = False  # the bucket is made
        capture_calls(capture, range(3, 5))
        await capture.close()

    asyncio.run(scenario())
    assert sorted(r["eventMetadata"]["inferenceId"] for r in bucket.records()) == \
        [f"id-{n}" for n in range(5)]
    refusals = [r.message for r in caplog.records if "could not write" in r.message]
    assert len(refusals) == 1 and "NoSuchBucket" in refusals[0]  # said once, not per flush
    assert not any("lost" in r.message for r in caplog.records)


def test_what_s3_never_took_is_counted_as_lost(caplog: pytest.LogCaptureFixture) -> None:
    bucket = Bucket()
    bucket.refusing = True

    async def scenario() -> None:
        capture = DataCapture(rules(), "ep", bucket.put, random.Random(1))
        capture_calls(capture, range(4))
        await capture.close()

    asyncio.run(scenario())
    assert any("data capture lost 4 calls" in r.message for r in caplog.records)
