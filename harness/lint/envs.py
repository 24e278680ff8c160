"""A Python model's EXECUTION_ENV_PATH environment (a conda-pack tarball) against the image, as
findings. The check itself is ``emulator.triton.environments`` (a served load makes it too)."""

from __future__ import annotations

import tarfile
from typing import Any

from emulator.triton.environments import env_path, in_model_folder, judge, scan
from emulator.triton.releases import Release
from harness.lint.findings import RULES, Finding
from harness.lint.source import CONFIG, Source

_RULE = {"python": "MME302", "glibcxx": "MME303", "glibc": "MME304", "numpy2": "MME305"}


def check(source: Source, configs: dict[str, Any], release: Release) -> list[Finding]:
    found: list[Finding] = []
    for folder, config in configs.items():
        path = env_path(config)
        if not path:
            continue
        relative = in_model_folder(path)
        if relative is None:
            continue  # outside the tarball: not this tarball's to check
        files = source.models[folder]
        config_file = files.path(CONFIG)
        if relative not in files.files:
            found.append(Finding(RULES["MME301"], (
                f"{source.label}: model '{folder}' sets EXECUTION_ENV_PATH {path}, and "
                f"{files.path(relative)} is not in the tarball"), source.label, config_file,
                _line(files.config_text)))
            continue
        member = files.path(relative)
        try:
            with source.open_member(member) as stream:
                facts = scan(stream) if stream is not None else None
        except (tarfile.TarError, OSError, EOFError) as exc:
            found.append(Finding(RULES["MME306"], f"{source.label}: {member}: {exc}",
                                 source.label, member))
            continue
        if facts is not None:
            found += [Finding(RULES[_RULE[p.kind]], f"{source.label}: {p.detail}", source.label,
                              member) for p in judge(member, facts, release)]
    return found


def _line(text: str) -> int | None:
    at = text.find("EXECUTION_ENV_PATH")
    return text.count("\n", 0, at) + 1 if at >= 0 else None
