"""``mme deploy``'s flags mean what they say: a guard flag without ``--traffic``, a size the
fleet cannot take, a mistyped instance type are refused with exit 2 and one line saying what to
fix, before any call (the emulator named here does not exist: reaching it would be exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.deploy_cli import main as cli_main

NOWHERE = ["--target", "local", "--endpoint-name", "demo", "--emulator-url",
           "http://127.0.0.1:9"]


def _deploy(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = cli_main(["deploy", *NOWHERE, "--store-dir", str(tmp_path / "store"),
                     str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert not (tmp_path / "store").exists()
    return code, err


@pytest.mark.parametrize(("flags", "message"), [
    (["--canary-size", "10%", "--bake", "600", "--rollback-alarm", "x"],
     "--canary-size, --bake, --rollback-alarm guard an update: add --traffic canary"),
    (["--termination-wait", "0"], "--termination-wait guard an update: add --traffic"),
    (["--traffic", "canary"], "--traffic canary needs --canary-size"),
    (["--traffic", "canary", "--canary-size", "60%"],
     "--canary-size 60% is 60% of a fleet of 1 instance(s); SageMaker takes at most 50%"),
    (["--traffic", "canary", "--canary-size", "1"], "is 100% of a fleet of 1 instance(s)"),
    (["--traffic", "linear", "--linear-step-size", "5%"], "SageMaker takes 10-50%"),
    (["--traffic", "linear", "--canary-size", "10%", "--linear-step-size", "20%"],
     "--canary-size is for --traffic canary, not --traffic linear"),
    (["--traffic", "all-at-once", "--bake", "4000"],
     "--bake is 0-3600 seconds (WaitIntervalInSeconds), not 4000"),
    (["--traffic", "all-at-once", "--bake", "600", "--max-execution-timeout", "600"],
     "--max-execution-timeout (600) must be larger than --bake plus --termination-wait"),
    (["--traffic", "all-at-once", "--rollback-alarm", " "],
     "--rollback-alarm ' ' is not an alarm name"),
    (["--instance-type", "ml.m5.xlage"],
     "--instance-type 'ml.m5.xlage' is not a SageMaker instance type; did you mean "
     "ml.m5.xlarge"),
    (["--instance-count", "0"], "--instance-count is 1 or more, not 0"),
    (["--role-arn", "SageMakerRole"], "--role-arn 'SageMakerRole' is not an IAM role ARN"),
    (["--image-uri", "my image"], "--image-uri 'my image' is not an image URI"),
    (["--env", "1BAD=x"], "--env 1BAD=...: a variable's name is letters, digits and _"),
    (["--payload", "a.tar.gz=missing.json"], "--payload a.tar.gz=missing.json: no such file"),
])
def test_a_flag_that_cannot_mean_what_it_says_is_refused_before_any_call(
        flags: list[str], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _deploy(tmp_path, capsys, *flags)
    assert code == 2
    assert message in err
    assert len(err.splitlines()) == 1 and len(err) < 400  # one line, not the enum


def test_flags_that_fit_go_on_to_the_emulator(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _deploy(tmp_path, capsys, "--traffic", "canary", "--canary-size", "1",
                        "--instance-count", "2", "--bake", "600", "--rollback-alarm", "x",
                        "--instance-type", "ml.g5.xlarge")
    assert code == 1 and "no emulator answers at http://127.0.0.1:9" in err
