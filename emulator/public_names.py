"""Triton's words about a TargetModel's models, in the names a client knows.

Inside, every model of a tarball is installed in one shared Triton repository as
``<model>--<key>`` (see ``emulator/manager/repository.py``), so Triton's messages name
``m--9605fbbea42a``, ``<cache dir>/.../triton-repo::ensemble--ae85...`` and files under the
emulator's cache folder. SageMaker's Triton registers each TargetModel as a repository of its own
and answers with the TargetModel as the entry model's name (as the emulator's responses do), so
a message that reaches a client says:

- the entry model as the TargetModel (``model 'm.tar.gz'``, its instances ``m.tar.gz_0_0``),
  every other model by its own folder name (``postprocess``);
- a model's files under ``/opt/ml/models/<key>/model/<model>/``, where SageMaker's Triton
  unpacks a TargetModel [U: SageMaker's hash is not this key];
- no ``<repository>::`` prefix (Triton's namespacing shows it; each repository is one tarball).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

SEPARATOR = "--"  # as emulator/manager/repository.py installs names


def public_text(text: str, triton_repository: Path, installed: Iterable[str],
                entry: str | None, target: str) -> str:
    """``text`` with the installed names and cache paths of one TargetModel made public."""
    repository = str(triton_repository)
    text = text.replace(f"{repository}::", "")
    for name in sorted(installed, key=len, reverse=True):  # longest first: no partial rewrite
        model, sep, key = name.rpartition(SEPARATOR)
        if not sep:
            continue
        text = text.replace(f"{repository}/{name}", f"/opt/ml/models/{key}/model/{model}")
        # Also a model instance's name (``<model>_0_0``, Triton's instance group and copy).
        text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?=_\d|(?![\w.-]))",
                      target if name == entry else model, text)
    return text.replace(repository, "/opt/ml/models")
