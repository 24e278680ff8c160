"""Config variants for ``mme sweep``: applied through Triton's ModelConfig, packaged, compared."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from harness.examples.add_model import config_pbtxt, write_add_repository
from harness.model_config import entry_model, input_specs
from harness.sweep import (
    BASE,
    SweepError,
    SweepRow,
    Variant,
    apply_variant,
    build_variant_store,
    comparison_table,
    parse_variant,
    pick_model,
)


def parsed(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_parse_variant() -> None:
    v = parse_variant("db:dynamic_batching=on,preferred=4/8,delay_us=500,instances=2")
    assert v == Variant("db", True, (4, 8), 500, 2, None)
    assert parse_variant("plain:dynamic_batching=off").dynamic_batching is False
    assert parse_variant("mb:max_batch_size=16").max_batch_size == 16
    for bad in (
        "db:bogus=1",
        "db:preferred=x",
        "db:dynamic_batching=maybe",
        "db:dynamic_batching=off,preferred=4",
        "db:instances=0",
        "bad name:instances=1",
        "db:instances",
    ):
        with pytest.raises(SweepError):
            parse_variant(bad)


def test_apply_dynamic_batching_preferred_sizes_delay_and_instances() -> None:
    text = apply_variant(config_pbtxt(), Variant("v", None, (4, 8), 250, 3))
    config = parsed(text)
    assert config.HasField("dynamic_batching")  # implied by preferred sizes
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    assert [g.count for g in config.instance_group] == [3]
    # everything else kept
    assert config.name == "add" and config.backend == "python" and config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert {p for p in config.parameters} == {"offset", "exec_delay_ms"}


def test_turning_dynamic_batching_off_and_the_base_leave_the_rest() -> None:
    on = config_pbtxt(dynamic_batching=True)
    assert not parsed(apply_variant(on, Variant("off", dynamic_batching=False))).HasField(
        "dynamic_batching"
    )
    assert parsed(apply_variant(on, BASE)) == parsed(on)
    assert parsed(apply_variant(config_pbtxt(), Variant("on", True))).HasField("dynamic_batching")


def test_impossible_variants_are_refused() -> None:
    with pytest.raises(SweepError, match="exceed max_batch_size"):
        apply_variant(config_pbtxt(max_batch_size=4), Variant("v", True, (8,)))
    with pytest.raises(SweepError, match="max_batch_size > 0"):
        apply_variant(config_pbtxt(max_batch_size=0), Variant("v", True))


def test_instances_added_when_the_config_has_no_group() -> None:
    config = parsed(apply_variant('name: "m"\nbackend: "python"\n', Variant("v", instances=2)))
    assert [g.count for g in config.instance_group] == [2]


def test_input_specs_include_the_batch_dimension() -> None:
    assert input_specs(config_pbtxt(dims=3)) == [
        ("INPUT0", "FP32", [1, 3]),
        ("INPUT1", "FP32", [1, 3]),
    ]
    assert input_specs(config_pbtxt(max_batch_size=0), batch_size=4)[0] == ("INPUT0", "FP32", [4])


def _ensemble(repo: Path) -> None:
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text(
        'name: "pipeline"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]\n'
    )


def test_model_choice_in_a_repository(tmp_path: Path) -> None:
    repo = write_add_repository(tmp_path / "repo")
    assert pick_model(repo, None).name == "add" and entry_model(repo).name == "add"
    _ensemble(repo)
    assert pick_model(repo, None).name == "add"  # the ensemble itself is not varied
    assert entry_model(repo).name == "pipeline"
    write_add_repository(repo, name="other")
    with pytest.raises(SweepError, match="--model"):
        pick_model(repo, None)
    assert pick_model(repo, "other").name == "other"
    with pytest.raises(SweepError, match="no model 'nope'"):
        pick_model(repo, "nope")


def test_variant_store_has_one_tarball_per_variant(tmp_path: Path) -> None:
    repo = write_add_repository(tmp_path / "repo")
    variants = [BASE, parse_variant("db:preferred=2/4"), parse_variant("x2:instances=2")]
    tarballs = build_variant_store(repo, variants, tmp_path / "work")
    assert sorted(p.name for p in tarballs.values()) == ["base.tar.gz", "db.tar.gz", "x2.tar.gz"]
    with tarfile.open(tarballs["db"]) as tar:
        names = tar.getnames()
        config = tar.extractfile("./add/config.pbtxt").read().decode()  # type: ignore[union-attr]
    assert "./add/1/model.py" in names
    assert list(parsed(config).dynamic_batching.preferred_batch_size) == [2, 4]
    assert (repo / "add" / "config.pbtxt").read_text() == config_pbtxt()  # source untouched
    with pytest.raises(SweepError, match="unique"):
        build_variant_store(repo, [BASE, BASE], tmp_path / "w2")


def test_comparison_table_ratios() -> None:
    def row(name: str, rate: float) -> SweepRow:
        stats = {"p50": 1.0, "p90": 2.0, "p99": 3.5}
        return SweepRow(
            Variant(name),
            {
                "invocations_per_minute": rate,
                "latency_ms": {"client": stats},
                "errors_by_code": {"ModelError": 2},
            },
        )

    table = comparison_table([row("base", 600), row("db", 1500)])
    lines = table.splitlines()
    assert lines[0].startswith("| configuration | settings | invocations/min | p50 ms")
    assert lines[2] == "| base | as in config.pbtxt | 600 | 1.00 | 2.00 | 3.50 | 2 | 1.00x |"
    assert lines[3].endswith("| 2.50x |")
