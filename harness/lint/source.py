"""A tarball or a model repository read once into what the rules look at: the model folders,
their configs, version folders, Python files and the other files' names. Nested tarballs (an
EXECUTION_ENV_PATH environment) are only named here; ``open_member`` streams one when a rule
needs it."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

CONFIG = "config.pbtxt"
_TEXT_LIMIT = 1 << 20  # Python files read for BLS calls: at most 1 MiB each


class Unreadable(ValueError):
    """The source cannot be read (exit 2)."""


@dataclass
class ModelFiles:
    """One model folder: ``prefix`` is its path in the source ("" for a config at the root)."""

    prefix: str
    config_text: str
    subfolders: set[str] = field(default_factory=set)  # every direct sub-folder's name
    files: set[str] = field(default_factory=set)  # paths relative to the model folder
    python: dict[str, str] = field(default_factory=dict)  # relative path -> text

    @property
    def versions(self) -> set[str]:
        """The version folders Triton loads: numerically named, not starting with 0."""
        return {name for name in self.subfolders if name.isdigit() and not name.startswith("0")}

    def path(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative


@dataclass
class Source:
    path: Path  # the tarball or folder
    label: str  # as findings name it
    models: dict[str, ModelFiles]
    layout: str  # "flat" (folders at the root), "folder" (under one top folder), "root", "deep"
    deep_tops: list[str] = field(default_factory=list)  # layout "deep": the top folders

    @property
    def is_tarball(self) -> bool:
        return self.path.is_file()

    @contextmanager
    def open_member(self, member: str) -> Iterator[IO[bytes] | None]:
        """A file of the source as a stream (None when it is not there)."""
        if not self.is_tarball:
            target = self.path / member
            if not target.is_file():
                yield None
                return
            with open(target, "rb") as handle:
                yield handle
            return
        with tarfile.open(self.path, "r|gz") as tar:
            for info in tar:
                if _clean(info.name) == PurePosixPath(member) and info.isfile():
                    yield tar.extractfile(info)
                    return
        yield None


def _clean(name: str) -> PurePosixPath:
    return PurePosixPath(*[p for p in PurePosixPath(name).parts if p not in (".", "/")])


def read(path: Path, label: str | None = None) -> Source:
    path = Path(path)
    label = label or str(path)
    if path.is_file():
        return _read_tarball(path, label)
    if path.is_dir():
        return _read_folder(path, label)
    raise Unreadable(f"{path}: no such file or folder")


def _read_tarball(path: Path, label: str) -> Source:
    entries: dict[PurePosixPath, bool] = {}  # path -> is a folder
    texts: dict[PurePosixPath, str] = {}
    try:
        with tarfile.open(path, "r|gz") as tar:
            for info in tar:
                name = _clean(info.name)
                if not name.parts:
                    continue
                entries[name] = info.isdir()
                wanted = name.name == CONFIG or (name.suffix == ".py" and info.size <= _TEXT_LIMIT)
                if wanted and info.isfile():
                    handle = tar.extractfile(info)
                    if handle is not None:
                        texts[name] = handle.read().decode(errors="replace")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise Unreadable(f"{path.name} is not a readable .tar.gz: {exc}") from None
    return _assemble(path, label, entries, texts)


def _read_folder(path: Path, label: str) -> Source:
    entries: dict[PurePosixPath, bool] = {}
    texts: dict[PurePosixPath, str] = {}
    single = (path / CONFIG).is_file()  # a lone model folder: itself at the root
    base = path.parent if single else path
    try:
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            relative = PurePosixPath(Path(root).relative_to(base).as_posix())
            for name in dirs:
                entries[_clean(str(relative / name))] = True
            for name in files:
                member = _clean(str(relative / name))
                entries[member] = False
                full = Path(root) / name
                if name == CONFIG or (name.endswith(".py") and
                                      full.stat().st_size <= _TEXT_LIMIT):
                    texts[member] = full.read_text(errors="replace")
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc}") from None
    source = _assemble(base if single else path, label, entries, texts)
    source.path = path.parent if single else path
    return source


def _assemble(path: Path, label: str, entries: dict[PurePosixPath, bool],
              texts: dict[PurePosixPath, str]) -> Source:
    configs = {p for p in texts if p.name == CONFIG}
    if PurePosixPath(CONFIG) in configs:  # a single model at the root
        return Source(path, label, {path.name.split(".")[0]: _model(
            PurePosixPath(), entries, texts)}, "root")
    at_root = sorted(p.parent for p in configs if len(p.parts) == 2)
    deeper = sorted(p.parent for p in configs if len(p.parts) == 3)
    if not at_root and deeper:
        tops = sorted({p.parts[0] for p in deeper})
        if len(deeper) > 1:
            return Source(path, label, {}, "deep", tops)
        folder = deeper[0]
        return Source(path, label, {folder.name: _model(folder, entries, texts)}, "folder")
    models = {folder.name: _model(folder, entries, texts) for folder in at_root}
    return Source(path, label, models, "flat")


def _model(folder: PurePosixPath, entries: dict[PurePosixPath, bool],
           texts: dict[PurePosixPath, str]) -> ModelFiles:
    depth = len(folder.parts)
    model = ModelFiles(folder.as_posix() if depth else "", texts[folder / CONFIG])
    for member, is_dir in entries.items():
        if member.parts[:depth] != folder.parts or len(member.parts) <= depth:
            continue
        inner = PurePosixPath(*member.parts[depth:])
        if len(inner.parts) > 1 or is_dir:
            model.subfolders.add(inner.parts[0])
        if not is_dir:
            model.files.add(inner.as_posix())
            if member.suffix == ".py" and member in texts:
                model.python[inner.as_posix()] = texts[member]
    return model
