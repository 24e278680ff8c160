"""The pytest plugin itself, run through ``pytester``: options, target switching, goldens.

These need no emulator; ``test_plugin_emulator.py`` runs the fixtures against a real one.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest_plugins = ["pytester"]


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No credentials or region anywhere boto3 looks (and no metadata service probe)."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_options_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "*--mme-target=*",
            "*--mme-endpoint-name=*",
            "*--mme-launcher=*",
            "*--mme-model-store=*",
            "*--mme-update-goldens*",
        ]
    )


@pytest.fixture
def aws_credentials(no_aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials boto3 finds (and nothing else: no region)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")


@pytest.mark.parametrize(("credentials", "args", "said"), [
    (False, ["--mme-target=aws"], "*--mme-target=aws needs --mme-endpoint-name*"),
    (False, ["--mme-target=aws", "--mme-endpoint-name=prod-mme"],
     "*boto3 found no AWS credentials*"),
    (True, ["--mme-target=aws", "--mme-endpoint-name=prod-mme"], "*no AWS region*"),
], ids=["no-endpoint-name", "no-credentials", "no-region"])
def test_aws_target_without_what_it_needs_is_a_clear_usage_error(
    pytester: pytest.Pytester, no_aws: None, request: pytest.FixtureRequest, credentials: bool,
    args: list[str], said: str,
) -> None:
    if credentials:
        request.getfixturevalue("aws_credentials")
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([said])


def test_aws_target_binds_fixtures_to_the_real_endpoint(
    pytester: pytest.Pytester, aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No emulator starts; the client is an ordinary one for the session's region."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    pytester.makepyfile("""
        def test_endpoint(mme_endpoint, sagemaker_runtime):
            assert mme_endpoint.name == "prod-mme"
            assert mme_endpoint.target == "aws" and mme_endpoint.url is None
            assert mme_endpoint.region == "eu-west-1"
            assert sagemaker_runtime.meta.endpoint_url == (
                "https://runtime.sagemaker.eu-west-1.amazonaws.com")

        def test_server(mme_server):
            raise AssertionError("no emulator may start for a real endpoint")
    """)
    result = pytester.runpytest("--mme-target=aws", "--mme-endpoint-name=prod-mme", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["*mme: target aws, endpoint prod-mme*", "*SKIPPED*--mme-target=aws tests a real endpoint*"]
    )


def test_mme_target_can_come_from_the_ini_file(pytester: pytest.Pytester, no_aws: None) -> None:
    pytester.makeini("[pytest]\nmme_target = aws\n")
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_endpoint_without_a_store_says_how_to_give_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_it(mme_endpoint): pass")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no model store*--mme-model-store*"])


def test_a_bad_store_is_a_usage_error(pytester: pytest.Pytester) -> None:
    empty = pytester.mkdir("empty-store")
    pytester.makepyfile("def test_it(mme_endpoint): pass")
    result = pytester.runpytest(f"--mme-model-store={empty}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*empty-store: nothing to serve*NAME.tar.gz*"])


GOLDEN_TEST = """
    import numpy as np

    def test_outputs(assert_matches_golden):
        outputs = {{"SCORES": np.array([[0.25, 0.5, 0.75]], dtype=np.float32) + {delta}}}
        assert_matches_golden("scores", outputs, rtol=0, atol=1e-3)
"""


def test_golden_fail_record_pass_and_mismatch(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_model=GOLDEN_TEST.format(delta=0))
    golden = pytester.path / "goldens" / "test_model" / "scores.npz"

    missing = pytester.runpytest()
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*no golden snapshot*--mme-update-goldens*"])
    assert not golden.exists()

    recorded = pytester.runpytest("--mme-update-goldens")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["*golden snapshots were (re)recorded*"])
    assert golden.is_file()
    with np.load(golden) as data:
        np.testing.assert_array_equal(data["SCORES"], [[0.25, 0.5, 0.75]])

    pytester.runpytest().assert_outcomes(passed=1)

    pytester.makepyfile(test_model=GOLDEN_TEST.format(delta=0.0005))  # within atol
    pytester.runpytest().assert_outcomes(passed=1)

    pytester.makepyfile(test_model=GOLDEN_TEST.format(delta=0.01))
    drifted = pytester.runpytest()
    drifted.assert_outcomes(failed=1)
    drifted.stdout.fnmatch_lines(
        [
            "*outputs differ from golden*scores.npz*",
            "*SCORES: 3/3 elements differ; max abs error 0.0* at [[]0, 0[]], max rel error*",
        ]
    )

    pytester.runpytest("--mme-update-goldens").assert_outcomes(passed=1)
    pytester.runpytest().assert_outcomes(passed=1)
