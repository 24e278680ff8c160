"""What SageMaker's Triton would refuse in a model repository or tarball, found before upload.

A tarball that loads here but not on SageMaker costs a 10-15 minute deploy to find out, so
``mme package``, ``mme deploy`` and the pytest plugin's store refuse before anything is written
or uploaded. The checks are ``mme lint``'s structural rules (``harness.lint.rules.structure``,
the one implementation; docs/lint.md lists them): every ``config.pbtxt`` parses, a model folder's
name is its config's, every model has a version folder, every ensemble step is in the tarball,
one entry model, the model folders at the tarball's root. The first error is raised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class PackageProblem(ValueError):
    """SageMaker's Triton would not load this; the message says what to change."""


def check_folder(source: Path, layout: str = "flat") -> None:
    """Check the repository ``source`` (or the model folder, with ``layout="folder"``)."""
    from harness.lint.source import Unreadable, read

    source = Path(source)
    lone = (source / "config.pbtxt").is_file()
    try:
        read_source = read(source)
    except Unreadable as exc:
        raise PackageProblem(str(exc)) from None
    if layout == "folder" and not lone and len(read_source.models) > 1:
        raise PackageProblem(
            f"{source} holds {len(read_source.models)} models "
            f"({', '.join(sorted(read_source.models))}): --layout folder puts them one level "
            "too deep, where SageMaker's Triton finds no model and the load fails; use "
            "--layout flat (the default), the layout for ensembles")
    _raise_first(read_source)


def check_tarball(tarball: Path) -> None:
    """Check a ``.tar.gz`` as SageMaker's Triton would see it once unpacked."""
    from harness.lint.source import Unreadable, read

    try:
        source = read(Path(tarball), Path(tarball).name)
    except Unreadable as exc:
        raise PackageProblem(str(exc)) from None
    if source.layout == "root":
        return  # a single model at the root: the emulator's lenient case, not judged here
    _raise_first(source)


def _raise_first(source: Any) -> None:
    from harness.lint.rules import structure

    for finding in structure(source, {}):
        if finding.level == "error":
            raise PackageProblem(finding.message)
