"""What a test store names as TargetModels (harness/model_store.py), as harness/README.md says."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from harness.examples.add_model import write_add_repository
from harness.model_store import StoreError, prepare_store, store_digests
from tests.support import write_scale_ensemble


def members(tarball: Path) -> set[str]:
    with tarfile.open(tarball) as tar:
        return {Path(n).as_posix() for n in tar.getnames() if n.endswith("config.pbtxt")}


def test_the_documented_models_folder_serves_add_tar_gz(tmp_path: Path) -> None:
    write_add_repository(tmp_path / "models")  # models/add/config.pbtxt, as the example says
    store = prepare_store(tmp_path / "models", tmp_path / "work")
    assert list(store_digests(store)) == ["add.tar.gz"]
    assert members(store / "add.tar.gz") == {"add/config.pbtxt"}


def test_a_folder_of_repositories_model_folders_and_tarballs(tmp_path: Path) -> None:
    models = tmp_path / "models"
    write_add_repository(models / "adder")  # a repository: models/adder/add/config.pbtxt
    write_scale_ensemble(models / "chain")  # a repository with an ensemble
    write_add_repository(tmp_path / "src")
    (models / "team").mkdir()
    (models / "team" / "ready.tar.gz").write_bytes(b"not checked here")
    store = prepare_store(models, tmp_path / "work")
    assert sorted(store_digests(store)) == ["adder.tar.gz", "chain.tar.gz", "team/ready.tar.gz"]
    assert members(store / "adder.tar.gz") == {"add/config.pbtxt"}
    assert members(store / "chain.tar.gz") == {
        "ensemble/config.pbtxt", "preprocess/config.pbtxt", "postprocess/config.pbtxt"}


def test_a_repository_with_an_ensemble_given_alone_is_one_target_model(tmp_path: Path) -> None:
    write_scale_ensemble(tmp_path / "chain")
    store = prepare_store(tmp_path / "chain", tmp_path / "work")
    assert list(store_digests(store)) == ["chain.tar.gz"]


def test_a_folder_of_tarballs_is_served_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "a.tar.gz").write_bytes(b"x")
    assert prepare_store(tmp_path / "models", tmp_path / "work") == tmp_path / "models"


@pytest.mark.parametrize(("make", "message"), [
    (lambda root: (root / "empty").mkdir(), "nothing to serve"),
    (lambda root: None, "does not exist"),
])
def test_a_store_that_names_nothing_says_what_a_store_holds(tmp_path: Path, make,  # type: ignore[no-untyped-def]
                                                            message: str) -> None:
    make(tmp_path)
    with pytest.raises(StoreError, match=message):
        prepare_store(tmp_path / "empty", tmp_path / "work")


def test_two_things_with_one_target_model_are_refused(tmp_path: Path) -> None:
    write_add_repository(tmp_path / "a")
    write_add_repository(tmp_path / "b")
    with pytest.raises(StoreError, match="two things would be the TargetModel add.tar.gz"):
        prepare_store([tmp_path / "a", tmp_path / "b"], tmp_path / "work")
