"""Model stores for tests: a folder of ``.tar.gz`` objects, as SageMaker reads from S3.

A store can be given as a folder of tarballs, a list of tarballs, or Triton model repositories
(folders whose sub-folders hold ``config.pbtxt``); repositories are packaged the way SageMaker
expects (model folders at the archive root) by the project's one packager, which is
deterministic, so a tarball's digest changes only when its content does: golden snapshots record
that digest to tell a stale snapshot from a regression.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path

from ensembles.packaging import package

TARBALL_SUFFIXES = (".tar.gz", ".tgz")


class StoreError(ValueError):
    """A store specification that names nothing usable."""


def is_tarball(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TARBALL_SUFFIXES)


def is_model_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.pbtxt").is_file()


def is_repository(path: Path) -> bool:
    """A Triton model repository: a folder with at least one model folder in it."""
    return path.is_dir() and any(is_model_dir(child) for child in path.iterdir())


def package_repository(repository: Path, destination: Path) -> Path:
    """Write ``repository``'s model folders at the root of the tarball ``destination`` (the
    ``flat`` layout of ``ensembles.packaging.package``, the project's one packager)."""
    repository = Path(repository)
    if not is_repository(repository):
        raise StoreError(f"{repository} is not a model repository (no <model>/config.pbtxt)")
    return package(repository, destination, layout="flat")


def tarball_name(repository: Path) -> str:
    return f"{Path(repository).resolve().name}.tar.gz"


def prepare_store(spec: str | Path | Sequence[str | Path], work_dir: Path) -> Path:
    """Turn a store specification into a folder of tarballs and return that folder.

    - a folder that holds tarballs (and no model folders): used as it is;
    - a model repository, a tarball, or a list mixing both: tarballs are linked (or copied) and
      repositories packaged into ``work_dir``. A repository becomes ``<folder name>.tar.gz``.
    """
    items = [Path(spec)] if isinstance(spec, (str, Path)) else [Path(p) for p in spec]
    if not items:
        raise StoreError("an empty model store")
    if len(items) == 1 and items[0].is_dir() and not is_repository(items[0]):
        folder = items[0]
        if not any(is_tarball(p) for p in folder.rglob("*")):
            raise StoreError(f"{folder} holds no .tar.gz and no model repository")
        return folder
    work_dir.mkdir(parents=True, exist_ok=True)
    for item in items:
        if is_tarball(item):
            target = work_dir / item.name
            if not target.exists():
                try:
                    target.symlink_to(item.resolve())
                except OSError:
                    shutil.copy2(item, target)
        elif is_repository(item):
            package_repository(item, work_dir / tarball_name(item))
        else:
            raise StoreError(f"{item} is neither a .tar.gz nor a model repository")
    return work_dir


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)
    return f"sha256:{sha.hexdigest()}"


def store_digests(store: Path) -> dict[str, str]:
    """``{TargetModel: digest}`` for every tarball in ``store`` (TargetModel = relative path)."""
    digests: dict[str, str] = {}
    for path in sorted(store.rglob("*")):
        if is_tarball(path):
            digests[path.relative_to(store).as_posix()] = file_digest(path)
    return digests
