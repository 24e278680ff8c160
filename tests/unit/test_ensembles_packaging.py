"""Packaging, the ensemble catalogue and the ``mme build`` / ``mme package`` commands."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from ensembles import catalogue
from ensembles.packaging import package
from mme.ensembles_cli import add_subcommands


def small_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "ensemble" / "1").mkdir(parents=True)
    (repo / "ensemble" / "config.pbtxt").write_text('name: "ensemble"\nplatform: "ensemble"\n')
    (repo / "step" / "1").mkdir(parents=True)
    (repo / "step" / "config.pbtxt").write_text('name: "step"\nbackend: "python"\n')
    (repo / "step" / "1" / "model.py").write_text("print('hi')\n")
    return repo


def names(tarball: Path) -> list[str]:
    with tarfile.open(tarball) as tar:
        return tar.getnames()


def test_flat_layout_matches_tar_dash_C(tmp_path: Path) -> None:
    tarball = package(small_repo(tmp_path), tmp_path / "model.tar.gz")
    assert names(tarball) == [
        ".", "./ensemble", "./ensemble/1", "./ensemble/config.pbtxt", "./step", "./step/1",
        "./step/1/model.py", "./step/config.pbtxt"]


def test_folder_layout_has_one_top_folder(tmp_path: Path) -> None:
    tarball = package(small_repo(tmp_path), tmp_path / "model.tar.gz", layout="folder")
    assert all(n == "repo" or n.startswith("repo/") for n in names(tarball))
    assert "repo/step/1/model.py" in names(tarball)


def test_archives_are_reproducible_and_links_are_stored_as_files(tmp_path: Path) -> None:
    repo = small_repo(tmp_path)
    (repo / "step" / "1" / "link.py").symlink_to(repo / "step" / "1" / "model.py")
    first = package(repo, tmp_path / "a.tar.gz").read_bytes()
    second = package(repo, tmp_path / "b.tar.gz").read_bytes()
    assert first == second
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        member = tar.getmember("./step/1/link.py")
        assert member.isfile()
        assert tar.extractfile(member).read() == b"print('hi')\n"  # type: ignore[union-attr]


def test_package_refuses_a_folder_without_models(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no model folder"):
        package(tmp_path / "empty", tmp_path / "x.tar.gz")


def _parse(argv: list[str]):  # type: ignore[no-untyped-def]
    import argparse

    parser = argparse.ArgumentParser(prog="mme")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_build_list_shows_inputs_and_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["build", "--list"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    for text in ("text_embedding", "INPUT0", "finaloutput", "image_classification", "INPUT",
                 "OUTPUT", "onnx, tensorrt, python-torch"):
        assert text in out


def test_package_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = small_repo(tmp_path)
    args = _parse(["package", str(repo), "-o", str(tmp_path / "out.tar.gz")])
    assert args.func(args) == 0
    assert "./step/1/model.py" in names(tmp_path / "out.tar.gz")


def test_mme_bench_has_every_benchmark_once() -> None:
    from mme.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["bench", "ensemble", "--concurrency", "4"]).concurrency == 4
    for benchmark in ("overhead", "fleet", "scale", "coldstart"):
        assert parser.parse_args(["bench", benchmark]).bench_command == benchmark


def test_unknown_ensemble_and_variant(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="no ensemble"):
        catalogue.get("nope")
    with pytest.raises(ValueError, match="no variant"):
        catalogue.build("image_classification", tmp_path / "x", "tensorrt")


@pytest.mark.slow
def test_build_command_writes_repository_and_tarball(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("nvidia.dali")
    args = _parse(["build", "image_classification", "--output", str(tmp_path / "img")])
    assert args.func(args) == 0
    assert "built image_classification (onnx)" in capsys.readouterr().out
    listing = names(tmp_path / "img.tar.gz")
    for member in ("./dali/1/model.dali", "./inception_onnx/1/model.onnx",
                   "./ensemble_dali_inception/config.pbtxt"):
        assert member in listing
