"""Errors a client gets name its models as it knows them: the TargetModel and the
tarball's own model names, never the emulator's installed names (``m--9605fbbea42a``) nor
paths in its cache folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.support import package, scale_request, write_scale_ensemble, write_scale_model

INSTALLED_NAME = re.compile(r"\w--[0-9a-f]{6,}")


def _message(call) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(ClientError) as raised:
        call()
    error = raised.value.response
    assert error["Error"]["Code"] == "ModelError"
    return f'{error["Error"]["Message"]} {error.get("OriginalMessage", "")}'


def test_triton_errors_use_public_names(start_emulator, store: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    chain = tmp_path / "chain"
    write_scale_ensemble(chain)
    write_scale_model(chain, "postprocess", 3.0, fail_load="weights are corrupt")
    package(chain, store / "chain.tar.gz", "flat")
    package(write_scale_model(tmp_path / "m", "m"), store / "m.tar.gz", "folder")
    server = start_emulator(model_data=str(store))
    cache = str(server.settings.cache_dir)
    rt = runtime_client(server.url)

    def invoke(target: str, body: bytes) -> object:
        return rt.invoke_endpoint(EndpointName="local", TargetModel=target, Body=body,
                                  ContentType="application/json")

    failed_load = _message(lambda: invoke("chain.tar.gz", scale_request([1, 2, 3, 4], "INPUT")))
    assert "load failed for model 'chain.tar.gz'" in failed_load
    assert "Model 'postprocess' loading failed" in failed_load
    assert "/opt/ml/models/" in failed_load and "/postprocess/1/model.py" in failed_load
    bad_shape = _message(lambda: invoke("m.tar.gz", scale_request([1, 2, 3])))
    assert "unexpected shape for input 'X' for model 'm.tar.gz'" in bad_shape
    for message in (failed_load, bad_shape):
        assert not INSTALLED_NAME.search(message), message
        assert cache not in message and "triton-repo" not in message
