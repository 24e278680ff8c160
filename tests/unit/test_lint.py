"""``mme lint``: each class of tarball SageMaker's Triton refuses is named by its rule, with the
file and line; exit 0 / 1 / 2; SARIF valid against the 2.1.0 schema; ``mme deploy`` refuses on the
same findings before any call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from emulator.triton.releases import DEFAULT_RELEASE, UnknownImage, release_of
from ensembles.packaging import package
from harness.deployment import DEFAULT_TRITON_VERSION, DeployConfig
from harness.lint import lint
from harness.testmodels import write_scale_model, write_two_step_ensemble
from mme.cli import main
from tests.lint_support import (
    BLS,
    ENV_PARAMETER,
    PYTHON_CONFIG,
    assert_deploy_refused_before_any_call,
    env_tarball,
    tar,
    with_env,
)

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "sarif-schema-2.1.0.json"
GPU_GROUP = "instance_group [ { kind: KIND_GPU count: 1 } ]"


def _model(repo: Path, name: str = "m", config_extra: str = "", cpu: bool = True) -> Path:
    folder = write_scale_model(repo, name)
    text = (folder / "config.pbtxt").read_text()
    if not cpu:
        text = text.replace("instance_group [ { kind: KIND_CPU count: 1 } ]", GPU_GROUP)
    (folder / "config.pbtxt").write_text(text + config_extra)
    return folder


def _rules(path: Path, **kwargs: str) -> list[str]:
    report = lint([path], **kwargs)  # type: ignore[arg-type]
    assert not report.unreadable
    return [f.rule.id for f in report.findings]


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    repo = tmp_path / "chain"
    write_scale_model(repo, "preprocess")
    write_scale_model(repo, "postprocess")
    write_two_step_ensemble(repo / "ensemble")
    return repo


def test_a_good_ensemble_is_clean_as_a_folder_and_as_its_tarball(
        chain: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tarball = package(chain, tmp_path / "chain.tar.gz", layout="flat")
    assert main(["lint", str(chain), str(tarball), "--instance-type", "ml.m5.xlarge"]) == 0
    assert "2 source(s), no findings" in capsys.readouterr().out


def test_kind_gpu_fails_on_a_cpu_instance_and_passes_on_a_gpu_one(tmp_path: Path) -> None:
    folder = _model(tmp_path / "r", cpu=False)
    tarball = package(folder, tmp_path / "m.tar.gz", layout="folder")
    report = lint([tarball], instance_type="ml.m5.xlarge")
    [finding] = report.findings
    assert (finding.rule.id, finding.file, finding.line) == ("MME101", "m/config.pbtxt", 6)
    assert "no GPUs are available" in finding.rule.sagemaker
    assert _rules(tarball, instance_type="ml.g5.xlarge") == []
    two = _model(tmp_path / "r2",
                 config_extra="instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]\n")
    assert _rules(two, instance_type="ml.g5.xlarge") == ["MME102"]
    assert _rules(two, instance_type="ml.g5.12xlarge") == []


@pytest.mark.parametrize(("files", "rule", "severity"), [
    ({"m/config.pbtxt": b'name: "m"\nbackend: "python"\n', "m/1/model.py": b"",
      "m/01/model.py": b""}, "MME004", "warning"),
    ({"m/config.pbtxt": b'name: "m"\nbackend: "python"\n', "m/1/model.py": b"",
      "m/-1/model.py": b""}, "MME004", "warning"),
    ({"m/config.pbtxt": b'name: "m"\nbackend: "python"\n', "m/-1/model.py": b""}, "MME004",
     "error"),
    ({"bad\nname/config.pbtxt": b'name: "m"\nbackend: "python"\n',
      "bad\nname/1/model.py": b""}, "MME009", "error"),
    ({"m/config.pbtxt": b'name: "m"\nbackend: "python"\nmodel_transaction_policy '
                        b'{ decoupled: true }\n', "m/1/model.py": b""}, "MME202", "error"),
    ({"m/config.pbtxt": b'name: "m"\nbackend: "python"\nversion_policy: { all { } }\n',
      "m/1/model.py": b"", "m/2/model.py": b""}, "MME203", "warning"),
    ({"m/config.pbtxt": b'name: "m"\nplatform: "tensorrt_plan"\n', "m/1/model.plan": b"x"},
     "MME401", "warning"),
    ({"m/config.pbtxt": PYTHON_CONFIG + ENV_PARAMETER.encode(), "m/1/model.py": b""}, "MME301",
     "error"),
])
def test_each_class_is_named_by_its_rule(tmp_path: Path, files: dict[str, bytes], rule: str,
                                         severity: str) -> None:
    report = lint([tar(tmp_path / "t.tar.gz", files)])
    assert [(f.rule.id, f.level) for f in report.findings] == [(rule, severity)]
    assert report.exit_code == 1




def test_a_model_whose_only_version_folder_starts_with_0_has_no_version(tmp_path: Path) -> None:
    tarball = tar(tmp_path / "t.tar.gz", {"m/config.pbtxt": b'name: "m"\nbackend: "python"\n',
                                           "m/01/model.py": b""})
    assert _rules(tarball) == ["MME003", "MME004"]
    every = _tar_all(tmp_path, b'version_policy: { all { } }\n')  # -1 is loaded: an error
    assert [(f.rule.id, f.level) for f in lint([every]).findings] == [
        ("MME004", "error"), ("MME203", "warning")]


def _tar_all(tmp_path: Path, extra: bytes) -> Path:
    return tar(tmp_path / "all.tar.gz", {"m/config.pbtxt": PYTHON_CONFIG + extra,
                                         "m/1/model.py": b"", "m/-1/model.py": b""})


def test_the_embedded_release_is_said_against_the_image_targeted() -> None:
    from harness.lint.releases import embedded_notice

    notice = embedded_notice(["sagemaker-tritonserver:25.09-py3"])
    assert notice.startswith("the embedded Triton is 2.51.0 (container release 24.10)")
    assert "Python 3.12 in sagemaker-tritonserver:25.09-py3" in notice
    assert "sagemaker-tritonserver:24.09-py3" in embedded_notice(["my-own-image:1"])


def test_a_bls_callee_must_be_in_the_tarball(tmp_path: Path) -> None:
    caller = {"caller/config.pbtxt": b'name: "caller"\nbackend: "python"\n',
              "caller/1/model.py": BLS}
    report = lint([tar(tmp_path / "alone.tar.gz", caller)])
    [finding] = report.findings
    assert (finding.rule.id, finding.file, finding.line) == ("MME201", "caller/1/model.py", 5)
    both = {**caller, "callee/config.pbtxt": b'name: "callee"\nbackend: "python"\n',
            "callee/1/model.py": b""}
    # Packed beside its caller, the callee is not loaded with it: SageMaker's Triton picks one.
    [several] = lint([tar(tmp_path / "both.tar.gz", both)]).findings
    assert several.rule.id == "MME006"
    assert "'caller' calls 'callee' (BLS), which SageMaker's Triton does not load" in \
        several.message


def _env(tmp_path: Path, **env: object) -> Path:
    built = env_tarball(tmp_path / "env.tar.gz", **env)  # type: ignore[arg-type]
    return with_env(tmp_path / "m.tar.gz", built)


@pytest.mark.parametrize(("env", "image", "rules"), [
    ({}, None, []),
    ({"python": "3.11"}, None, ["MME302"]),
    ({"so": b"GLIBCXX_3.4.32\0"}, None, ["MME303"]),
    ({"so": b"GLIBCXX_3.4.32\0"}, "sagemaker-tritonserver:25.09-py3", ["MME302"]),
    ({"so": b"GLIBC_2.38\0"}, None, ["MME304"]),
    ({"numpy": "2.1.0"}, None, ["MME305"]),
    ({"numpy": "2.1.0", "python": "3.12"}, "25.09", []),
    ({"numpy": "2.1.0", "python": "3.12"}, "sagemaker-tritonserver:26.05-py3", []),
    ({"numpy": "2.1.0", "python": "3.12"}, "sagemaker-tritonserver:24.09-py3",
     ["MME302", "MME305"]),
    ({"extra": {"conda-meta/numpy-2.0.2-py310h.json": b""}}, None, ["MME305"]),
    ({"extra": {"lib/libstdc++.so.6.0.33": b"GLIBCXX_3.4.33\0"}, "so": b"GLIBCXX_3.4.32\0"},
     None, []),
])
def test_the_environment_against_the_image(tmp_path: Path, env: dict[str, object],
                                           image: str | None, rules: list[str]) -> None:
    assert _rules(_env(tmp_path, **env), image=image) == rules  # type: ignore[arg-type]


def test_a_plan_names_the_images_tensorrt_or_where_to_read_it(tmp_path: Path) -> None:
    tarball = tar(tmp_path / "t.tar.gz", {
        "m/config.pbtxt": b'name: "m"\nplatform: "tensorrt_plan"\n', "m/1/model.plan": b"x"})
    [known] = lint([tarball], image="24.09").findings
    assert "built with TensorRT 10.4.0.26 (sagemaker-tritonserver:24.09-py3)" in known.message
    [unknown] = lint([tarball], image="sagemaker-tritonserver:26.05-py3").findings
    assert "NVIDIA's release notes rel-26-05" in unknown.message


def test_a_libstdcxx_in_the_environment_older_than_the_stubs_needs(tmp_path: Path) -> None:
    env = env_tarball(tmp_path / "env.tar.gz", so=b"GLIBCXX_3.4.29\0",
                      extra={"lib/libstdc++.so.6.0.29": b"GLIBCXX_3.4.29\0"})
    report = lint([with_env(tmp_path / "m.tar.gz", env)])
    assert [f.rule.id for f in report.findings] == ["MME303"]
    assert "GLIBCXX_3.4.30" in report.findings[0].message


def test_exit_2_when_something_cannot_be_read(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.tar.gz").write_bytes(b"not a tarball")
    assert main(["lint", str(tmp_path / "bad.tar.gz")]) == 2
    assert "not a readable .tar.gz" in capsys.readouterr().out
    assert main(["lint", str(tmp_path / "bad.tar.gz"), "--image", "21.01"]) == 2
    assert "not a Triton release this table knows" in capsys.readouterr().err


def test_the_image_is_read_in_every_form_and_the_default_is_deploys() -> None:
    assert DEFAULT_RELEASE == DEFAULT_TRITON_VERSION
    for image in ("763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.05-py3",
                  "nvcr.io/nvidia/tritonserver:24.05-py3", "24.05"):
        assert release_of(image).triton == "2.46.0"
    with pytest.raises(UnknownImage):
        release_of("my-triton:latest")


def test_the_embedded_tritons_differences_are_said_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _model(tmp_path / "r")
    main(["lint", str(folder), "--image", "sagemaker-tritonserver:25.09-py3"])
    err = capsys.readouterr().err
    assert err.count("differs from sagemaker-tritonserver:25.09-py3") == 1
    assert "Python 3.12 in sagemaker-tritonserver:25.09-py3" in err
    assert "numpy 2 in a Python model's environment: works in" in err


def test_sarif_is_valid_sarif_2_1_0_and_junit_counts_the_findings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _model(tmp_path / "r", cpu=False)
    tarball = package(folder, tmp_path / "m.tar.gz", layout="folder")
    args = ["lint", str(folder), str(tarball), "--instance-type", "ml.m5.xlarge", "--format"]
    assert main([*args, "sarif", "-o", str(tmp_path / "lint.sarif")]) == 1
    sarif = json.loads((tmp_path / "lint.sarif").read_text())
    result, in_tarball = sarif["runs"][0]["results"]
    assert in_tarball["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": tarball.as_posix()}}
    assert result["ruleId"] == "MME101" and result["level"] == "error"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("r/m/config.pbtxt")
    assert location["region"]["startLine"] == 6
    checker = Path(sys.executable).parent / "check-jsonschema"
    checked = subprocess.run([str(checker), "--schemafile", str(SCHEMA),
                              str(tmp_path / "lint.sarif")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert main([*args, "junit"]) == 1
    suite = ElementTree.fromstring(capsys.readouterr().out).find("testsuite")
    assert suite is not None and suite.get("failures") == "2"
    assert main([*args, "json"]) == 1
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["MME101"] * 2


def test_deploy_refuses_on_a_lint_error_before_any_call(tmp_path: Path) -> None:
    folder = _model(tmp_path / "r", cpu=False)
    assert_deploy_refused_before_any_call(
        DeployConfig("demo", [folder], bucket="models", instance_type="ml.m5.xlarge"),
        "MME101.*nothing was uploaded")


class _Options:
    """The options the pytest plugin reads, as a session would give them."""

    def __init__(self, **options: object) -> None:
        self.options = options
        self.stash = pytest.Stash()

    def getoption(self, name: str, default: object = None) -> object:
        return self.options.get(name, default)


def test_the_plugin_lints_the_store_it_serves(tmp_path: Path) -> None:
    from harness import pytest_plugin

    store = tmp_path / "store"
    store.mkdir()
    package(_model(tmp_path / "r", cpu=False), store / "m.tar.gz", layout="folder")
    warn = _Options(mme_lint="warn", mme_instance_type="ml.m5.xlarge")
    assert pytest_plugin._lint_store(store, warn) == ""  # type: ignore[arg-type]
    [line] = warn.stash[pytest_plugin._LINT_LINES]
    assert line.startswith("error MME101 kind-gpu-without-gpu")
    error = _Options(mme_lint="error", mme_instance_type="ml.m5.xlarge")
    assert "MME101" in pytest_plugin._lint_store(store, error)  # type: ignore[arg-type]
    gpu = _Options(mme_lint="error", mme_instance_type="ml.g5.xlarge")
    assert pytest_plugin._lint_store(store, gpu) == ""  # type: ignore[arg-type]


def test_the_actions_lint_step_stops_the_job_and_keeps_its_report(tmp_path: Path) -> None:
    import os

    import yaml

    action = yaml.safe_load((Path(__file__).resolve().parents[2] / "action.yml").read_text())
    [step] = [s for s in action["runs"]["steps"] if s.get("id") == "lint"]
    folder = _model(tmp_path / "r", cpu=False)
    outputs = tmp_path / "github_output"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "MME_IN_LINT": str(folder), "MME_IN_LINT_INSTANCE_TYPE": "ml.m5.xlarge",
           "MME_IN_LINT_IMAGE": "", "MME_IN_LINT_FORMAT": "sarif",
           "RUNNER_TEMP": str(tmp_path), "GITHUB_OUTPUT": str(outputs)}
    ran = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True,
                         text=True)
    assert ran.returncode == 1 and "MME101" in ran.stderr
    report = Path(outputs.read_text().strip().removeprefix("report="))
    assert json.loads(report.read_text())["runs"][0]["results"][0]["ruleId"] == "MME101"


def test_measured_memory_beyond_the_instances_and_a_failed_load_are_findings() -> None:
    from harness.lint.measure import judge

    gib = 1024**3
    found = judge({"a.tar.gz": 5 * gib, "b.tar.gz": 1 * gib}, {"c.tar.gz": "it did not load"},
                  {"a.tar.gz": "models/a"}, "ml.t2.medium")  # 4 GiB, 90 % for models
    assert [(f.rule.id, f.source) for f in found] == [("MME502", "c.tar.gz"),
                                                      ("MME501", "models/a")]
    assert "5120 MiB once loaded" in found[1].message
    assert judge({"a.tar.gz": 5 * gib}, {}, {}, "ml.m5.xlarge") == []
