"""Tarballs of the failure classes ``mme lint`` names, built one way for the lint's unit tests
and for the tests that serve them (tests/integration/test_lint_classes_served.py); and how a
deployment refused by the checks is seen to make no call."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import boto3
import pytest

from harness.deployer import Deployer, make_clients
from harness.deployment import DeployConfig, DeployError

ENV_PATH = "$$TRITON_MODEL_DIRECTORY/env.tar.gz"
ENV_PARAMETER = ('parameters { key: "EXECUTION_ENV_PATH" value { string_value: "'
                 + ENV_PATH + '" } }\n')
PYTHON_CONFIG = b'name: "m"\nbackend: "python"\n'

# A Python model calling a model by name (BLS) that its tarball does not hold.
BLS = b'''import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        request = pb_utils.InferenceRequest(
            model_name="callee", requested_output_names=["Y"], inputs=[])
'''


def tar(path: Path, files: dict[str, bytes]) -> Path:
    """A .tar.gz of ``files`` (member name -> bytes); its folders are implied."""
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def model_files(folder: Path, name: str | None = None) -> dict[str, bytes]:
    """The files of a model folder as ``tar`` takes them, under ``name`` (its folder's)."""
    name = name or folder.name
    return {f"{name}/{p.relative_to(folder).as_posix()}": p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def env_tarball(path: Path, python: str = "3.10", numpy: str = "1.26.4",
                so: bytes = b"GLIBC_2.17\0GLIBCXX_3.4.21\0",
                extra: dict[str, bytes] | None = None) -> Path:
    """An EXECUTION_ENV_PATH environment as conda-pack lays one out: its Python's site-packages
    with numpy, and a shared object naming the GLIBC_ / GLIBCXX_ versions in ``so``."""
    return tar(path, {
        f"lib/python{python}/site-packages/numpy-{numpy}.dist-info/METADATA": b"",
        f"lib/python{python}/site-packages/ext.cpython.so": so, **(extra or {})})


def with_env(tarball: Path, env: Path, model: dict[str, bytes] | None = None) -> Path:
    """A tarball of model ``m`` (``model``: its files, else an empty Python model) that sets
    EXECUTION_ENV_PATH to ``env``, packed in its folder."""
    files = dict(model or {"m/config.pbtxt": PYTHON_CONFIG, "m/1/model.py": b""})
    files["m/config.pbtxt"] += ENV_PARAMETER.encode()
    files["m/env.tar.gz"] = env.read_bytes()
    return tar(tarball, files)


def assert_deploy_refused_before_any_call(config: DeployConfig, match: str) -> None:
    """``mme deploy`` of ``config`` to a local target is refused (``match``) before any call:
    nothing listens there, so a call would fail differently, and later."""
    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x",
                            region_name="us-east-1")
    out = io.StringIO()
    deployer = Deployer(make_clients(session, "local", emulator_url="http://127.0.0.1:9",
                                     s3_endpoint_url="http://127.0.0.1:9"), out=out)
    with pytest.raises(DeployError, match=match):
        deployer.deploy(config)
    assert "call " not in out.getvalue()
