"""Model data versions: each deployment's tarballs live under a folder (an S3 prefix) of their own.

A multi-model endpoint's ``ModelDataUrl`` is a prefix and ``TargetModel`` a path under it, so a
version is a whole prefix: ``<store>/<endpoint>-<digest>/`` where the digest is that of the
tarballs in it (their TargetModels and contents). Bytes a config references are never
overwritten: a new version goes to a new prefix, and an old config (after a rollback, a new
instance, an eviction, a restart) still reads its own. The deployer deletes a version only once
no model it made for the endpoint references it any more.

The store is either a local folder (the emulator reads ``file://`` URLs) or an S3 bucket and
prefix; ``ModelStore`` turns a version into its URL and a URL back into one of an endpoint's
versions in this store (None for anything else, which is never deleted).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import ParseResult, unquote, urlparse

DIGEST_DIGITS = 12


def resource_base(endpoint_name: str) -> str:
    """What the names the deployer makes for an endpoint start with (its models, configs,
    versions): room is left for ``-<8 hex digits>`` within SageMaker's 63 characters."""
    return endpoint_name[:54].rstrip("-")


def version_name(endpoint_name: str, contents: Iterable[tuple[str, str]]) -> str:
    """The version folder of these (TargetModel, sha256) pairs for this endpoint."""
    digest = hashlib.sha256(json.dumps(sorted(contents)).encode()).hexdigest()
    return f"{resource_base(endpoint_name)}-{digest[:DIGEST_DIGITS]}"


def is_version_of(endpoint_name: str, name: str) -> bool:
    pattern = re.escape(resource_base(endpoint_name)) + f"-[0-9a-f]{{{DIGEST_DIGITS}}}"
    return re.fullmatch(pattern, name) is not None


@dataclass(frozen=True)
class ModelStore:
    """Where an endpoint's versions live: ``folder`` (local) or ``bucket`` + ``prefix``."""

    folder: Path | None = None
    bucket: str | None = None
    prefix: str = ""  # "" or "a/b/" (S3 only)

    def url(self, version: str) -> str:
        if self.folder is not None:
            return (self.folder / version).as_uri() + "/"
        return f"s3://{self.bucket}/{self.prefix}{version}/"

    def key(self, version: str) -> str:
        """The S3 prefix of a version (with its slash)."""
        return f"{self.prefix}{version}/"

    def _parsed(self, url: str | None) -> ParseResult | None:
        """``url`` parsed when it names a place of this kind of store (a ``file://`` URL for a
        folder, an ``s3://`` URL of this bucket), else None."""
        if not url:
            return None
        parsed = urlparse(url)
        if self.folder is not None:
            return parsed if parsed.scheme == "file" else None
        return parsed if parsed.scheme == "s3" and parsed.netloc == self.bucket else None

    def within(self, url: str | None) -> ModelStore | None:
        """The store (this one or one under it) whose folder or prefix holds what ``url``
        names, or None when it is not in this store."""
        parsed = self._parsed(url)
        if parsed is None:
            return None
        if self.folder is not None:
            parent = Path(unquote(parsed.path)).parent.resolve()
            root = self.folder.resolve()
            return ModelStore(folder=parent) if parent.is_relative_to(root) else None
        key = parsed.path.lstrip("/").rstrip("/")
        if not key.startswith(self.prefix) or key == self.prefix.rstrip("/"):
            return None
        holder = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
        return ModelStore(bucket=self.bucket, prefix=holder)

    def version_at(self, url: str | None, endpoint_name: str) -> str | None:
        """The version of ``endpoint_name`` that ``url`` (a ModelDataUrl) names in this store,
        or None when it names anything else."""
        parsed = self._parsed(url)
        if parsed is None:
            return None
        if self.folder is not None:
            path = Path(unquote(parsed.path))
            parent, name = path.parent, path.name
            if parent.resolve() != self.folder.resolve():
                return None
        else:
            key = parsed.path.lstrip("/").rstrip("/")
            if not key.startswith(self.prefix):
                return None
            name = key[len(self.prefix):]
        return name if is_version_of(endpoint_name, name) else None
