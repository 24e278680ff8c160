"""Traces to replay (``harness/loadtest/trace.py``), the recording's writer
(``emulator/hosting/call_log.py``), the replay's report and aiperf's summary shape."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from emulator.contract.runtime import InvokeRequest
from emulator.hosting.call_log import CallLog, RecordFileError
from harness.loadtest import aiperf_export
from harness.loadtest.replay import Sent, bodies_for, summarize, to_markdown
from harness.loadtest.trace import TraceError, ks_distance, read_trace
from mme import plan


def _capture(time: str, target: str | None, data: str, encoding: str = "JSON",
             content_type: str = "application/json") -> str:
    """One record as SageMaker's data capture writes it (Model Monitor's captured data)."""
    meta = {"eventId": "a1b2c3d4-0000-1111-2222-333344445555", "inferenceTime": time}
    if target is not None:
        meta["targetModel"] = target
    return json.dumps({
        "captureData": {
            "endpointInput": {"observedContentType": content_type, "mode": "INPUT",
                              "data": data, "encoding": encoding},
            "endpointOutput": {"observedContentType": "application/json", "mode": "OUTPUT",
                               "data": "eyJvdXRwdXRzIjogW119", "encoding": "BASE64"}},
        "eventMetadata": meta, "eventVersion": "0"})


def _recorded(time: float, target: str, **more: object) -> str:
    return json.dumps({"time": time, "operation": "InvokeEndpoint", "endpoint": "local",
                       "target_model": target, "inference_component": None,
                       "content_type": "application/json", "body_bytes": 2, "status": 200,
                       "error": None, "latency_ms": 1.5, "cache_hit": True, **more})


def test_a_recording_is_read_in_time_order_with_its_bodies(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text("\n".join([
        _recorded(100.5, "b.tar.gz", body=base64.b64encode(b"{}").decode()),
        _recorded(100.0, "a.tar.gz", cache_hit=False), "",
        _recorded(101.25, "a.tar.gz")]) + "\n")
    trace = read_trace([path])
    assert trace.kind == "recording"
    assert [(c.offset_s, c.target_model) for c in trace.calls] == [
        (0.0, "a.tar.gz"), (0.5, "b.tar.gz"), (1.25, "a.tar.gz")]
    assert trace.calls[1].body == b"{}" and trace.calls[0].body is None
    assert trace.counts() == {"a.tar.gz": 2, "b.tar.gz": 1}
    assert [c.cache_hit for c in trace.calls] == [False, True, True]


def test_data_capture_in_aws_format_gives_bodies_targets_and_times(tmp_path: Path) -> None:
    folder = tmp_path / "local" / "AllTraffic" / "2026" / "11" / "28" / "17"
    folder.mkdir(parents=True)
    (folder / "12-00-000-abc.jsonl").write_text("\n".join([
        _capture("2026-11-28T17:00:00.250Z", "a.tar.gz", '{"inputs": []}'),
        _capture("2026-11-28T17:00:01.000Z", "b.tar.gz",
                 base64.b64encode(b"\x00\x01").decode(), "BASE64",
                 "application/octet-stream"),
        _capture("2026-11-28T17:00:01.5Z", None, "1,2,3", "CSV", "text/csv")]) + "\n")
    trace = read_trace([tmp_path])  # a folder: every .jsonl under it
    assert trace.kind == "data-capture"
    assert [c.offset_s for c in trace.calls] == [0.0, 0.75, 1.25]
    assert [c.body for c in trace.calls] == [b'{"inputs": []}', b"\x00\x01", b"1,2,3"]
    assert [c.target_model for c in trace.calls] == ["a.tar.gz", "b.tar.gz", None]
    assert trace.calls[2].content_type == "text/csv"


def test_whole_second_capture_times_are_spread_over_their_second(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    path.write_text("\n".join(_capture(f"2026-11-28T17:00:0{s}Z", "a.tar.gz", "{}")
                              for s in (0, 0, 0, 0, 1)) + "\n")
    assert [c.offset_s for c in read_trace([path]).calls] == [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize(("line", "said"), [
    ('{"time": 1.0, "target_model": "a.tar', "line 2: not JSON"),
    ('{"hello": 1}', "line 2: neither a recording line"),
    ('[1, 2]', "line 2: a line must be a JSON object"),
    (_recorded(2.0, "a.tar.gz", body="%%%"), 'line 2: "body" is not base64'),
    (json.dumps({"captureData": {}, "eventMetadata": {"eventId": "x"}}),
     "line 2: eventMetadata.inferenceTime must be an ISO 8601 time"),
    (_capture("yesterday", "a.tar.gz", "{}"), "line 2: eventMetadata.inferenceTime 'yesterday'"),
    (_capture("2026-11-28T17:00:00Z", "a.tar.gz", "{}", "GZIP"),
     "line 2: captureData.endpointInput.encoding 'GZIP'"),
])
def test_a_bad_line_stops_the_trace_naming_file_and_line(tmp_path: Path, line: str,
                                                         said: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_recorded(1.0, "a.tar.gz") + "\n" + line + "\n")
    with pytest.raises(TraceError, match=None) as caught:
        read_trace([path])
    assert str(caught.value).startswith(f"{path} {said}"), caught.value


def test_nothing_to_read_is_said(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file or folder"):
        read_trace([tmp_path / "missing.jsonl"])
    with pytest.raises(TraceError, match="no .jsonl file under it"):
        read_trace([tmp_path])
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="no calls in it"):
        read_trace([tmp_path / "empty.jsonl"])


def test_calls_without_bodies_need_a_way_to_make_one(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_recorded(1.0, "a.tar.gz") + "\n" + _recorded(2.0, "b.tar.gz") + "\n")
    trace = read_trace([path])
    with pytest.raises(TraceError, match=r"2 calls .* a.tar.gz \(1\), b.tar.gz \(1\).*"
                                         r"--record-bodies"):
        bodies_for(trace, None)
    assert bodies_for(trace, lambda call: (b"x", "text/csv")) == [(b"x", "text/csv")] * 2


def test_ks_distance() -> None:
    assert ks_distance([1, 2, 3], [1, 2, 3]) == 0.0
    assert ks_distance([1, 2], [3, 4]) == 1.0
    assert ks_distance([1, 2, 3, 4], [1, 2, 5, 6]) == 0.5


def test_the_replay_report_compares_counts_hits_and_arrivals(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(_recorded(float(t), "a.tar.gz" if t % 2 else "b.tar.gz",
                                        cache_hit=t > 1) for t in range(6)) + "\n")
    trace = read_trace([path])
    sent = [Sent(c, c.offset_s / 2, c.offset_s / 2 + 0.001, 2.0, 200, None, i > 0)
            for i, c in enumerate(trace.calls)]
    summary = summarize(trace, sent, speed=2.0)
    assert summary["counts_match"] and summary["per_model"]["a.tar.gz"] == {
        "recorded": 3, "replayed": 3}
    assert summary["inter_arrival_ks"] == 0.0  # every gap 0.5 s on both sides
    assert summary["cache_hit_ratio"] == {"recorded": 0.6667, "replayed": 0.8333}
    assert summary["offset_error_ms"]["p99"] == pytest.approx(1.0)
    assert "| a.tar.gz | 3 | 3 |" in to_markdown(summary)
    partial = summarize(trace, sent[:-1], speed=2.0)
    assert not partial["counts_match"] and "DO NOT match" in to_markdown(partial)

    document = aiperf_export.from_replay(sent, summary, started_at=1_700_000_000.0)
    assert document["schema_version"] == "1.4"
    latency = document["request_latency"]
    assert latency["unit"] == "ms" and latency["count"] == 6 and latency["p99"] == 2.0
    assert document["request_count"] == {"unit": "requests", "avg": 6.0}
    assert document["request_throughput"]["unit"] == "requests/sec"
    assert document["error_summary"] == [] and not document["was_cancelled"]


def test_plan_reads_the_same_trace_each_call_once(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text(_recorded(2.0, "b.tar.gz") + "\n" + _recorded(1.0, "a.tar.gz") + "\n")
    assert plan.trace_requests(str(path), 20000) == (["a.tar.gz", "b.tar.gz"], [0.0, 1.0])
    path.write_text(_recorded(2.0, "b.tar.gz") + "\n{broken\n")
    with pytest.raises(SystemExit, match=r"rec.jsonl line 2: not JSON"):
        plan.trace_requests(str(path), 10)


def test_a_timed_trace_counts_the_calls_that_wait_on_a_load_as_misses() -> None:
    """As the emulator counts them: one load per model, the calls meanwhile wait on it."""
    from harness.model_costs import ModelCost

    costs = {t: ModelCost(t, 100, 100, 2.0, 1.0) for t in ("a", "b")}
    requests = ["a", "a", "a", "b", "a"]
    times = [0.0, 1.0, 2.5, 3.0, 4.0]
    hits, added, _ = plan.replay(requests, costs, 1000, 1, None, times)
    assert (hits, added) == (2, [2.0, 1.0, 0.0, 2.0, 0.0])
    untimed, _, _ = plan.replay(requests, costs, 1000, 1)
    assert untimed == 3  # without times every load is instant for the calls after it


def _request(target: str, body: bytes = b"{}") -> InvokeRequest:
    return InvokeRequest("local", "req-1", body, "application/json", None, target, None, None,
                         None)


def test_the_call_log_writes_one_line_per_call_and_closes(tmp_path: Path) -> None:
    path = tmp_path / "out" / "rec.jsonl"

    async def go() -> None:
        log = CallLog(path, with_bodies=True, clock=lambda: 1000.0)
        log.start()
        log.add((1000.0, "InvokeEndpoint", _request("a.tar.gz"), "AllTraffic", "i-1", 200,
                 None, 0.0021, 0.0015, False))
        await log.flush()
        log.add((1000.5, "InvokeEndpoint", _request("b.tar.gz", b"xyz"), "AllTraffic", None,
                 400, "ValidationError", 0.001, None, None))
        await log.close()  # what is left is written as it closes

    asyncio.run(go())
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["target_model"] == "a.tar.gz" and first["latency_ms"] == 2.1
    assert first["cache_hit"] is False and first["body"] == base64.b64encode(b"{}").decode()
    assert (second["status"], second["error"], second["body_bytes"]) == (
        400, "ValidationError", 3)
    assert read_trace([path]).counts() == {"a.tar.gz": 1, "b.tar.gz": 1}


def test_a_recording_file_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(RecordFileError, match=r"--record .*file/rec.jsonl: cannot write"):
        CallLog(tmp_path / "file" / "rec.jsonl").open()


def test_a_phased_load_test_in_aiperfs_shape(tmp_path: Path) -> None:
    from harness.loadtest.config import LoadPlan, Phase
    from harness.loadtest.report import summarize as summarize_load
    from harness.loadtest.runner import LoadResult, Sample

    samples = [Sample(i * 0.1, i * 0.1 + 0.004, "a.tar.gz", 200, None, 3000.0, True, 0)
               for i in range(9)]
    samples.append(Sample(1.0, 1.002, "a.tar.gz", 424, "ModelError", None, None, 0))
    result = LoadResult(LoadPlan((Phase(1, 0, 2.0),), target_models=("a.tar.gz",)),
                        started_at=1_700_000_000.0, duration_s=2.0,
                        stop_reason="phases complete", samples=samples)
    document = aiperf_export.from_loadtest(result, summarize_load(result))
    assert document["request_count"] == {"unit": "requests", "avg": 9.0}
    assert document["error_request_count"] == {"unit": "requests", "avg": 1.0}
    assert document["request_latency"]["p50"] == pytest.approx(4.0)
    assert document["request_throughput"] == {"unit": "requests/sec", "avg": 4.5}
    assert document["error_summary"] == [{"error_details": {
        "code": None, "type": "ModelError", "message": "ModelError"}, "count": 1}]
    path = aiperf_export.write_export(document, tmp_path)
    assert path.name == "profile_export_aiperf.json" and json.loads(path.read_text())
