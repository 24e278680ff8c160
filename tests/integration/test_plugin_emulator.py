"""The plugin's fixtures against a real emulator with the embedded Triton (a tiny Python model).

The example suite shipped for users (``harness/examples/test_example_endpoint.py``) is run with
``pytester`` three ways: on an emulator the plugin starts itself, on an emulator given by URL,
and as ``--mme-target=aws`` (boto3 pointed at the emulator through the standard
``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` variable, as it would be at a real endpoint).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.examples.add_model import write_add_repository

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parents[2] / "harness" / "examples" / "test_example_endpoint.py"


@pytest.fixture(scope="session")
def mme_model_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A repository folder named "add" is packaged as the TargetModel "add.tar.gz".
    return write_add_repository(tmp_path_factory.mktemp("repos") / "add")


def emulator_children() -> list[str]:
    """Command lines of this process's children that are emulators (the plugin's own)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and "mme serve" in cmdline:
            found.append(cmdline)
    return found


def test_fixtures_serve_the_store(invoke, mme_endpoint, mme_server) -> None:  # type: ignore[no-untyped-def]
    a = np.arange(4, dtype=np.float32)[None]
    outputs = invoke("add.tar.gz", {"INPUT0": a, "INPUT1": a})
    np.testing.assert_array_equal(outputs["OUTPUT0"], 2 * a)
    assert mme_endpoint.url == mme_server.url and mme_endpoint.is_local
    assert list(mme_endpoint.digests) == ["add.tar.gz"]
    assert mme_endpoint.digests["add.tar.gz"].startswith("sha256:")
    assert mme_endpoint.metrics()["LoadedModelCount"]["Current"] == 1


@pytest.fixture
def example_suite(pytester: pytest.Pytester) -> Path:
    shutil.copy(EXAMPLE, pytester.path / "test_example.py")
    repo = write_add_repository(pytester.path / "models" / "add")
    pytester.makeini("[pytest]\nmme_model_store = models/add\n")
    return repo


def test_example_suite_records_matches_then_names_a_stale_golden(
    pytester: pytest.Pytester, example_suite: Path
) -> None:
    before = emulator_children()  # the outer session's own emulator, if it started one
    recorded = pytester.runpytest("--mme-update-goldens")
    recorded.assert_outcomes(passed=5)
    golden = pytester.path / "goldens" / "test_example" / "add-2x4.npz"
    assert golden.is_file()
    assert emulator_children() == before, "the plugin left its emulator running"

    pytester.runpytest().assert_outcomes(passed=5)

    # The model changes (same TargetModel name, new tarball): its goldens are now stale.
    write_add_repository(example_suite, offset=1.0)
    stale = pytester.runpytest()
    stale.assert_outcomes(passed=3, failed=2)
    stale.stdout.fnmatch_lines(
        [
            "*golden*add-2x4.npz is STALE: it was recorded for add.tar.gz with digest sha256:*",
            "*OUTPUT0: 8/8 elements differ; max abs error 1 at *",
        ]
    )
    assert emulator_children() == before


def test_example_suite_on_a_running_emulator(
    pytester: pytest.Pytester,
    example_suite: Path,
    mme_server,  # type: ignore[no-untyped-def]
) -> None:
    args = [f"--mme-url={mme_server.url}", f"--mme-endpoint-name={mme_server.endpoint_name}"]
    pytester.runpytest(*args, "--mme-update-goldens").assert_outcomes(passed=5)
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines([f"*mme: target local, emulator at {mme_server.url}*"])


def test_example_suite_runs_unchanged_with_the_aws_target(
    pytester: pytest.Pytester,
    example_suite: Path,
    mme_server,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The aws target uses an ordinary boto3 client; here it reaches the emulator by the
    standard endpoint-override variable, so the whole suite runs in aws mode."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", mme_server.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    args = ["--mme-target=aws", f"--mme-endpoint-name={mme_server.endpoint_name}"]
    pytester.runpytest(*args, "--mme-update-goldens").assert_outcomes(passed=5)
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*mme: target aws, endpoint local*"])
    assert len(emulator_children()) == 1  # only the outer session's: none started in aws mode
