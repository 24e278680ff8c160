"""The Python-based backend shims, loaded by a real embedded Triton from unmodified repositories.

One Triton serves the whole module; each test installs its own small models.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.ensemble_helpers import RunningTriton, gpu_available, triton_session
from tests.support import wait_for

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningTriton]:
    yield from triton_session(tmp_path_factory.mktemp("shims-triton"))


def _save_onnx(path: Path, nodes: list, inputs: list, outputs: list,
               initializers: list | None = None) -> None:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def addmul_model(root: Path, name: str, config_extra: str = "", input_type: str = "TYPE_FP32",
                 max_batch_size: int = 8) -> Path:
    folder = root / name
    vec = ["N", 4] if max_batch_size else [4]
    _save_onnx(
        folder / "1" / "model.onnx",
        [helper.make_node("Add", ["A", "B"], ["SUM"]),
         helper.make_node("Mul", ["A", "B"], ["PROD"])],
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, vec),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, vec)],
        [helper.make_tensor_value_info("SUM", TensorProto.FLOAT, vec),
         helper.make_tensor_value_info("PROD", TensorProto.FLOAT, vec)],
    )
    (folder / "config.pbtxt").write_text(f'''name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch_size}
input [ {{ name: "A" data_type: {input_type} dims: [ 4 ] }},
        {{ name: "B" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "PROD" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{config_extra}
''')
    return folder


def pairs_model(root: Path) -> Path:
    """Y = reshape(X, [batch, -1, 2]): fails at run time for an odd number of values."""
    folder = root / "pairs"
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [0, -1, 2])
    _save_onnx(
        folder / "1" / "model.onnx",
        [helper.make_node("Reshape", ["X", "shape"], ["Y"])],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", "L"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", "P", 2])],
        [shape],
    )
    (folder / "config.pbtxt").write_text('''name: "pairs"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]
''')
    return folder


# --- onnxruntime ---------------------------------------------------------------------------

def test_onnxruntime_platform_loads_and_honours_config(triton: RunningTriton,
                                                       tmp_path: Path) -> None:
    extra = "instance_group [ { kind: KIND_CPU count: 2 } ]\ndynamic_batching { }"
    name = triton.install(addmul_model(tmp_path, "addmul", extra))
    response = triton.load(name)
    assert response.status_code == 200, response.text
    config = triton.config(name)
    assert config["max_batch_size"] == 8
    assert config["instance_group"][0]["count"] == 2
    metadata = triton.client.get_model_metadata(name)
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]] == [
        ("A", "FP32", [-1, 4]), ("B", "FP32", [-1, 4])]

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 2.0, dtype=np.float32)
    out = triton.infer(name, {"A": a, "B": b})
    np.testing.assert_array_equal(out["SUM"], a + b)
    np.testing.assert_array_equal(out["PROD"], a * b)
    only = triton.infer(name, {"A": a, "B": b}, outputs=["PROD"])
    assert set(only) == {"PROD"}

    # A request beyond max_batch_size is refused before the model runs.
    big = np.ones((9, 4), dtype=np.float32)
    bad = triton.infer_json(name, {"inputs": [
        {"name": "A", "shape": [9, 4], "datatype": "FP32", "data": big.ravel().tolist()},
        {"name": "B", "shape": [9, 4], "datatype": "FP32", "data": big.ravel().tolist()}]})
    assert bad.status_code == 400
    triton.unload(name)


def test_onnxruntime_dynamic_batching_splits_results_per_request(triton: RunningTriton,
                                                                 tmp_path: Path) -> None:
    # A long queue delay makes Triton gather the concurrent requests into few executions.
    extra = ("instance_group [ { kind: KIND_CPU count: 1 } ]\n"
             "dynamic_batching { max_queue_delay_microseconds: 300000 }")
    name = triton.install(addmul_model(tmp_path, "batched", extra))
    assert triton.load(name).status_code == 200

    def call(i: int) -> tuple[int, dict[str, np.ndarray]]:
        a = np.full((1, 4), float(i), dtype=np.float32)
        b = np.arange(4, dtype=np.float32).reshape(1, 4)
        return i, triton.infer(name, {"A": a, "B": b})

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(8)))
    for i, out in results:
        np.testing.assert_array_equal(out["SUM"][0], i + np.arange(4, dtype=np.float32))
    # Triton counts a request once its response is sent, on its own thread: on a busy machine
    # the last answers may arrive here before their counts do.
    def statistics() -> dict[str, Any] | None:
        found: dict[str, Any] = triton.client.get_inference_statistics(name)["model_stats"][0]
        return found if int(found["inference_stats"]["success"]["count"]) >= 8 else None

    stats = wait_for(statistics, 30, "Triton's statistics of the 8 requests")
    assert int(stats["inference_stats"]["success"]["count"]) == 8
    assert int(stats["execution_count"]) < 8, stats  # at least two requests shared a run
    triton.unload(name)


def test_onnxruntime_runtime_error_fails_only_that_request(triton: RunningTriton,
                                                           tmp_path: Path) -> None:
    name = triton.install(pairs_model(tmp_path))
    assert triton.load(name).status_code == 200
    odd = triton.infer_json(name, {"inputs": [
        {"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]})
    assert odd.status_code >= 400
    assert "onnxruntime model 'pairs' failed" in odd.json()["error"]
    even = triton.infer(name, {"X": np.arange(4, dtype=np.float32).reshape(1, 4)})
    np.testing.assert_array_equal(even["Y"], np.arange(4, dtype=np.float32).reshape(1, 2, 2))
    triton.unload(name)


def test_onnxruntime_config_mismatch_fails_the_load_clearly(triton: RunningTriton,
                                                            tmp_path: Path) -> None:
    name = triton.install(addmul_model(tmp_path, "mismatch", input_type="TYPE_INT32"))
    response = triton.load(name)
    assert response.status_code == 400
    assert "'A' is TYPE_FP32 in the ONNX graph but TYPE_INT32 in config.pbtxt" in response.text


def test_onnxruntime_missing_file_names_the_expected_path(triton: RunningTriton,
                                                          tmp_path: Path) -> None:
    folder = addmul_model(tmp_path, "nofile")
    (folder / "1" / "model.onnx").rename(folder / "1" / "other.onnx")
    name = triton.install(folder)
    response = triton.load(name)
    assert response.status_code == 400
    assert "expected 1/model.onnx" in response.text


def test_onnxruntime_default_model_filename(triton: RunningTriton, tmp_path: Path) -> None:
    folder = addmul_model(tmp_path, "renamed", 'default_model_filename: "other.onnx"')
    (folder / "1" / "model.onnx").rename(folder / "1" / "other.onnx")
    name = triton.install(folder)
    assert triton.load(name).status_code == 200
    one = np.ones((1, 4), dtype=np.float32)
    np.testing.assert_array_equal(triton.infer(name, {"A": one, "B": one})["SUM"], one * 2)
    triton.unload(name)


def test_onnxruntime_unbatched_model(triton: RunningTriton, tmp_path: Path) -> None:
    name = triton.install(addmul_model(tmp_path, "flat", max_batch_size=0))
    assert triton.load(name).status_code == 200
    a = np.arange(4, dtype=np.float32)
    out = triton.infer(name, {"A": a, "B": a})
    np.testing.assert_array_equal(out["PROD"], a * a)
    triton.unload(name)


# --- dali ----------------------------------------------------------------------------------

def _image(width: int, height: int, fmt: str) -> bytes:
    from PIL import Image

    pixels = (np.random.default_rng(width * height).random((height, width, 3)) * 255)
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buffer, format=fmt)
    return buffer.getvalue()


def test_dali_pipeline_per_request_and_batched(triton: RunningTriton, tmp_path: Path) -> None:
    pytest.importorskip("nvidia.dali")
    from ensembles.image_classification import builder, pipeline

    repo = builder.build(tmp_path / "image-repo")
    name = triton.install(repo / "dali")
    assert triton.load(name).status_code == 200
    images = [_image(640, 480, "JPEG"), _image(120, 333, "PNG")]
    reference = pipeline.run_reference(images)
    for image, expected in zip(images, reference, strict=True):
        got = triton.infer(name, {"DALI_INPUT_0": np.frombuffer(image, np.uint8)[None]})
        assert got["DALI_OUTPUT_0"].shape == (1, 299, 299, 3)
        np.testing.assert_allclose(got["DALI_OUTPUT_0"][0], expected, atol=1e-5)
    # One request carrying both images, zero-padded to the same length (as the seeds batch).
    width = max(len(i) for i in images)
    batch = np.stack([np.pad(np.frombuffer(i, np.uint8), (0, width - len(i))) for i in images])
    got = triton.infer(name, {"DALI_INPUT_0": batch})["DALI_OUTPUT_0"]
    np.testing.assert_allclose(got, reference, atol=1e-5)

    garbage = triton.infer_json(name, {"inputs": [
        {"name": "DALI_INPUT_0", "shape": [1, 16], "datatype": "UINT8", "data": [7] * 16}]})
    assert garbage.status_code >= 400 and "dali model 'dali' failed" in garbage.json()["error"]
    # The pipeline was rebuilt: the next request is served.
    again = triton.infer(name, {"DALI_INPUT_0": np.frombuffer(images[0], np.uint8)[None]})
    np.testing.assert_allclose(again["DALI_OUTPUT_0"][0], reference[0], atol=1e-5)
    triton.unload(name)


def test_dali_gpu_instance_without_gpu_is_refused(triton: RunningTriton, tmp_path: Path) -> None:
    pytest.importorskip("nvidia.dali")
    if gpu_available():
        pytest.skip("this machine has a GPU: the refusal path does not apply")
    from ensembles.image_classification import builder

    repo = builder.build(tmp_path / "image-repo")
    config = repo / "dali" / "config.pbtxt"
    config.write_text(config.read_text().replace("KIND_CPU", "KIND_GPU"))
    name = triton.install(repo / "dali", "dali_gpu")
    text = (repo / "dali" / "config.pbtxt").read_text().replace('name: "dali"', 'name: "dali_gpu"')
    (triton.repository / name / "config.pbtxt").write_text(text)
    response = triton.load(name)
    assert response.status_code == 400
    assert "docker launcher" in response.text or "GPU" in response.text


# --- pytorch -------------------------------------------------------------------------------

def _torchscript(path: Path, kind: str) -> None:
    torch = pytest.importorskip("torch")

    class Indexed(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x - y, x * y

    class Named(torch.nn.Module):
        def forward(self, scale: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
            return values * scale

    module = Indexed() if kind == "indexed" else Named()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(module).save(str(path))


def test_pytorch_indexed_names(triton: RunningTriton, tmp_path: Path) -> None:
    folder = tmp_path / "torch_indexed"
    _torchscript(folder / "1" / "model.pt", "indexed")
    # Config lists INPUT__1 first: the shim must order arguments by index, not by position.
    (folder / "config.pbtxt").write_text('''name: "torch_indexed"
platform: "pytorch_libtorch"
max_batch_size: 4
input [ { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] },
         { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { }
''')
    name = triton.install(folder)
    assert triton.load(name).status_code == 200
    x = np.array([[5, 6, 7]], dtype=np.float32)
    y = np.array([[1, 2, 3]], dtype=np.float32)
    out = triton.infer(name, {"INPUT__0": x, "INPUT__1": y})
    np.testing.assert_array_equal(out["OUTPUT__0"], x - y)
    np.testing.assert_array_equal(out["OUTPUT__1"], x * y)
    triton.unload(name)


def test_pytorch_forward_argument_names_and_dtype_check(triton: RunningTriton,
                                                        tmp_path: Path) -> None:
    folder = tmp_path / "torch_named"
    _torchscript(folder / "1" / "model.pt", "named")
    (folder / "config.pbtxt").write_text('''name: "torch_named"
backend: "pytorch"
max_batch_size: 0
input [ { name: "values" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "scale" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "scaled" data_type: TYPE_FP64 dims: [ -1 ] } ]
''')
    name = triton.install(folder)
    assert triton.load(name).status_code == 200
    response = triton.infer_json(name, {"inputs": [
        {"name": "values", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]},
        {"name": "scale", "shape": [1], "datatype": "FP32", "data": [2]}]})
    # forward gives float32 while the config promises FP64: an error for this request.
    assert response.status_code >= 400
    assert "output 'scaled' is float32; the model config says TYPE_FP64" in response.text
    triton.unload(name)
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace("TYPE_FP64", "TYPE_FP32"))
    triton.install(folder)
    assert triton.load(name).status_code == 200
    out = triton.infer(name, {"values": np.array([1, 2, 3], np.float32),
                              "scale": np.array([2], np.float32)})
    np.testing.assert_array_equal(out["scaled"], [2, 4, 6])
    triton.unload(name)


# --- tensorrt ------------------------------------------------------------------------------

def test_tensorrt_without_gpu_fails_with_docker_hint(triton: RunningTriton,
                                                     tmp_path: Path) -> None:
    if gpu_available():
        pytest.skip("a GPU is present: serving a real plan is covered by the gpu tests")
    folder = tmp_path / "plan"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.plan").write_bytes(b"not really an engine")
    (folder / "config.pbtxt").write_text('''name: "plan"
platform: "tensorrt_plan"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
''')
    name = triton.install(folder)
    response = triton.load(name)
    assert response.status_code == 400
    assert "needs an NVIDIA GPU" in response.text
    assert "--launcher docker" in response.text
