"""What SageMaker's Triton would refuse is found before anything is written or uploaded
(harness/package_checks.py, used by ``mme package``, ``mme deploy`` and the plugin's store)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.deployment import DeployConfig
from harness.package_checks import PackageProblem, check_folder, check_tarball
from mme.cli import main
from tests.lint_support import assert_deploy_refused_before_any_call
from tests.support import package, write_scale_ensemble, write_scale_model


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    return write_scale_ensemble(tmp_path / "chain").parent


def test_a_good_ensemble_passes_as_a_folder_and_as_its_tarball(chain: Path,
                                                               tmp_path: Path) -> None:
    check_folder(chain)
    check_tarball(package(chain, tmp_path / "chain.tar.gz", "flat"))
    check_tarball(package(write_scale_model(tmp_path / "r", "m"), tmp_path / "m.tar.gz",
                          "folder"))


@pytest.mark.parametrize(("spoil", "message"), [
    (lambda repo: (repo / "postprocess" / "config.pbtxt").write_text("name: 'postprocess\n"),
     "postprocess/config.pbtxt does not parse as a Triton model config"),
    (lambda repo: shutil.rmtree(repo / "ensemble" / "1"),
     "model 'ensemble' has no version folder"),
    (lambda repo: shutil.rmtree(repo / "postprocess"),
     "ensemble 'ensemble' has a step 'postprocess' that is not in the tarball"),
    (lambda repo: (repo / "preprocess" / "config.pbtxt").write_text(
        (repo / "preprocess" / "config.pbtxt").read_text().replace('"preprocess"', '"pre"')),
     "model folder 'preprocess' says name \"pre\""),
    (lambda repo: shutil.rmtree(repo / "ensemble"),
     "2 models could serve the TargetModel (postprocess, preprocess)"),
])
def test_what_triton_would_refuse_is_named(chain: Path, tmp_path: Path, spoil,  # type: ignore[no-untyped-def]
                                           message: str) -> None:
    spoil(chain)
    with pytest.raises(PackageProblem, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_folder(chain)
    with pytest.raises(PackageProblem, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_tarball(package(chain, tmp_path / "spoilt.tar.gz", "flat"))


def test_an_ensemble_in_the_folder_layout_is_refused(chain: Path, tmp_path: Path) -> None:
    with pytest.raises(PackageProblem, match="one level too deep.*--layout flat"):
        check_folder(chain, "folder")
    with pytest.raises(PackageProblem, match="one level too deep"):
        check_tarball(package(chain, tmp_path / "deep.tar.gz", "folder"))


def test_mme_package_refuses_in_one_line_and_writes_nothing(chain: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    out = tmp_path / "deep.tar.gz"
    assert main(["package", str(chain), "-o", str(out), "--layout", "folder"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mme package: ") and err.count("\n") == 1 and "one level" in err
    assert not out.exists()


def test_mme_package_says_a_small_size_as_it_is(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    model = write_scale_model(tmp_path / "r", "m")
    assert main(["package", str(model), "-o", str(tmp_path / "m.tar.gz"),
                 "--layout", "folder"]) == 0
    size = (tmp_path / "m.tar.gz").stat().st_size
    assert size < 2**10 and f"({size} bytes, layout folder)" in capsys.readouterr().out


def test_deploy_refuses_before_any_call(chain: Path, tmp_path: Path) -> None:
    shutil.rmtree(chain / "postprocess")
    assert_deploy_refused_before_any_call(DeployConfig("demo", [chain], bucket="models"),
                                          "not in the tarball.*nothing was uploaded")


def test_bench_ensemble_hides_the_exporters_output(monkeypatch: pytest.MonkeyPatch,
                                                   capfd: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    from ensembles import bench, catalogue

    class Built:
        repository = tmp_path

    def chatty_build(*_args: object, **_kwargs: object) -> Built:
        os.write(2, b"torch.onnx chatter\n" * 100)
        return Built()

    class Stop(Exception):
        pass

    def stop(*_args: object) -> Path:
        raise Stop

    monkeypatch.setattr(catalogue, "build", chatty_build)
    monkeypatch.setattr(bench, "derive", stop)
    with pytest.raises(Stop):
        bench.run(tmp_path / "work")
    captured = capfd.readouterr()
    assert "chatter" not in captured.err and "exporters' output is hidden" in captured.out


def test_the_emulator_warns_when_it_serves_an_ensemble_one_folder_down(
        chain: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import tarfile

    from emulator.manager.repository import read_layout

    with tarfile.open(package(chain, tmp_path / "deep.tar.gz", "folder")) as tar:
        tar.extractall(tmp_path / "extracted", filter="data")
    assert read_layout(tmp_path / "extracted").entry == "ensemble"  # still served here
    assert "one folder down: SageMaker's Triton" in caplog.text
