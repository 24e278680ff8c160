"""Model stores for tests: a folder of ``.tar.gz`` objects, as SageMaker reads from S3.

What a store is given as (``prepare_store``), each thing naming its TargetModels:

- ``NAME.tar.gz``: the TargetModel ``NAME.tar.gz``, as it is;
- a model folder ``NAME/`` (``NAME/config.pbtxt``): ``NAME.tar.gz``, the folder at its root;
- a model repository ``NAME/`` with an ensemble (``NAME/<model>/config.pbtxt``, one of them
  ``platform: "ensemble"``): ``NAME.tar.gz``, the model folders at its root (the ensemble
  needs its steps in the same tarball);
- any other folder, e.g. ``models/``, is a store like an S3 prefix: its tarballs (at any depth)
  keep their paths, and each model folder or model repository in it is packaged as above
  (``models/add/config.pbtxt`` and ``models/add/add/config.pbtxt`` both give ``add.tar.gz``).

Packaging uses the project's one packager, which is deterministic, so a tarball's digest changes
only when its content does: golden snapshots record that digest to tell a stale snapshot from a
regression.
"""

from __future__ import annotations

import hashlib
import re
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


_ENSEMBLE = re.compile(r'^\s*platform\s*:\s*"ensemble"', re.MULTILINE)


def holds_ensemble(repository: Path) -> bool:
    """A model folder of ``repository`` is an ensemble: its models belong in one tarball."""
    for config in repository.glob("*/config.pbtxt"):
        try:
            if _ENSEMBLE.search(config.read_text(errors="replace")):
                return True
        except OSError:
            continue
    return False


def prepare_store(spec: str | Path | Sequence[str | Path], work_dir: Path) -> Path:
    """Turn a store specification (see the module docstring) into a folder of tarballs.

    A folder that holds tarballs and nothing to package is used as it is; otherwise tarballs are
    linked (or copied) and model folders and repositories packaged into ``work_dir``.
    """
    items = [Path(spec)] if isinstance(spec, (str, Path)) else [Path(p) for p in spec]
    if not items:
        raise StoreError("an empty model store")
    for item in items:
        if not item.exists():
            raise StoreError(f"{item} does not exist (a model store is a folder of .tar.gz, "
                             "model folders or model repositories, or one of those)")
    if len(items) == 1 and _only_tarballs(items[0]):
        return items[0]
    entries: dict[str, Path] = {}  # TargetModel -> the tarball or folder it comes from
    for item in items:
        _collect(item, Path(), entries, top=True)
    if not entries:
        raise StoreError(
            f"{', '.join(map(str, items))}: nothing to serve. A store holds NAME.tar.gz files, "
            "model folders (NAME/config.pbtxt) or model repositories "
            "(NAME/<model>/config.pbtxt); each becomes the TargetModel NAME.tar.gz")
    from harness.package_checks import PackageProblem, check_folder

    for target, source in entries.items():  # what SageMaker's Triton would refuse, said now
        if not is_tarball(source):
            try:
                check_folder(source, "folder" if is_model_dir(source) else "flat")
            except PackageProblem as exc:
                raise StoreError(f"{target}: {exc}") from None
    work_dir.mkdir(parents=True, exist_ok=True)
    for target, source in entries.items():
        destination = work_dir / target
        destination.parent.mkdir(parents=True, exist_ok=True)
        if is_tarball(source):
            if not destination.exists():
                try:
                    destination.symlink_to(source.resolve())
                except OSError:
                    shutil.copy2(source, destination)
        elif is_model_dir(source):
            package(source, destination, layout="folder")
        else:
            package_repository(source, destination)
    return work_dir


def store_entries(item: Path) -> dict[str, Path]:
    """``{TargetModel: the tarball or folder it comes from}`` of a store (see the module
    docstring), nothing packaged or checked."""
    entries: dict[str, Path] = {}
    _collect(Path(item), Path(), entries, top=True)
    return entries


def _only_tarballs(folder: Path) -> bool:
    """A folder to serve as it is: tarballs, and no model folder anywhere to package."""
    return (folder.is_dir() and any(is_tarball(p) for p in folder.rglob("*"))
            and not any(p.name == "config.pbtxt" for p in folder.rglob("*")))


def _collect(item: Path, under: Path, entries: dict[str, Path], top: bool = False) -> None:
    """Add the TargetModels ``item`` names (``under``: its path within the store)."""
    def add(name: str, source: Path) -> None:
        target = (under / name).as_posix()
        if target in entries:
            raise StoreError(f"two things would be the TargetModel {target}: "
                             f"{entries[target]} and {source}")
        entries[target] = source

    if is_tarball(item):
        add(item.name, item)
    elif is_model_dir(item) or (is_repository(item) and (holds_ensemble(item) or not top)):
        add(tarball_name(item), item)
    elif item.is_dir():  # a store folder (the top one: its model folders are TargetModels)
        for child in sorted(item.iterdir()):
            if child.name.startswith("."):
                continue
            _collect(child, under if top else under / item.name, entries)
    elif top:
        raise StoreError(f"{item} is neither a .tar.gz, a folder of them, a model folder nor "
                         "a model repository")


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
