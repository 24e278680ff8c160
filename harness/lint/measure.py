"""``mme lint --measure``: each model loaded once on the embedded Triton (``mme plan``'s
measurement) and its measured memory set against the instance type's model memory."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from emulator.instance_types import lookup
from harness.lint.findings import RULES, Finding

MIB = 1024**2


def judge(memory: Mapping[str, int], skipped: Mapping[str, str], sources: Mapping[str, str],
          instance_type: str) -> list[Finding]:
    """Findings of measured ``memory`` (TargetModel -> bytes) and of the models that did not
    load (``skipped``: TargetModel -> why); ``sources``: TargetModel -> the path linted."""
    kind = lookup(instance_type)
    budget = kind.model_memory_bytes if kind else None
    found = []
    for target, why in sorted(skipped.items()):
        source = sources.get(target, target)
        found.append(Finding(RULES["MME502"], f"{source}: the model did not load on the "
                             f"embedded Triton: {why}", source, ""))
    for target, size in sorted(memory.items()):
        source = sources.get(target, target)
        if budget is not None and size > budget:
            found.append(Finding(RULES["MME501"], (
                f"{source}: the model holds {size / MIB:.0f} MiB once loaded (measured); "
                f"{instance_type} has {budget / MIB:.0f} MiB for models"), source, ""))
    return found


def measure_sources(paths: list[str], instance_type: str) -> tuple[list[Finding], dict[str, int]]:
    """Package what is not a tarball, load each model once, judge; (findings, measured)."""
    from ensembles.packaging import package
    from harness.model_costs import measure
    from harness.model_store import is_model_dir, is_tarball

    with tempfile.TemporaryDirectory(prefix="mme-lint-measure-") as work:
        store = Path(work) / "store"
        store.mkdir()
        sources: dict[str, str] = {}
        for number, given in enumerate(paths):
            path = Path(given)
            target = f"{number:04d}-{path.name.split('.')[0]}.tar.gz"
            if is_tarball(path):
                (store / target).symlink_to(path.resolve())
            else:
                package(path, store / target, layout="folder" if is_model_dir(path) else "flat")
            sources[target] = given
        skipped: dict[str, str] = {}
        try:
            costs = measure(str(store), sorted(sources), "embedded", skipped)
        except SystemExit:  # none loaded: every reason is in skipped
            costs = {}
    memory = {target: cost.memory_bytes for target, cost in costs.items()}
    return (judge(memory, skipped, sources, instance_type),
            {sources[target]: size for target, size in memory.items()})
