"""``mme lint``: what SageMaker's Triton would refuse in a tarball or model repository, found
without a Triton. One implementation: ``mme package``, ``mme deploy`` and the pytest plugin run
these checks too (``structure`` before anything is written or uploaded, ``lint`` for the rest).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.triton.releases import Release, release_of
from harness.lint import envs, rules
from harness.lint.findings import RULES, Finding, Rule
from harness.lint.source import Source, Unreadable, read

__all__ = ["RULES", "Finding", "Report", "Rule", "Unreadable", "lint", "lint_source", "targets"]


@dataclass
class Report:
    release: Release
    instance_type: str | None
    sources: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # messages

    @property
    def exit_code(self) -> int:
        return 2 if self.unreadable else 1 if self.findings else 0


def lint_source(source: Source, release: Release, instance_type: str | None) -> list[Finding]:
    configs: dict[str, Any] = {}
    found = rules.structure(source, configs)
    found += rules.serving(source, configs, instance_type, release)
    found += envs.check(source, configs, release)
    return found


def targets(path: Path) -> list[tuple[Path, str]]:
    """What ``path`` names: itself (a tarball, a model folder, a model repository, as `mme
    package` takes it) or, for a store folder, each of its tarballs and model folders (as
    ``harness.model_store`` sees a store)."""
    from harness.model_store import (
        StoreError,
        is_model_dir,
        is_repository,
        is_tarball,
        store_entries,
    )

    if is_tarball(path) or is_model_dir(path) or is_repository(path):
        return [(path, path.name)]
    if not path.exists():
        raise Unreadable(f"{path}: no such file or folder")
    try:
        return [(source, target) for target, source in store_entries(path).items()]
    except StoreError as exc:
        raise Unreadable(str(exc)) from None


def lint(paths: list[Path], *, instance_type: str | None = None,
         image: str | None = None) -> Report:
    """Raises ``releases.UnknownImage`` for an ``image`` the release table does not hold."""
    report = Report(release_of(image), instance_type)
    for path in paths:
        try:
            named = targets(Path(path))
        except Unreadable as exc:
            report.unreadable.append(str(exc))
            continue
        for source_path, _target in named:
            report.sources.append(str(source_path))
            try:
                source = read(source_path)
            except Unreadable as exc:
                report.unreadable.append(str(exc))
                continue
            report.findings += lint_source(source, report.release, instance_type)
    return report
