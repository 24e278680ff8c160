"""A cold start from a real HTTP S3 server: streamed into extraction, one log line per model."""

from __future__ import annotations

import logging
import os
import tarfile
from pathlib import Path

import numpy as np

from tests.client_support import runtime_client
from tests.fault_support import instance_of, invoke
from tests.support import write_scale_model


def test_a_large_model_from_s3_logs_one_line_and_leaves_no_archive(  # type: ignore[no-untyped-def]
        start_emulator, s3_server, tmp_path: Path, caplog) -> None:
    folder = write_scale_model(tmp_path / "w", "big", scale=2)
    # Over 64 MiB: the size for which the emulator used to log ten "downloading N %" lines.
    (folder / "1" / "weights.bin").write_bytes(os.urandom(70 * 1024**2))
    tarball = tmp_path / "big.tar.gz"
    with tarfile.open(tarball, "w:gz", compresslevel=1) as tar:
        tar.add(folder, arcname="big")
    bucket = s3_server.bucket("cold-start")
    s3_server.client.upload_file(str(tarball), bucket, "mme/big.tar.gz")
    server = start_emulator(model_data=f"s3://{bucket}/mme/",
                            s3_endpoint_url=s3_server.endpoint_url)
    caplog.set_level(logging.INFO, logger="emulator")
    np.testing.assert_allclose(invoke(runtime_client(server.url), "big.tar.gz"), [2, 4, 6, 8])
    lines = [r.getMessage() for r in caplog.records
             if r.name.startswith("emulator") and "download" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("model=big.tar.gz step=download"), lines
    # Extracted as it arrived: the model's folder and nothing else (no .tar.gz, no staging).
    artifacts = instance_of(server).manager.artifacts_dir
    assert [p.name for p in artifacts.iterdir()] == [instance_of(server).manager.records[
        "big.tar.gz"].key]
