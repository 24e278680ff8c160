"""What the embedded Triton does differently from the SageMaker Triton release targeted, as
``mme lint`` and ``mme serve`` say it. The release table itself is ``emulator.triton.releases``
(the emulator holds a served tarball against it too)."""

from __future__ import annotations

import sys

from emulator.triton.releases import (
    DEFAULT_RELEASE,
    EMBEDDED,
    RELEASES,
    Release,
    UnknownImage,
    release_of,
)


def skew(target: Release) -> list[str]:
    """What the embedded Triton does differently from ``target``, as documented (one line each);
    empty when nothing documented differs."""
    local = f"{sys.version_info.major}.{sys.version_info.minor}"
    lines = []
    if target.release != EMBEDDED.release:
        lines.append(f"Triton {EMBEDDED.triton} here, {target.triton} in {target.image}: "
                     "features and fixes of the releases between them differ (NVIDIA's release "
                     "notes)")
    if local != target.python:
        lines.append(f"Python models run with Python {local} here (this machine's), Python "
                     f"{target.python} in {target.image}: an EXECUTION_ENV_PATH environment must "
                     f"be packed for {target.python}")
    if EMBEDDED.numpy2 != target.numpy2:
        lines.append("numpy 2 in a Python model's environment: "
                     f"{'works' if target.numpy2 else 'fails'} in {target.image}, "
                     f"{'works' if EMBEDDED.numpy2 else 'fails'} here")
    lines.append(f"TensorRT plans do not load here (the embedded Triton has the Python backend "
                 f"only); {target.image} has {target.stack}")
    if target.ubuntu != EMBEDDED.ubuntu:
        lines.append(f"glibc 2.{target.glibc} and GLIBCXX_3.4.{target.glibcxx} in "
                     f"{target.image} (Ubuntu {target.ubuntu}): shared objects in an environment "
                     "are checked against those by `mme lint`")
    return lines


def embedded_notice(images: list[str]) -> str:
    """What `mme serve` says once with the embedded Triton: its release and what differs from
    the release targeted (the first of ``images`` this table knows, else `mme deploy`'s)."""
    target = RELEASES[DEFAULT_RELEASE]
    for image in images:
        try:
            target = release_of(image.split("=")[0])
            break
        except UnknownImage:
            continue
    lines = skew(target)
    head = (f"the embedded Triton is {EMBEDDED.triton} (container release {EMBEDDED.release}); "
            f"compared with {target.image} (`--launcher docker --image` runs that release):")
    return "\n".join([head, *(f"  - {line}" for line in lines)])
