"""``mme deploy --target local`` in one command, as the README gives it: no S3 server,
no flags beyond the endpoint name; the tarballs go to a local folder the emulator reads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.deploy_cli import main as cli_main
from tests.client_support import runtime_client
from tests.support import output_of, scale_request, write_scale_model


def _mme(*args: str, home: Path, url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MME_", "AWS_"))}
    env.update(HOME=str(home), MME_EMULATOR_URL=url)  # the test's emulator is not on 8080
    return subprocess.run([sys.executable, "-m", "mme", *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_deploy_local_in_one_command_then_teardown(start_emulator, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = start_emulator()
    repo = tmp_path / "repos" / "double"
    write_scale_model(repo, "double", scale=2.0)
    home = tmp_path / "home"

    deployed = _mme("deploy", "--target", "local", "--endpoint-name", "demo", str(repo),
                    home=home, url=server.url)

    assert deployed.returncode == 0, deployed.stderr + deployed.stdout
    store = home / ".cache" / "sagemaker-mme-emulator-models" / "demo"
    assert "smoke double.tar.gz: ok" in deployed.stdout
    # Each version in a folder of its own, named by the endpoint and the tarballs' digest.
    [version] = [p.name for p in store.iterdir()]
    assert re.fullmatch(r"demo-[0-9a-f]{12}", version)
    assert f"ModelDataUrl {store.as_uri()}/{version}/; TargetModels: double.tar.gz" in \
        deployed.stdout
    resp = runtime_client(server.url).invoke_endpoint(
        EndpointName="demo", TargetModel="double.tar.gz", Body=scale_request([1, 2, 3, 4]))
    np.testing.assert_allclose(output_of(resp["Body"].read()), [2, 4, 6, 8])

    again = _mme("deploy", "--target", "local", "--endpoint-name", "demo", str(repo),
                 home=home, url=server.url)
    assert again.returncode == 0 and "call " not in again.stdout  # nothing copied or created
    assert f"unchanged {store / version / 'double.tar.gz'}" in again.stdout

    gone = _mme("teardown", "--target", "local", "--endpoint-name", "demo",
                home=home, url=server.url)
    assert gone.returncode == 0, gone.stderr
    assert "call sagemaker.DeleteEndpoint" in gone.stdout and not store.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--s3-endpoint-url", "http://127.0.0.1:9"], "--s3-endpoint-url needs --bucket"),
    (["--bucket", "b", "--store-dir", "x"], "not both"),
])
def test_store_mistakes_are_one_line_before_anything(args: list[str], message: str,
                                                     tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["deploy", "--target", "local", "--endpoint-name", "demo", str(tmp_path),
                     "--emulator-url", "http://127.0.0.1:9", *args])
    assert code == 1
    assert message in capsys.readouterr().err


def test_no_emulator_running_says_how_to_start_one(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from emulator.processes import bound_socket

    with bound_socket() as taken:  # a port nothing listens on once closed
        url = f"http://127.0.0.1:{taken.getsockname()[1]}"
    code = cli_main(["deploy", "--target", "local", "--endpoint-name", "demo", str(tmp_path),
                     "--emulator-url", url])
    assert code == 1
    err = capsys.readouterr().err
    assert f"no emulator answers at {url}" in err and "mme serve" in err
    assert "Traceback" not in err
