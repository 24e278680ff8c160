"""Both ensembles through the emulator with boto3, as the seeds invoke them on SageMaker.

Also the seeds' headline scenario (both ensembles behind one endpoint, with room for both, then
with a memory budget that fits only one) and a short run of ``mme bench ensemble``.

Everything that goes through the emulator runs on each launcher in turn (``triton_launcher``):
on docker, both seeds' ensembles run unmodified in the CPU Triton test image, whose Python
packages come from docker/triton-cpu/requirements*.txt and whose onnxruntime/dali backends are
the emulator's shims, mounted by the launcher; checked against the same references.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from botocore.config import Config

from ensembles.packaging import folder_size, package
from tests.ensemble_helpers import built_repository
from tests.ensemble_support import (
    BATCH_16,
    SENTENCES,
    assert_same_embeddings,
    in_process_reference,
    reference,
    seed_images,
)
from tests.launcher_support import TritonLauncher
from tests.support import skip_module_unless_installed, wait_for

skip_module_unless_installed("nvidia.dali", "sentence_transformers")
server_module = pytest.importorskip("emulator.server")
from emulator.settings import Settings  # noqa: E402

pytestmark = pytest.mark.slow

IMAGES = seed_images()

BINARY_JSON = "application/vnd.sagemaker-triton.binary+json;json-header-size={}"


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {"text": built_repository(tmp_path_factory, "text_embedding"),
            "image": built_repository(tmp_path_factory, "image_classification")}


@pytest.fixture(scope="module")
def model_data(tmp_path_factory: pytest.TempPathFactory, repos: dict[str, Path]) -> Path:
    folder = tmp_path_factory.mktemp("model-data")
    package(repos["text"], folder / "model_text.tar.gz")
    package(repos["image"], folder / "model_image.tar.gz")
    return folder


def start_emulator(model_data: Path, cache: Path, launcher: TritonLauncher,
                   **settings: Any) -> Any:
    server = server_module.EmulatorServer(Settings(**launcher.overrides(
        model_data=str(model_data), port=0, cache_dir=cache, **settings))).start()
    launcher.of(server)
    return server


def runtime_client(url: str) -> Any:
    return boto3.client(
        "sagemaker-runtime", endpoint_url=url, region_name="us-east-1",
        aws_access_key_id="test", aws_secret_access_key="test",
        config=Config(read_timeout=300, retries={"max_attempts": 1, "mode": "standard"}))


@pytest.fixture(scope="module")
def emulator(model_data: Path, tmp_path_factory: pytest.TempPathFactory,
             triton_launcher: TritonLauncher) -> Iterator[Any]:
    server = start_emulator(model_data, tmp_path_factory.mktemp("cache"), triton_launcher)
    try:
        yield server
    finally:
        server.stop()


# --- payloads as the seeds build them ---------------------------------------------------------

def invoke_text_binary(client: Any, sentences: list[str],
                       target: str = "model_text.tar.gz") -> np.ndarray:
    item = httpclient.InferInput("INPUT0", [len(sentences), 1], "BYTES")
    item.set_data_from_numpy(np.array([[s] for s in sentences], dtype=np.object_),
                             binary_data=True)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        [item], outputs=[httpclient.InferRequestedOutput("finaloutput")])
    response = client.invoke_endpoint(EndpointName="local", TargetModel=target, Body=body,
                                      ContentType=BINARY_JSON.format(header_length))
    prefix = BINARY_JSON.format("")
    assert response["ContentType"].startswith(prefix), response["ContentType"]
    result = httpclient.InferenceServerClient.parse_response_body(
        response["Body"].read(), header_length=int(response["ContentType"][len(prefix):]))
    return result.as_numpy("finaloutput")


def invoke_text_json(client: Any, sentences: list[str],
                     target: str = "model_text.tar.gz") -> np.ndarray:
    body = {"inputs": [{"name": "INPUT0", "shape": [len(sentences), 1], "datatype": "BYTES",
                        "data": sentences}]}
    response = client.invoke_endpoint(EndpointName="local", TargetModel=target,
                                      Body=json.dumps(body), ContentType="application/json")
    output = json.loads(response["Body"].read())["outputs"][0]
    return np.array(output["data"], dtype=np.float32).reshape(output["shape"])


def invoke_image_seeds_json(client: Any, image: bytes,
                            target: str = "model_image.tar.gz") -> np.ndarray:
    raw = np.expand_dims(np.frombuffer(image, dtype=np.uint8), 0)
    payload = {"inputs": [{"name": "INPUT", "shape": raw.shape, "datatype": "UINT8",
                           "data": raw.tolist()}]}
    response = client.invoke_endpoint(EndpointName="local", TargetModel=target,
                                      ContentType="application/octet-stream",
                                      Body=json.dumps(payload))
    output = json.loads(response["Body"].read().decode("utf8"))["outputs"][0]
    return np.array(output["data"], dtype=np.float32).reshape(output["shape"])


def invoke_image_binary(client: Any, image: bytes,
                        target: str = "model_image.tar.gz") -> np.ndarray:
    raw = np.frombuffer(image, dtype=np.uint8)[None]
    item = httpclient.InferInput("INPUT", list(raw.shape), "UINT8")
    item.set_data_from_numpy(raw, binary_data=True)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        [item], outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=True)])
    response = client.invoke_endpoint(EndpointName="local", TargetModel=target, Body=body,
                                      ContentType=BINARY_JSON.format(header_length))
    prefix = BINARY_JSON.format("")
    result = httpclient.InferenceServerClient.parse_response_body(
        response["Body"].read(), header_length=int(response["ContentType"][len(prefix):]))
    return result.as_numpy("OUTPUT")


def endpoint_metrics(url: str) -> dict[str, Any]:
    snapshot = requests.get(f"{url}/_emulator/metrics", timeout=30).json()
    return snapshot["Endpoints"]["local"]["Metrics"]


# --- checks against the references ------------------------------------------------------------

def test_text_binary_json_matches_sentence_transformers(emulator: Any) -> None:
    client = runtime_client(emulator.url)
    assert_same_embeddings(invoke_text_binary(client, SENTENCES), reference(SENTENCES))
    assert_same_embeddings(invoke_text_binary(client, BATCH_16), reference(BATCH_16))


def test_text_json_matches_sentence_transformers(emulator: Any) -> None:
    client = runtime_client(emulator.url)
    assert_same_embeddings(invoke_text_json(client, SENTENCES), reference(SENTENCES))


def test_image_seeds_json_and_binary_match_in_process(emulator: Any,
                                                      repos: dict[str, Path]) -> None:
    client = runtime_client(emulator.url)
    want = in_process_reference(repos["image"], IMAGES)
    for image, expected in zip(IMAGES, want, strict=True):
        assert np.abs(invoke_image_seeds_json(client, image)[0] - expected).max() <= 1e-4
        assert np.abs(invoke_image_binary(client, image)[0] - expected).max() <= 1e-4


def _photo(width: int, height: int) -> bytes:
    """A JPEG the size of a camera's (noise does not compress): hundreds of KB."""
    import io

    from PIL import Image

    pixels = np.random.default_rng(7).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def test_a_photo_sized_image_is_classified_as_in_process(emulator: Any, repos: dict[str, Path],
                                                         triton_launcher: TritonLauncher) -> None:
    """Hundreds of KB: its bytes reach the ensemble through shared memory (DALI reads them from
    there); on the docker launcher only as root, which may reach into the container."""
    photo = _photo(1200, 900)
    assert len(photo) > 256 * 1024
    described = requests.get(f"{emulator.url}/_emulator/models", timeout=30).json()
    instance = described["Endpoints"]["local"]["Variants"]["AllTraffic"]["Instances"][0]
    before = instance["SharedMemoryBodies"]

    got = invoke_image_binary(runtime_client(emulator.url), photo)

    assert np.abs(got[0] - in_process_reference(repos["image"], [photo])[0]).max() <= 1e-4
    described = requests.get(f"{emulator.url}/_emulator/models", timeout=30).json()
    instance = described["Endpoints"]["local"]["Variants"]["AllTraffic"]["Instances"][0]
    through = triton_launcher.name == "embedded" or os.geteuid() == 0
    assert instance["SharedMemoryBodies"] == before + through


# --- the seeds' headline scenario -------------------------------------------------------------

def _alternate(client: Any, rounds: int, want_text: np.ndarray, want_image: np.ndarray) -> None:
    for _ in range(rounds):
        assert_same_embeddings(invoke_text_binary(client, SENTENCES[:2]), want_text)
        assert np.abs(invoke_image_seeds_json(client, IMAGES[0])[0] - want_image).max() <= 1e-4


def test_headline_two_ensembles_one_endpoint(model_data: Path, repos: dict[str, Path],
                                             triton_launcher: TritonLauncher,
                                             tmp_path: Path) -> None:
    want_text = reference(SENTENCES[:2])
    want_image = in_process_reference(repos["image"], IMAGES[:1])[0]
    sizes = sorted(folder_size(repo) for repo in repos.values())

    # Room for both: two misses, then only hits; nothing is unloaded.
    roomy = start_emulator(model_data, tmp_path / "cache-roomy", triton_launcher,
                           memory_budget=sum(sizes) * 2, model_memory="files")
    try:
        _alternate(runtime_client(roomy.url), 3, want_text, want_image)
        metrics = endpoint_metrics(roomy.url)
    finally:
        roomy.stop()
    assert metrics["ModelCacheHit"]["SampleCount"] == 6
    assert metrics["ModelCacheHit"]["Sum"] == 4
    assert metrics["LoadedModelCount"]["Current"] == 2
    assert metrics["ModelUnloadingTime"]["SampleCount"] == 0

    # Room for either one alone but not both: every switch evicts the other ensemble.
    tight = start_emulator(model_data, tmp_path / "cache-tight", triton_launcher,
                           memory_budget=sizes[1] + sizes[0] // 2,
                           model_memory="files")
    try:
        _alternate(runtime_client(tight.url), 2, want_text, want_image)
        # The last eviction's unload goes on after the call that caused it is answered (the
        # load overlaps the victim's teardown), and its ModelUnloadingTime is recorded then.
        metrics = wait_for(lambda: (m := endpoint_metrics(tight.url))["ModelUnloadingTime"]
                           ["SampleCount"] >= 3 and m, what="the third unload to be recorded")
    finally:
        tight.stop()
    assert metrics["ModelCacheHit"]["SampleCount"] == 4
    assert metrics["ModelCacheHit"]["Sum"] == 0
    assert metrics["LoadedModelCount"]["Current"] == 1
    assert metrics["LoadedModelCount"]["Maximum"] == 1
    assert metrics["ModelUnloadingTime"]["SampleCount"] == 3


# --- mme bench ensemble -----------------------------------------------------------------------

def test_bench_ensemble_prints_a_table_with_ratios(repos: dict[str, Path],
                                                   tmp_path: Path) -> None:
    from ensembles import bench

    configs = bench.SEED_CONFIGS[:2]
    results = bench.run(tmp_path, concurrency=2, requests=6, warmup=2, configs=configs,
                        base_repo=repos["text"])
    assert [r.config for r in results] == list(configs)
    assert all(r.errors == 0 and r.calls == 6 for r in results)
    text = bench.table(results, 2)
    assert "invocations/min" in text and "p99 ms" in text
    assert "1.00x" in text.splitlines()[3]  # the base row compares with itself
    derived = (tmp_path / configs[1].slug / "bert-onnx" / "config.pbtxt").read_text()
    assert "dynamic_batching { }" in derived
    assert os.path.exists(tmp_path / "model-data" / f"{configs[1].slug}.tar.gz")
