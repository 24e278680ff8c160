"""What SageMaker's Triton loads, decided before any Triton runs: KIND_GPU groups against the
endpoint's InstanceType, model folder names, ``--load-model`` on a multi-model endpoint.

The same tarballs served end to end: tests/integration/test_sagemaker_triton_loads.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.hosting.factory import InstanceFactory
from emulator.hosting.spec import ContainerSpec, VariantSpec
from emulator.manager import repository
from emulator.public_names import public_text
from emulator.settings import Settings
from emulator.triton.sagemaker_env import SageMakerEnvironmentError, triton_args_from_environment
from tests.support import write_scale_ensemble, write_scale_model


def _gpu_model(repo: Path, group: str = "kind: KIND_GPU count: 1") -> repository.ArtifactLayout:
    folder = write_scale_model(repo, "m")
    (folder / "config.pbtxt").write_text(
        (folder / "config.pbtxt").read_text().replace("kind: KIND_CPU count: 1", group))
    return repository.read_layout(repo)


def test_kind_gpu_on_a_type_without_gpus_is_refused_with_tritons_words(tmp_path: Path) -> None:
    layout = _gpu_model(tmp_path / "repo")
    assert repository.gpu_refusal(layout, 0) == (
        "load failed for model 'm': version 1 is at UNAVAILABLE state: Invalid argument: "
        "instance group m_0 of model m has kind KIND_GPU but no GPUs are available;\n")
    # On a multi-model endpoint the entry model is registered under the TargetModel's name.
    assert repository.gpu_refusal(layout, 0, "m.tar.gz") == (
        "load failed for model 'm.tar.gz': version 1 is at UNAVAILABLE state: Invalid argument: "
        "instance group m.tar.gz_0 of model m.tar.gz has kind KIND_GPU but no GPUs are "
        "available;\n")
    assert repository.gpu_refusal(layout, 1) is None  # a GPU type: it loads
    assert repository.gpu_refusal(layout, None) is None  # no InstanceType: it loads [U]


def test_a_gpu_id_beyond_the_types_gpus_is_refused(tmp_path: Path) -> None:
    layout = _gpu_model(tmp_path / "repo", 'name: "g" kind: KIND_GPU count: 1 gpus: [ 1 ]')
    refusal = repository.gpu_refusal(layout, 1)
    assert refusal is not None
    assert "instance group g of model m specifies invalid or unsupported gpu id 1." in refusal
    assert refusal.endswith("compatibility of 6.000000 are: 0;\n")
    assert repository.gpu_refusal(layout, 4) is None  # ml.g5.12xlarge has GPU 1


def test_only_the_models_a_load_loads_are_checked(tmp_path: Path) -> None:
    """A KIND_GPU model of the tarball that the entry ensemble does not run is never loaded."""
    repo = tmp_path / "repo"
    write_scale_ensemble(repo)
    spare = write_scale_model(repo, "spare")
    (spare / "config.pbtxt").write_text(
        (spare / "config.pbtxt").read_text().replace("KIND_CPU", "KIND_GPU"))
    layout = repository.read_layout(repo)
    assert repository.loaded_models(layout) == ["ensemble", "postprocess", "preprocess"]
    assert repository.gpu_refusal(layout, 0) is None
    assert not repository.asks_for_gpu(layout)
    step = repo / "preprocess" / "config.pbtxt"
    step.write_text(step.read_text().replace("KIND_CPU", "KIND_GPU"))
    refusal = repository.gpu_refusal(repository.read_layout(repo), 0)
    assert refusal is not None and "of model preprocess has kind KIND_GPU" in refusal


@pytest.mark.parametrize("instance_type,gpus", [
    ("ml.m5.xlarge", 0), ("ml.inf2.xlarge", 0), ("ml.g5.xlarge", 1), ("ml.g5.12xlarge", 4),
    (None, None)])
def test_each_instance_knows_its_types_gpus(tmp_path: Path, instance_type: str | None,
                                            gpus: int | None) -> None:
    factory = InstanceFactory(Settings.from_env(env={}, cache_dir=tmp_path))
    variant = VariantSpec("AllTraffic", ContainerSpec(str(tmp_path)), instance_type=instance_type)
    assert factory.instance_gpus(variant) == gpus


def test_the_default_endpoint_takes_the_flags_type(tmp_path: Path) -> None:
    factory = InstanceFactory(Settings.from_env(env={}, cache_dir=tmp_path,
                                                instance_type="ml.c5.large"))
    assert factory.instance_gpus(VariantSpec("AllTraffic", ContainerSpec(str(tmp_path)))) == 0


def test_a_model_folder_name_triton_cannot_take_is_refused_at_once(tmp_path: Path) -> None:
    write_scale_model(tmp_path / "repo", "bad\nname")
    with pytest.raises(repository.InvalidModelRepository,
                       match=r"model folder 'bad\\nname' has a control character.*rename"):
        repository.read_layout(tmp_path / "repo")


@pytest.mark.parametrize("args", ["--load-model=add_sub", "--load-model add_sub --log-info=1"])
def test_load_model_at_start_fails_a_multi_model_endpoint(args: str) -> None:
    env = {"SAGEMAKER_TRITON_ADDITIONAL_ARGS": args}
    with pytest.raises(SageMakerEnvironmentError, match="add_sub.*empty model repository"):
        triton_args_from_environment(env)
    # A single-model endpoint's repository holds the model: the flag goes to Triton.
    assert "add_sub" in " ".join(triton_args_from_environment(env, multi_model=False).args)


def test_load_model_that_loads_nothing_is_dropped_and_said() -> None:
    for args in ("--load-model=*", "--load-model=x --exit-on-error=false"):
        translated = triton_args_from_environment({"SAGEMAKER_TRITON_ADDITIONAL_ARGS": args})
        assert not any(a.startswith("--load-model") for a in translated.args)
        assert "dropped" in translated.ignored["SAGEMAKER_TRITON_ADDITIONAL_ARGS"]


def test_a_model_instance_is_named_as_the_client_knows_the_model(tmp_path: Path) -> None:
    text = "Failed to process the request(s) for model instance 'bls--e62b_0_0', message: x"
    assert public_text(text, tmp_path, ["bls--e62b", "scale--e62b"], "bls--e62b",
                       "bls.tar.gz") == (
        "Failed to process the request(s) for model instance 'bls.tar.gz_0_0', message: x")
