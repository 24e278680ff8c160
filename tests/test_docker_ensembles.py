"""The ensemble integration tests (test_ensembles_emulator) again, with ``launcher="docker"``.

Both seeds' ensembles (text: Python tokenizer -> ONNX BERT -> Python pooling; image: DALI ->
ONNX classifier) run unmodified in the CPU Triton test image, whose Python packages come from
docker/triton-cpu/requirements*.txt and whose onnxruntime/dali backends are the emulator's
shims, mounted by the launcher. Checked against the same references as the embedded run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docker_support import docker_client, triton_cpu_image  # noqa: F401

pytest.importorskip("nvidia.dali")
pytest.importorskip("sentence_transformers")

import test_ensembles_emulator as ensembles_suite  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# The benchmark test builds its own embedded Tritons; everything else goes through the emulator.
NOT_LAUNCHER_BOUND = {"test_bench_ensemble_prints_a_table_with_ratios"}

for _name in dir(ensembles_suite):
    if _name.startswith("test_") and _name not in NOT_LAUNCHER_BOUND:
        globals()[_name] = getattr(ensembles_suite, _name)
repos = ensembles_suite.repos
model_data = ensembles_suite.model_data
emulator = ensembles_suite.emulator


@pytest.fixture(scope="module", autouse=True)
def on_docker(triton_cpu_image: str) -> Iterator[None]:  # noqa: F811
    """Every emulator the suite starts (through its start_emulator) uses the docker launcher."""
    original = ensembles_suite.start_emulator

    def start_emulator(model_data: Path, cache: Path, **settings: Any) -> Any:
        server = original(model_data, cache, launcher="docker", image=triton_cpu_image,
                          **settings)
        launcher = server.registry.get("local").instances[0].launcher
        assert launcher.__class__.__name__ == "DockerLauncher"
        return server

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ensembles_suite, "start_emulator", start_emulator)
        yield
