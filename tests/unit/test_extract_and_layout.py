"""Safe extraction (all or nothing) and reading an artifact's layout (entry model, namespacing)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from emulator.manager import repository
from emulator.manager.extract import UnsafeArchive, extract_archive
from tests.support import package, tar_bytes, write_scale_ensemble, write_scale_model


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, symbolic: bool = True) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE if symbolic else tarfile.LNKTYPE
    info.linkname = target
    return info, None


def _device(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    return info, None


@pytest.mark.parametrize("members,reason", [
    ([_file("/etc/evil")], "absolute"),
    ([_file("../evil")], r"\.\."),
    ([_file("m/../../evil")], r"\.\."),
    ([_link("m/link", "../../etc/passwd")], "leads out"),
    ([_link("m/link", "/etc/passwd")], "absolute"),
    ([_link("m/hard", "../x", symbolic=False)], "leads out"),
    ([_device("m/dev")], "device"),
])
def test_unsafe_members_are_refused_and_nothing_is_left(tmp_path: Path, members, reason) -> None:  # type: ignore[no-untyped-def]
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(tar_bytes([_file("m/config.pbtxt"), *members]))
    with pytest.raises(UnsafeArchive, match=reason):
        extract_archive(archive, tmp_path / "out" / "model", max_bytes=None)
    assert not (tmp_path / "out" / "model").exists()
    assert list((tmp_path / "out").iterdir()) == []  # no staging folder left behind


def test_links_inside_the_folder_are_fine(tmp_path: Path) -> None:
    archive = tmp_path / "ok.tar.gz"
    archive.write_bytes(tar_bytes([_file("m/1/data", b"abc"), _link("m/2", "1")]))
    extract_archive(archive, tmp_path / "out", max_bytes=None)
    assert (tmp_path / "out" / "m" / "2" / "data").read_bytes() == b"abc"


def test_size_cap(tmp_path: Path) -> None:
    archive = tmp_path / "big.tar.gz"
    archive.write_bytes(tar_bytes([_file("a", b"\0" * 1000), _file("b", b"\0" * 1000)]))
    with pytest.raises(UnsafeArchive, match="cap"):
        extract_archive(archive, tmp_path / "out", max_bytes=1500)
    assert not (tmp_path / "out").exists()


def test_not_an_archive(tmp_path: Path) -> None:
    archive = tmp_path / "junk.tar.gz"
    archive.write_bytes(b"this is not gzip")
    with pytest.raises(UnsafeArchive, match="not a readable"):
        extract_archive(archive, tmp_path / "out", max_bytes=None)


@pytest.mark.parametrize("layout", ["flat", "folder"])
def test_both_tar_layouts_find_the_ensemble(tmp_path: Path, layout: str) -> None:
    repo = tmp_path / "repo"
    write_scale_ensemble(repo)
    archive = package(repo, tmp_path / "e.tar.gz", layout=layout)
    extract_archive(archive, tmp_path / "x", max_bytes=None)
    found = repository.read_layout(tmp_path / "x")
    assert found.entry == "ensemble"
    assert set(found.models) == {"ensemble", "preprocess", "postprocess"}


def test_single_model_at_the_archive_root(tmp_path: Path) -> None:
    folder = write_scale_model(tmp_path / "repo", "solo")
    archive = package(folder, tmp_path / "solo.tar.gz", layout="flat")
    extract_archive(archive, tmp_path / "x", max_bytes=None)
    assert repository.read_layout(tmp_path / "x").entry == "solo"


def test_several_models_and_no_ensemble_load_the_folder_listed_last(tmp_path: Path) -> None:
    """As Triton's SageMaker server: the folder readdir gives last; the others stay unloaded."""
    for name in ("a", "b", "c"):
        write_scale_model(tmp_path / "repo", name)
    order = repository.listing_order(tmp_path / "repo")
    assert sorted(order) == ["a", "b", "c"]
    layout = repository.read_layout(tmp_path / "repo")
    assert layout.entry == order[-1]
    assert set(layout.models) == {"a", "b", "c"}
    # Without a listing (a check that runs no Triton) the choice stays ambiguous.
    with pytest.raises(repository.InvalidModelRepository, match="no ensemble"):
        repository.choose_entry(layout.configs)


def test_the_folder_listed_last_without_a_config_fails_the_load(tmp_path: Path) -> None:
    write_scale_model(tmp_path / "repo", "a")
    write_scale_model(tmp_path / "repo", "b")
    configs = repository.read_layout(tmp_path / "repo").configs
    with pytest.raises(repository.InvalidModelRepository, match="'docs', which holds no config"):
        repository.choose_entry(configs, ["a", "b", "docs"])


def test_nested_ensemble_picks_the_top(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_scale_ensemble(repo)
    top = repo / "top"
    top.mkdir()
    (top / "config.pbtxt").write_text(
        'name: "top"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "O" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "ensemble" model_version: -1 '
        'input_map { key: "INPUT" value: "I" } output_map { key: "OUTPUT" value: "O" } } ] }\n')
    assert repository.read_layout(repo).entry == "top"


def test_install_namespaces_names_and_ensemble_steps(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_scale_ensemble(repo)
    layout = repository.read_layout(repo)
    triton_repo = tmp_path / "triton"
    names = repository.install(layout, "k1", triton_repo)
    assert sorted(names) == ["ensemble--k1", "postprocess--k1", "preprocess--k1"]
    config = (triton_repo / "ensemble--k1" / "config.pbtxt").read_text()
    assert 'name: "ensemble--k1"' in config
    assert 'model_name: "preprocess--k1"' in config and 'model_name: "postprocess--k1"' in config
    # Everything but the config is a link to the untouched artifact.
    assert (triton_repo / "preprocess--k1" / "1").is_symlink()
    assert (repo / "preprocess" / "config.pbtxt").read_text().count('name: "preprocess"') == 1
    repository.uninstall(names, triton_repo)
    assert list(triton_repo.iterdir()) == []


def test_gpu_instance_groups_run_on_cpu_when_no_gpu(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    folder = write_scale_model(repo, "gpu_model")
    config = (folder / "config.pbtxt").read_text().replace(
        "instance_group [ { kind: KIND_CPU count: 1 } ]",
        "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]")
    (folder / "config.pbtxt").write_text(config)
    layout = repository.read_layout(repo)
    repository.install(layout, "k", tmp_path / "cpu", gpus_available=False)
    repository.install(layout, "k", tmp_path / "gpu", gpus_available=True)
    on_cpu = (tmp_path / "cpu" / "gpu_model--k" / "config.pbtxt").read_text()
    assert "KIND_CPU" in on_cpu and "KIND_GPU" not in on_cpu and "gpus" not in on_cpu
    assert "count: 2" in on_cpu
    assert "KIND_GPU" in (tmp_path / "gpu" / "gpu_model--k" / "config.pbtxt").read_text()
    assert "KIND_GPU" in (folder / "config.pbtxt").read_text()  # the artifact is untouched
