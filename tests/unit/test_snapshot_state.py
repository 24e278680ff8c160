"""The snapshot format (``emulator.state.snapshot_format``: the document, the folder written
whole then renamed, refusals that say what to fix), the stores' whole-state methods, the IAM
actions of the state routes, and ``--ephemeral`` (no state file in the cache folder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from emulator.clock import Clock
from emulator.cloudwatch.alarms import AlarmStore
from emulator.cloudwatch.series import MetricStore
from emulator.contract.apis import Service, identify
from emulator.control.state_db import AlreadyExists, ControlStore, Resource
from emulator.server import EmulatorServer
from emulator.settings import Settings
from emulator.state import snapshot_format as fmt
from emulator.state.snapshot_format import SnapshotError
from tests.client_support import DUMMY_CREDENTIALS
from tests.support import SUITE_ENV

ROW = {"name": "m", "created": 1.0, "doc": {"ModelName": "m"}}


def snapshot(**parts: Any) -> dict[str, Any]:
    return fmt.document(parts.get("control_plane", {"models": [ROW]}), parts.get("alarms", []),
                        parts.get("autoscaling", {"targets": [], "policies": []}),
                        parts.get("loaded_models"))


def test_a_folder_round_trips_and_is_written_whole(tmp_path: Path) -> None:
    doc = snapshot(loaded_models=[{"endpoint": "ep", "variant": "v", "target_model": "a"}])
    files = fmt.write_folder(doc, tmp_path / "snap")
    assert files == ["manifest.json", "control-plane.json", "alarms.json", "autoscaling.json",
                     "loaded-models.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["snap"]  # no temporary folder left
    assert fmt.read_folder(tmp_path / "snap") == doc
    manifest = json.loads((tmp_path / "snap" / "manifest.json").read_text())
    assert (manifest["format"], manifest["version"]) == (fmt.FORMAT, fmt.VERSION)
    # Without loaded models: no file for them, and null when read back.
    fmt.write_folder(snapshot(), tmp_path / "snap")  # an older snapshot is replaced
    assert fmt.read_folder(tmp_path / "snap")["loaded_models"] is None
    assert [p.name for p in tmp_path.iterdir()] == ["snap"]


def test_a_folder_that_is_not_a_snapshot_is_refused_saying_why(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="no such folder"):
        fmt.read_folder(tmp_path / "missing")
    with pytest.raises(SnapshotError, match="has no manifest.json"):
        fmt.read_folder(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SnapshotError, match="not a snapshot and not empty"):
        fmt.write_folder(snapshot(), tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    fmt.write_folder(snapshot(), tmp_path / "snap")
    manifest = tmp_path / "snap" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "version": 2}))
    with pytest.raises(SnapshotError, match="format version 2; this emulator reads version 1"):
        fmt.read_folder(tmp_path / "snap")


@pytest.mark.parametrize(("doc", "message"), [
    ([], "a JSON object"),
    ({"format": "other"}, "not a snapshot"),
    ({**snapshot(), "extra": 1}, "unknown fields extra"),
    ({**snapshot(), "control_plane": {"tables": []}}, 'unknown table "tables"'),
    ({**snapshot(), "control_plane": {"models": [{"name": "m"}]}}, "each row is"),
    ({**snapshot(), "alarms": [{}]}, "an alarm object with a name"),
    ({**snapshot(), "loaded_models": [{"endpoint": "e"}]}, "loaded_models: each is"),
])
def test_a_document_that_is_not_a_snapshot_is_refused(doc: Any, message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        fmt.check(doc)


def test_the_control_store_dumps_clears_and_loads_its_whole_state(tmp_path: Path) -> None:
    store = ControlStore(tmp_path / "c.sqlite3")
    store.add("models", Resource("M", 1.0, {"ModelName": "M"}))
    rows = store.dump()
    assert rows["models"] == [{"name": "M", "created": 1.0, "doc": {"ModelName": "M"}}]
    with pytest.raises(AlreadyExists):
        store.load(rows)
    assert store.clear() == {"models": 1, "endpoint_configs": 0, "endpoints": 0,
                             "inference_components": 0}
    assert store.counts() == dict.fromkeys(store.counts(), 0)
    store.load(rows)
    assert store.get("models", "m") == Resource("M", 1.0, {"ModelName": "M"})


def test_alarms_come_back_with_their_state_and_a_clear_empties_the_file(tmp_path: Path) -> None:
    clock = Clock()
    alarms = AlarmStore(MetricStore(clock), clock, "us-east-1", "123456789012",
                        tmp_path / "alarms.db")
    alarms.put("a", "MetricAlarm", {"Namespace": "N", "MetricName": "M", "Statistic": "Sum",
                                    "Period": 60, "EvaluationPeriods": 1, "Threshold": 0,
                                    "ComparisonOperator": "GreaterThanThreshold"}, {})
    alarms.set_state("a", "ALARM", "by hand", None)
    saved = alarms.export()
    assert alarms.clear() == 1
    assert AlarmStore(MetricStore(clock), clock, "us-east-1", "123456789012",
                      tmp_path / "alarms.db").all() == []
    assert alarms.load(saved) == 1
    with pytest.raises(ValueError, match="exists already"):
        alarms.load(saved)
    again = AlarmStore(MetricStore(clock), clock, "us-east-1", "123456789012",
                       tmp_path / "alarms.db")
    assert [(a.name, a.state, a.reason) for a in again.all()] == [("a", "ALARM", "by hand")]


@pytest.mark.parametrize(("method", "path", "action"), [
    ("POST", "/_emulator/reset", "Reset"),
    ("GET", "/_emulator/snapshot", "GetSnapshot"),
    ("POST", "/_emulator/snapshot", "RestoreSnapshot"),
])
def test_each_state_route_is_an_iam_action(method: str, path: str, action: str) -> None:
    api = identify(method, path, {})
    assert api is not None and (api.service, api.operation) == (Service.EMULATOR, action)


def test_an_ephemeral_server_writes_no_state_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with EmulatorServer(Settings.from_env(env=SUITE_ENV, cache_dir=cache, port=0,
                                          ephemeral=True)) as server:
        kwargs: dict[str, Any] = {"endpoint_url": server.url, **DUMMY_CREDENTIALS}
        boto3.client("sagemaker", **kwargs).create_model(
            ModelName="m", ExecutionRoleArn="arn:aws:iam::123456789012:role/x",
            PrimaryContainer={"Image": "triton", "Mode": "MultiModel",
                              "ModelDataUrl": "s3://b/p/"})
        boto3.client("cloudwatch", **kwargs).put_metric_alarm(
            AlarmName="a", Namespace="N", MetricName="M", Statistic="Sum", Period=60,
            EvaluationPeriods=1, Threshold=0, ComparisonOperator="GreaterThanThreshold")
        assert [m["ModelName"] for m in boto3.client("sagemaker", **kwargs)
                .list_models()["Models"]] == ["m"]
        written = sorted(p.name for p in cache.iterdir())
    assert not {"control-plane.sqlite3", "alarms.db", "autoscaling.json"} & set(written), written


def test_queued_asynchronous_requests_round_trip_through_a_folder(tmp_path: Path) -> None:
    queued = [{"endpoint": "ep", "age_s": 12.5, "received_wall": 1.0, "body": "eA==",
               "doc": {"endpoint_name": "ep", "inference_id": "id-1"}},
              {"endpoint": "ep", "age_s": 0, "received_wall": 2.0, "body": None,
               "doc": {"endpoint_name": "ep", "inference_id": "id-2"}}]
    doc = fmt.document({"models": [ROW]}, [], {"targets": [], "policies": []}, None, queued)
    files = fmt.write_folder(doc, tmp_path / "snap")
    assert "async-requests.json" in files
    assert fmt.read_folder(tmp_path / "snap")["async_requests"] == queued
    # None queued: no such part (a snapshot an emulator without it reads).
    assert "async_requests" not in fmt.document({}, [], {}, None, [])
    with pytest.raises(SnapshotError, match='async_requests: each is {"endpoint": str'):
        fmt.check({**doc, "async_requests": [{"endpoint": "ep"}]})
