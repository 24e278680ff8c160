"""``mme serve --model-data FOLDER`` (and ``mme ci up``, which runs it) on a store that holds
model folders: they are served packaged, by the one rule the pytest plugin follows
(``harness.model_store.prepare_store``): a model folder or model repository ``NAME/`` is the
TargetModel ``NAME.tar.gz``, tarballs keep their paths. SageMaker serves only tarballs from its
S3 prefix; a folder left as it is would fail every call ("Failed to download model data").

The packaged store lives in a temporary folder for as long as the server runs; the start says
what was packaged, and a folder SageMaker's Triton would refuse stops the start with why.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from emulator.settings import Settings
from mme.store_twin import StoreTwin


class StoreMistake(ValueError):
    """A store whose model folders cannot be served: one line saying what to fix."""


def _local_folder(model_data: str | None) -> Path | None:
    if not model_data or "://" in model_data:
        return None
    folder = Path(model_data).expanduser()
    return folder if folder.is_dir() else None


def model_folders(folder: Path) -> list[Path]:
    """The model folders under ``folder`` (each with a config.pbtxt), outermost first."""
    found: list[Path] = []
    for config in sorted(folder.rglob("config.pbtxt")):
        if not any(parent in found for parent in config.parents):
            found.append(config.parent)
    return found


@contextmanager
def served_store(settings: Settings, stderr: TextIO) -> Iterator[Settings]:
    """``settings`` as given, or with ``model_data`` the packaged twin of a store that holds
    model folders (removed when the server stops); with ``--watch``, the twin of any folder
    store, kept in step with it while the server runs (``StoreTwin``)."""
    from harness.model_store import StoreError, is_tarball, prepare_store

    folder = _local_folder(settings.model_data)
    if folder is not None and settings.watch:
        with tempfile.TemporaryDirectory(prefix="mme-store-") as tmp:
            twin = StoreTwin(folder, Path(tmp) / "store")
            try:
                packaged = twin.build()
            except StoreError as exc:
                raise StoreMistake(f"--model-data {settings.model_data}: {exc}") from None
            if packaged:
                print(f"mme serve: --model-data {settings.model_data}: model folders served "
                      f"packaged, each NAME/ as the TargetModel NAME.tar.gz: "
                      f"{', '.join(packaged)}", file=stderr, flush=True)
            with twin.following(settings.watch_interval_s):
                yield settings.model_copy(update={"model_data": str(twin.twin)})
        return
    if folder is None or not model_folders(folder):
        yield settings
        return
    with tempfile.TemporaryDirectory(prefix="mme-store-") as tmp:
        try:
            store = prepare_store(folder, Path(tmp) / "store")
        except StoreError as exc:
            raise StoreMistake(f"--model-data {settings.model_data}: {exc}") from None
        packaged = sorted(p.relative_to(store).as_posix() for p in store.rglob("*")
                          if is_tarball(p) and not p.is_symlink())
        print(f"mme serve: --model-data {settings.model_data} holds model folders; served "
              f"packaged, each NAME/ as the TargetModel NAME.tar.gz: {', '.join(packaged)} "
              f"(`mme package {folder}/NAME -o NAME.tar.gz` makes the object to upload to S3)",
              file=stderr, flush=True)
        yield settings.model_copy(update={"model_data": str(store)})
