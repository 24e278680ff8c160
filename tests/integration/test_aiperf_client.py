"""aiperf (NVIDIA's benchmark client, PyPI ``aiperf``) against an inference component on the
emulator, and ``--report-format aiperf``'s shape against the file aiperf itself writes.

aiperf is no dependency of this project (its pins would downgrade pandas, pyzmq, pillow, ...:
docs/record-replay.md): the test runs where ``MME_TEST_AIPERF`` names an ``aiperf`` executable
in an environment of its own (``python -m venv v && v/bin/pip install aiperf==0.13.0``), and is
skipped elsewhere. aiperf 0.13 has no SageMaker endpoint type; its ``raw`` type posts the
dataset's bodies to a URL with the headers given, which is what InvokeEndpoint is without a
signature (the emulator runs with auth off). aiperf always loads a tokenizer; with no network a
HuggingFace cache holding a small local one stands in.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.loadtest import aiperf_export
from tests.component_support import ComponentServer, deploy_component, serving

AIPERF = os.environ.get("MME_TEST_AIPERF", "")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not AIPERF, reason="MME_TEST_AIPERF names no aiperf "
                                                    "executable (docs/record-replay.md)")]
ENDPOINT, COMPONENT = "aiperf-endpoint", "aiperf-double"
CALLS = 20
# A word-level tokenizer of the printable characters, saved as a HuggingFace cache entry.
TOKENIZER = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"[UNK]": 0, **{chr(c): i + 1 for i, c in enumerate(range(32, 127))}}
tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""


@pytest.fixture(scope="module")
def component(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComponentServer]:
    with serving(tmp_path_factory.mktemp("aiperf"), {"double": 2.0}) as server:
        deploy_component(server.client("sagemaker"), ENDPOINT, COMPONENT, "double")
        yield server


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("hf")
    repo = home / "hub" / "models--local--chars"
    revision = "0" * 39 + "1"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    python = Path(AIPERF).parent / "python"
    subprocess.run([str(python), "-c", TOKENIZER, str(repo / "snapshots" / revision)],
                   check=True, capture_output=True, timeout=120)
    return home


def test_aiperf_measures_an_inference_component(component: ComponentServer, hf_home: Path,
                                                tmp_path: Path) -> None:
    # aiperf's raw_payload dataset wants a chat "messages" array in each body; Triton ignores
    # it beside the tensors.
    body = {"messages": [{"role": "user", "content": "x"}],
            "inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    (tmp_path / "bodies.jsonl").write_text((json.dumps(body) + "\n") * CALLS)
    out = tmp_path / "out"
    done = subprocess.run(
        [AIPERF, "profile", "--model", COMPONENT, "--tokenizer", "local/chars",
         "--endpoint-type", "raw",
         "--url", f"{component.server.url}/endpoints/{ENDPOINT}/invocations",
         "-H", f"X-Amzn-SageMaker-Inference-Component: {COMPONENT}",
         "-H", "Content-Type: application/json",
         "--custom-dataset-type", "raw_payload", "--input-file", str(tmp_path / "bodies.jsonl"),
         "--request-count", str(CALLS), "--concurrency", "2", "--use-server-token-count",
         "--extra-inputs", "response_field:model_name", "--ui-type", "none",
         "--output-artifact-dir", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    theirs = json.loads((out / "profile_export_aiperf.json").read_text())
    assert theirs["request_count"]["avg"] == CALLS and not theirs["error_summary"]

    ours = aiperf_export.export(latencies_ms=[1.0, 2.0], started_at=1.7e9, duration_s=1.0,
                                errors={}, cancelled=False, extra={})
    assert ours["schema_version"] == theirs["schema_version"]
    for key in ("request_latency", "request_throughput", "request_count",
                "benchmark_duration"):
        assert ours[key]["unit"] == theirs[key]["unit"], key
        assert set(ours[key]) <= set(theirs[key]), key
    for key in ("was_cancelled", "error_summary", "start_time", "end_time"):
        assert type(ours[key]) is type(theirs[key]), key
