"""Triton completes a model's configuration as it loads it, as SageMaker's Triton does; with
``MME_TRITON_AUTO_COMPLETE=false`` (the test suite's setting) it takes ``config.pbtxt`` as
written."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from harness.testmodels import SCALE_MODEL_PY
from tests.client_support import runtime_client
from tests.support import output_of, package, scale_request

# The scale model, whose config.pbtxt leaves its output and batching for the model to complete.
COMPLETED_BY_THE_MODEL_PY = SCALE_MODEL_PY + '''

    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size(8)
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [4]})
        return config
'''
INCOMPLETE_CONFIG = '''name: "completed"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


@pytest.fixture
def model_store(tmp_path: Path) -> Path:
    folder = tmp_path / "completed"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(COMPLETED_BY_THE_MODEL_PY)
    (folder / "config.pbtxt").write_text(INCOMPLETE_CONFIG)
    store = tmp_path / "store"
    store.mkdir()
    package(folder, store / "completed.tar.gz", "folder")
    return store


def test_a_config_completed_by_its_model_is_served_as_completed(
        start_emulator, model_store: Path) -> None:  # type: ignore[no-untyped-def]
    server = start_emulator(model_data=str(model_store), triton_auto_complete=True)
    answer = runtime_client(server.url).invoke_endpoint(
        EndpointName="local", TargetModel="completed.tar.gz", Body=scale_request([1, 2, 3, 4]))
    assert output_of(answer["Body"].read()).tolist() == [2, 4, 6, 8]


def test_without_auto_complete_the_config_is_taken_as_written(
        start_emulator, model_store: Path) -> None:  # type: ignore[no-untyped-def]
    server = start_emulator(model_data=str(model_store), triton_auto_complete=False)
    with pytest.raises(ClientError) as refused:
        runtime_client(server.url).invoke_endpoint(
            EndpointName="local", TargetModel="completed.tar.gz",
            Body=scale_request([1, 2, 3, 4]))
    # Without batching, a [1, 4] request does not match the input's [4]: Triton says so.
    error = refused.value.response["Error"]
    assert error["Code"] == "ModelError", error
    assert "unexpected shape for input 'X'" in error["Message"], error
