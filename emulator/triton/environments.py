"""A Python model's EXECUTION_ENV_PATH environment (a conda-pack tarball) against a SageMaker
Triton release: its Python, the GLIBC_ / GLIBCXX_ versions its shared objects name, its
libstdc++ and numpy. One implementation: ``mme lint`` names each problem as a finding, a served
load answers it as that release's Triton would.

The Python backend unpacks the environment and runs the image's stub with it (Triton's
python_backend README, "Using Custom Python Execution Environments"): the environment's Python
must be the stub's, its shared objects load against the image's glibc and libstdc++ (or the
environment's own libstdc++, which then must be new enough for the stub). numpy 2 loads, and the
Python backend of Triton before 2.53 then answers every output of every inference wrongly.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass, field
from typing import IO, Any

from emulator.triton.releases import Release

MODEL_DIR = "$$TRITON_MODEL_DIRECTORY"
_GLIBCXX = re.compile(rb"GLIBCXX_3\.4\.(\d+)")
_GLIBC = re.compile(rb"GLIBC_2\.(\d+)")
_PYTHON_DIR = re.compile(r"^lib/python(3\.\d+)/")
_NUMPY = re.compile(r"^(?:lib/python3\.\d+/site-packages/numpy-(\d+)\.[^/]*\.dist-info/|"
                    r"conda-meta/numpy-(\d+)\.[^/]*\.json$)")
_SHARED = re.compile(r"\.so(\.\d+)*$")
# Triton's HTTP frontend, for an output whose bytes do not match its shape (WriteDataToJsonCheck,
# an internal error: 500); what a stub running numpy 2 makes of every output before Triton 2.53.
NUMPY2_ANSWER = "output tensor shape does not match size of output for '{output}'"
NUMPY2_STATUS = 500


@dataclass
class EnvFacts:
    pythons: set[str] = field(default_factory=set)
    numpy: str | None = None
    needs_glibcxx: tuple[int, str] = (0, "")  # newest GLIBCXX_3.4.N named, and by which file
    needs_glibc: tuple[int, str] = (0, "")
    own_libstdcxx: int | None = None  # newest GLIBCXX_ the environment's libstdc++ defines


@dataclass(frozen=True)
class Problem:
    """What one release's Triton makes of an environment."""

    kind: str  # "python", "glibcxx", "glibc" (the load fails), "numpy2" (every output fails)
    detail: str  # what is wrong, naming the environment (``member``) and the image
    triton_says: str  # the release's Triton's words ("" for numpy2: NUMPY2_ANSWER, per output)
    fix: str

    @property
    def fails_load(self) -> bool:
        return self.kind != "numpy2"


def env_path(config: Any) -> str | None:
    """A model config's EXECUTION_ENV_PATH, if it sets one."""
    parameter = config.parameters.get("EXECUTION_ENV_PATH")
    return str(parameter.string_value) if parameter is not None else None


def in_model_folder(path: str) -> str | None:
    """The environment's path inside the model folder, or None for one outside it (not the
    tarball's to check)."""
    if not path.startswith(MODEL_DIR):
        return None
    return path.removeprefix(MODEL_DIR).lstrip("/")


def scan(stream: IO[bytes]) -> EnvFacts:
    """Read an environment tarball once; raises tarfile.TarError, OSError or EOFError."""
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


def judge(member: str, facts: EnvFacts, release: Release) -> list[Problem]:
    """What ``release``'s Triton makes of the environment ``member`` (as its tarball names it)."""
    found = []
    image = release.image
    if facts.pythons and release.python not in facts.pythons:
        packed = ", ".join(sorted(facts.pythons))
        found.append(Problem(
            "python", f"{member} is packed for Python {packed}; {image}'s Python backend runs "
            f"Python {release.python}",
            f"Failed to initialize Python stub: the environment is packed for Python {packed}, "
            f"the stub runs Python {release.python}",
            f"pack the environment with Python {release.python} (a conda environment made with "
            f"python={release.python}, then conda-pack)"))
    needed, by = facts.needs_glibcxx
    own = facts.own_libstdcxx
    if own is not None and own < release.glibcxx:
        found.append(Problem(
            "glibcxx", f"{member} ships a libstdc++ with GLIBCXX_3.4.{own} at most; {image}'s "
            f"stub needs GLIBCXX_3.4.{release.glibcxx} (\"GLIBCXX_3.4.{release.glibcxx} not "
            "found\")",
            f"version `GLIBCXX_3.4.{release.glibcxx}' not found (required by the Python stub; "
            f"the environment's libstdc++ defines GLIBCXX_3.4.{own} at most)",
            "leave libstdc++ out of the environment (the image's is new enough) or pack one of "
            f"GCC 12 or newer (GLIBCXX_3.4.{release.glibcxx})"))
    elif needed > max(own or 0, release.glibcxx):
        found.append(Problem(
            "glibcxx", f"{member}!{by} needs GLIBCXX_3.4.{needed}; {image} (Ubuntu "
            f"{release.ubuntu}) has GLIBCXX_3.4.{release.glibcxx} at most"
            + (f", the environment's libstdc++ GLIBCXX_3.4.{own}" if own else ""),
            f"version `GLIBCXX_3.4.{needed}' not found (required by {by})",
            f"build {by.rsplit('/', 1)[-1]} with a compiler whose libstdc++ is no newer than "
            f"GLIBCXX_3.4.{release.glibcxx} (Ubuntu {release.ubuntu}'s), or pack a libstdc++ "
            f"that defines GLIBCXX_3.4.{needed} into the environment"))
    needed, by = facts.needs_glibc
    if needed > release.glibc:
        found.append(Problem(
            "glibc", f"{member}!{by} needs GLIBC_2.{needed}; {image} (Ubuntu {release.ubuntu}) "
            f"has glibc 2.{release.glibc}",
            f"version `GLIBC_2.{needed}' not found (required by {by})",
            f"build {by.rsplit('/', 1)[-1]} on glibc 2.{release.glibc} or older (Ubuntu "
            f"{release.ubuntu}, or a manylinux wheel of glibc 2.{release.glibc} or older)"))
    if facts.numpy is not None and int(facts.numpy) >= 2 and not release.numpy2:
        found.append(Problem(
            "numpy2", f"{member} holds numpy {facts.numpy}.x; the Python backend of {image} "
            f"(Triton {release.triton}) cannot take numpy 2", "",
            "pack the environment with numpy<2"))
    return found
