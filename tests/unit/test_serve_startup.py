"""``mme serve`` start-up mistakes: one line on stderr that says what to fix, exit status 2, and
nothing under the cache folder touched (no Triton is started: each is refused before that)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from emulator.cache_lock import CacheDirLock
from emulator.processes import bound_socket

# Far above the few seconds a refusal takes (an import of the CLI), far below a Triton start.
REFUSAL_TIMEOUT_S = 60


def serve(tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("MME_", "AWS_"))}
    environment.update({
        "HOME": str(tmp_path / "home"),  # the default cache folder lands here
        # No credentials anywhere boto3 looks, and no wait on EC2's metadata service
        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true", **env})
    return subprocess.run([sys.executable, "-m", "mme", "serve", "--port", "0", *flags],
                          env=environment, capture_output=True, text=True,
                          timeout=REFUSAL_TIMEOUT_S, check=False)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("mme serve:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_a_model_folder_that_does_not_exist(tmp_path: Path) -> None:
    result = serve(tmp_path, "--model-data", str(tmp_path / "nope"),
                   "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 2
    line = one_line(result)
    assert "--model-data" in line and "no such folder" in line and str(tmp_path / "nope") in line
    assert not (tmp_path / "cache" / "control-plane.sqlite3").exists()


def test_an_s3_store_without_credentials(tmp_path: Path) -> None:
    result = serve(tmp_path, "--model-data", "s3://models/", "--cache-dir", str(tmp_path / "c"),
                   "--s3-endpoint-url", "http://127.0.0.1:9")
    assert result.returncode == 2
    line = one_line(result)
    assert "no AWS credentials" in line and "AWS_ACCESS_KEY_ID" in line


def test_an_s3_store_that_does_not_answer(tmp_path: Path) -> None:
    with bound_socket() as taken:  # a port that refuses nothing yet answers no HTTP: closed now
        port = taken.getsockname()[1]
    result = serve(tmp_path, "--model-data", "s3://models/", "--cache-dir", str(tmp_path / "c"),
                   "--s3-endpoint-url", f"http://127.0.0.1:{port}",
                   AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x")
    assert result.returncode == 2
    assert f"cannot reach http://127.0.0.1:{port}" in one_line(result)


def test_a_port_in_use(tmp_path: Path) -> None:
    with bound_socket() as taken:
        port = taken.getsockname()[1]
        result = serve(tmp_path, "--port", str(port), "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 2
    assert f"port {port}" in one_line(result) and "--port" in one_line(result)
    assert not (tmp_path / "cache" / "control-plane.sqlite3").exists()


def test_a_cache_folder_another_server_owns_is_left_untouched(tmp_path: Path) -> None:
    store = tmp_path / "models"
    store.mkdir()
    cache = tmp_path / "home" / ".cache" / "sagemaker-mme-emulator"  # the default one
    (cache / "endpoints" / "local").mkdir(parents=True)
    owner = CacheDirLock(cache)
    owner.acquire("http://127.0.0.1:8080")
    before = sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))
    try:
        result = serve(tmp_path, "--model-data", str(store))
    finally:
        owner.release()
    assert result.returncode == 2
    line = one_line(result)
    assert f"{cache} is in use" in line and "http://127.0.0.1:8080" in line
    assert "--cache-dir" in line
    assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) == before


def test_another_start_failure_is_one_line_too(tmp_path: Path) -> None:
    store = tmp_path / "models"
    store.mkdir()
    result = serve(tmp_path, "--model-data", str(store), "--cache-dir", str(tmp_path / "cache"),
                   "--tritonserver", str(tmp_path / "no-tritonserver"))
    assert result.returncode == 1
    line = one_line(result)
    assert "could not start" in line and "no-tritonserver: no such file" in line


def test_a_second_demo_on_the_same_work_dir_is_one_line(tmp_path: Path, monkeypatch,  # type: ignore[no-untyped-def]
                                                        capsys) -> None:
    from mme import demo

    monkeypatch.setattr(demo, "build_store", lambda work: work)  # no ensembles built here
    owner = CacheDirLock(tmp_path / "cache")
    owner.acquire("http://127.0.0.1:8080")
    try:
        assert demo.run(tmp_path) == 2
    finally:
        owner.release()
    err = capsys.readouterr().err
    assert err.startswith("mme demo: ") and err.count("\n") == 1 and "--work-dir" in err
