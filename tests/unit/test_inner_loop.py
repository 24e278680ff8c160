"""The parts of the fast inner loop that need no Triton: the ``--init`` file's shape, the
store watch's comparison, the twin a watched store is served through, the flags."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from emulator.hosting.store_watch import changes
from emulator.init_file import read_init_file
from emulator.manager.sources import FolderSource
from emulator.settings import Settings, StartRefused, add_flags
from harness.testmodels import write_scale_model
from mme.store_twin import StoreTwin


def test_an_init_file_in_yaml_or_json(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("endpoints:\n  - {EndpointName: e, EndpointConfigName: c}\n")
    assert read_init_file(tmp_path / "a.yaml").entries("endpoints") == [
        {"EndpointName": "e", "EndpointConfigName": "c"}]
    (tmp_path / "a.json").write_text(json.dumps({"alarms": [{"AlarmName": "x"}]}))
    assert read_init_file(tmp_path / "a.json").entries("alarms") == [{"AlarmName": "x"}]
    (tmp_path / "empty.yaml").write_text("")
    assert read_init_file(tmp_path / "empty.yaml").entries("models") == []


@pytest.mark.parametrize(("text", "said"), [
    ("- a\n", "expected a mapping of sections"),
    ("endpoint: []\n", "unknown section endpoint; the sections are models, endpoint_configs"),
    ("models: {ModelName: m}\n", "models must be a list of entries, not a mapping"),
    ("alarms: [3]\n", "alarms[0] must be a mapping of the call's parameters, not a number"),
    ("scaling: [{policies: []}]\n", "scaling[0] takes `register:`"),
    ("scaling: [{register: {}, policies: [1]}]\n", "scaling[0].policies must be a list"),
    ("models: [\n", "not valid YAML"),
])
def test_an_init_file_of_the_wrong_shape_is_refused_saying_what_to_fix(
        tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "init.yaml"
    path.write_text(text)
    with pytest.raises(StartRefused, match=f"^--init {path}: ") as refused:
        read_init_file(path)
    assert said in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_watch_tells_changed_new_and_removed_objects() -> None:
    assert changes({"a": "1", "b": "1", "c": "1"}, {"a": "1", "b": "2", "d": "1"}) == [
        ("b", "changed"), ("c", "removed"), ("d", "new")]


def test_folder_versions_leave_hidden_files_out(tmp_path: Path) -> None:
    (tmp_path / "a.tar.gz").write_bytes(b"x")
    (tmp_path / ".staging").mkdir()
    (tmp_path / ".staging" / "a.tar.gz").write_bytes(b"y")
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "b.tar.gz").write_bytes(b"z")
    assert sorted(FolderSource(tmp_path).versions()) == ["a.tar.gz", "team/b.tar.gz"]


def _bump(path: Path, text: str) -> None:
    """Rewrite ``path`` with a modification time the next look cannot miss."""
    path.write_text(text)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_the_twin_repackages_a_folder_once_it_holds_still(tmp_path: Path) -> None:
    store = tmp_path / "models"
    write_scale_model(store, "scale")
    twin = StoreTwin(store, tmp_path / "twin")
    assert twin.build() == ["scale.tar.gz"]
    first = (tmp_path / "twin" / "scale.tar.gz").read_bytes()
    config = store / "scale" / "config.pbtxt"
    _bump(config, config.read_text().replace('"2.0"', '"3.0"'))
    assert twin.look() == []  # seen changing: applied once it holds still
    assert twin.look() == [("scale.tar.gz", "written")]
    assert (tmp_path / "twin" / "scale.tar.gz").read_bytes() != first
    _bump(config, config.read_text())  # saved again, same content
    twin.look()
    assert twin.look() == [("scale.tar.gz", "same")]
    assert twin.look() == []


def test_the_twin_keeps_the_last_good_package_of_a_broken_folder(tmp_path: Path) -> None:
    store = tmp_path / "models"
    write_scale_model(store, "scale")
    twin = StoreTwin(store, tmp_path / "twin")
    twin.build()
    good = (tmp_path / "twin" / "scale.tar.gz").read_bytes()
    _bump(store / "scale" / "config.pbtxt", "input [ {{{ ")  # does not parse
    twin.look()
    assert twin.look() == [("scale.tar.gz", "refused")]
    assert (tmp_path / "twin" / "scale.tar.gz").read_bytes() == good


def test_the_twin_adds_and_removes_models(tmp_path: Path) -> None:
    store = tmp_path / "models"
    store.mkdir()
    twin = StoreTwin(store, tmp_path / "twin")
    assert twin.build() == []  # an empty store is served (models come as you write them)
    write_scale_model(store, "new")
    twin.look()
    assert twin.look() == [("new.tar.gz", "written")]
    (store / "new" / "1" / "model.py").unlink()
    (store / "new" / "1").rmdir()
    (store / "new" / "config.pbtxt").unlink()
    (store / "new").rmdir()
    assert twin.look() == [("new.tar.gz", "removed")]
    assert not (tmp_path / "twin" / "new.tar.gz").exists()


def test_the_flags() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = parser.parse_args(["--watch", "--preload", "a.tar.gz,b.tar.gz", "--preload", "c",
                              "--watch-interval", "0.1"])
    settings = Settings.from_env({}, watch=args.watch, preload=args.preload,
                                 watch_interval_s=args.watch_interval_s)
    assert settings.watch and settings.watch_interval_s == 0.1
    assert settings.preload == ["a.tar.gz", "b.tar.gz", "c"]
    assert not Settings.from_env({}).watch
    assert Settings.from_env({"MME_PRELOAD": "x, y"}).preload == ["x", "y"]
