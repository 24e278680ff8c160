"""A Python model's EXECUTION_ENV_PATH environment (a conda-pack tarball) against the image: its
Python, the GLIBC_ / GLIBCXX_ versions its shared objects name, its libstdc++ and numpy.

The Python backend unpacks the environment and runs the image's stub with it (Triton's
python_backend README, "Using Custom Python Execution Environments"): the environment's Python
must be the stub's, its shared objects load against the image's glibc and libstdc++ (or the
environment's own libstdc++, which then must be new enough for the stub).
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass, field
from typing import IO, Any

from harness.lint.findings import RULES, Finding
from harness.lint.releases import Release
from harness.lint.source import CONFIG, Source

_MODEL_DIR = "$$TRITON_MODEL_DIRECTORY"
_GLIBCXX = re.compile(rb"GLIBCXX_3\.4\.(\d+)")
_GLIBC = re.compile(rb"GLIBC_2\.(\d+)")
_PYTHON_DIR = re.compile(r"^lib/python(3\.\d+)/")
_NUMPY = re.compile(r"^(?:lib/python3\.\d+/site-packages/numpy-(\d+)\.[^/]*\.dist-info/|"
                    r"conda-meta/numpy-(\d+)\.[^/]*\.json$)")
_SHARED = re.compile(r"\.so(\.\d+)*$")


@dataclass
class EnvFacts:
    pythons: set[str] = field(default_factory=set)
    numpy: str | None = None
    needs_glibcxx: tuple[int, str] = (0, "")  # newest GLIBCXX_3.4.N named, and by which file
    needs_glibc: tuple[int, str] = (0, "")
    own_libstdcxx: int | None = None  # newest GLIBCXX_ the environment's libstdc++ defines


def env_path(config: Any) -> str | None:
    parameter = config.parameters.get("EXECUTION_ENV_PATH")
    return str(parameter.string_value) if parameter is not None else None


def scan(stream: IO[bytes]) -> EnvFacts:
    facts = EnvFacts()
    with tarfile.open(fileobj=stream, mode="r|gz") as tar:
        for info in tar:
            name = info.name.removeprefix("./")
            python = _PYTHON_DIR.match(name)
            if python:
                facts.pythons.add(python[1])
            numpy = _NUMPY.match(name)
            if numpy:
                major = int(numpy[1] or numpy[2])
                facts.numpy = str(max(major, int(facts.numpy or 0)))
            if not (info.isfile() and _SHARED.search(name)):
                continue
            handle = tar.extractfile(info)
            if handle is None:
                continue
            data = handle.read()
            cxx = max((int(m) for m in _GLIBCXX.findall(data)), default=0)
            if name.rsplit("/", 1)[-1].startswith("libstdc++.so"):
                facts.own_libstdcxx = max(facts.own_libstdcxx or 0, cxx)
                continue
            if cxx > facts.needs_glibcxx[0]:
                facts.needs_glibcxx = (cxx, name)
            libc = max((int(m) for m in _GLIBC.findall(data)), default=0)
            if libc > facts.needs_glibc[0]:
                facts.needs_glibc = (libc, name)
    return facts


def check(source: Source, configs: dict[str, Any], release: Release) -> list[Finding]:
    found: list[Finding] = []
    for folder, config in configs.items():
        path = env_path(config)
        if not path:
            continue
        files = source.models[folder]
        config_file = files.path(CONFIG)
        if not path.startswith(_MODEL_DIR):
            continue  # outside the tarball: not this tarball's to check
        relative = path.removeprefix(_MODEL_DIR).lstrip("/")
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
            found += _judge(source.label, member, facts, release)
    return found


def _line(text: str) -> int | None:
    at = text.find("EXECUTION_ENV_PATH")
    return text.count("\n", 0, at) + 1 if at >= 0 else None


def _judge(label: str, member: str, facts: EnvFacts, release: Release) -> list[Finding]:
    found = []
    image = release.image
    if facts.pythons and release.python not in facts.pythons:
        found.append(Finding(RULES["MME302"], (
            f"{label}: {member} is packed for Python {', '.join(sorted(facts.pythons))}; "
            f"{image}'s Python backend runs Python {release.python}"), label, member))
    needed, by = facts.needs_glibcxx
    own = facts.own_libstdcxx
    if own is not None and own < release.glibcxx:
        found.append(Finding(RULES["MME303"], (
            f"{label}: {member} ships a libstdc++ with GLIBCXX_3.4.{own} at most; {image}'s "
            f"stub needs GLIBCXX_3.4.{release.glibcxx} (\"GLIBCXX_3.4.{release.glibcxx} not "
            "found\")"), label, member))
    elif needed > max(own or 0, release.glibcxx):
        found.append(Finding(RULES["MME303"], (
            f"{label}: {member}!{by} needs GLIBCXX_3.4.{needed}; {image} (Ubuntu "
            f"{release.ubuntu}) has GLIBCXX_3.4.{release.glibcxx} at most"
            + (f", the environment's libstdc++ GLIBCXX_3.4.{own}" if own else "")),
            label, member))
    needed, by = facts.needs_glibc
    if needed > release.glibc:
        found.append(Finding(RULES["MME304"], (
            f"{label}: {member}!{by} needs GLIBC_2.{needed}; {image} (Ubuntu {release.ubuntu}) "
            f"has glibc 2.{release.glibc}"), label, member))
    if facts.numpy is not None and int(facts.numpy) >= 2 and not release.numpy2:
        found.append(Finding(RULES["MME305"], (
            f"{label}: {member} holds numpy {facts.numpy}.x; the Python backend of {image} "
            f"(Triton {release.triton}) cannot take numpy 2"), label, member))
    return found
