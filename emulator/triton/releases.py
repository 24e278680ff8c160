"""SageMaker's Triton releases, and the embedded one: what a tarball is held against where it is
linted (``mme lint``) and where it is served (an EXECUTION_ENV_PATH environment).

Each row: the container release (SageMaker's ``sagemaker-tritonserver:<release>-py3`` and NVIDIA's
``nvcr.io/nvidia/tritonserver:<release>-py3`` are built from the same release), the Triton version,
the Python the Python backend's stub runs, Ubuntu with its glibc and libstdc++ (the newest
``GLIBCXX_`` version it defines), CUDA and TensorRT; an empty CUDA or TensorRT is a version no
source states (the table names none rather than a guess). Sources:

- which releases SageMaker publishes: AWS's deep-learning-containers ``available_images.md``
  ("NVIDIA Triton Inference Containers (SM support only)"; 25.04 from
  aws/deep-learning-containers#4849, 25.09 from #5398), its
  ``docs/src/data/sagemaker-tritonserver/<release>-gpu-sagemaker.yml`` (26.03: #6006), its
  ``release_images_inference.yml`` with the release tags ``v1.0-triton-<release>-py3`` (26.03:
  #5998, 26.04: #6168, 26.05: #6348), and the SageMaker Python SDK's
  ``image_uri_config/sagemaker-tritonserver.json`` (23.12 .. 24.09; 25.04 by
  sagemaker-python-sdk#5188, 25.09 by #5314, 26.05 by #5999 in ``sagemaker-core``);
- a release's Triton version: triton-inference-server/server ``build.py`` at tag ``v<triton>``
  (``DEFAULT_TRITON_VERSION_MAP``: ``release_version`` and ``triton_container_version``);
- Python and Ubuntu: the server's ``build.py`` builds on Ubuntu 24.04 from 2.52 (24.11) on, the
  deep-learning-containers release configuration says ``py312`` and ``ubuntu24.04`` for 25.04 ..
  26.05 (sagemaker-python-sdk#5999: "Python: 3.12, Ubuntu: 24.04" for 26.05), and the Release
  Compatibility Matrix of Triton's user guide (``introduction/compatibility.html``, its
  ``trtllm-python-py3`` and ``vllm-python-py3`` tables) gives Python 3.12.3 for every release
  from 24.12;
- CUDA and TensorRT: NVIDIA's Triton release notes (``rel-YY-MM``) and its Frameworks Support
  Matrix; 26.05's CUDA from sagemaker-python-sdk#5999 ("CUDA: 13.2.1.009") and the Release
  Compatibility Matrix's ``vllm-python-py3`` table; [U] 26.01's and 26.03's CUDA from that table
  alone (it gives the CUDA of the release notes for 26.02, 26.04 and 26.06);
- glibc and ``GLIBCXX_`` of the Ubuntu release: Ubuntu's ``libc6`` and ``libstdc++6`` packages
  (22.04: glibc 2.35, libstdc++ of GCC 12, GLIBCXX_3.4.30; 24.04: glibc 2.39, libstdc++ of GCC
  14, GLIBCXX_3.4.33);
- numpy 2 in the Python backend: Triton 2.51's and 2.52's release notes list it as a known issue;
  the backend's pybind11 update for numpy 2 is triton-inference-server/python_backend#384
  (merged 2024-10-18). [U] taken as working from 2.53 (24.12), the first release that no longer
  lists it; measured on a GPU: Triton 2.51 answers "output tensor shape does not match size of
  output" for every output when the stub runs numpy 2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    release: str  # the container release, e.g. "24.09"
    triton: str
    python: str  # major.minor of the Python backend's stub
    ubuntu: str
    glibc: int  # minor of GLIBC_2.N
    glibcxx: int  # patch of GLIBCXX_3.4.N, the newest the image's libstdc++ defines
    cuda: str  # "" where no source states it
    tensorrt: str  # "" where no source states it
    on_sagemaker: bool  # published as sagemaker-tritonserver:<release>-py3

    @property
    def numpy2(self) -> bool:
        """The Python backend's stub works with numpy 2 [U: from 2.53]."""
        return _version(self.triton) >= (2, 53)

    @property
    def trt(self) -> str:
        """TensorRT with its version ("TensorRT 10.4.0.26"), or where to read the version."""
        if self.tensorrt:
            return f"TensorRT {self.tensorrt}"
        return f"the TensorRT that NVIDIA's release notes rel-{self.release.replace('.', '-')} name"

    @property
    def stack(self) -> str:
        """TensorRT and CUDA as a sentence's end: "TensorRT 10.4.0.26 and CUDA 12.6.1"."""
        if self.cuda:
            return f"{self.trt} and CUDA {self.cuda}"
        return self.trt.replace("the TensorRT", "the TensorRT and CUDA")

    @property
    def image(self) -> str:
        kind = "sagemaker-tritonserver" if self.on_sagemaker else "nvcr.io/nvidia/tritonserver"
        return f"{kind}:{self.release}-py3"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _row(release: str, triton: str, cuda: str, tensorrt: str, on_sagemaker: bool,
         noble: bool = False) -> Release:
    if noble:  # Ubuntu 24.04
        return Release(release, triton, "3.12", "24.04", 39, 33, cuda, tensorrt, on_sagemaker)
    return Release(release, triton, "3.10", "22.04", 35, 30, cuda, tensorrt, on_sagemaker)


RELEASES: dict[str, Release] = {r.release: r for r in (
    _row("23.12", "2.41.0", "12.3.2", "8.6.1.6", on_sagemaker=True),
    _row("24.01", "2.42.0", "12.3.2", "8.6.1.6", on_sagemaker=True),
    _row("24.03", "2.44.0", "12.4.0", "8.6.3", on_sagemaker=True),
    _row("24.05", "2.46.0", "12.4.1", "10.0.1.6", on_sagemaker=True),
    _row("24.08", "2.49.0", "12.6.0", "10.3.0.26", on_sagemaker=False),
    _row("24.09", "2.50.0", "12.6.1", "10.4.0.26", on_sagemaker=True),
    _row("24.10", "2.51.0", "12.6.2", "10.5.0.18", on_sagemaker=False),
    _row("25.04", "2.57.0", "12.9.0", "", on_sagemaker=True, noble=True),
    _row("25.09", "2.61.0", "13.0.1", "10.13.3.9", on_sagemaker=True, noble=True),
    _row("25.10", "2.62.0", "13.0.2", "", on_sagemaker=False, noble=True),
    _row("25.11", "2.63.0", "", "", on_sagemaker=False, noble=True),
    _row("25.12", "2.64.0", "13.1.0", "", on_sagemaker=False, noble=True),
    _row("26.01", "2.65.0", "13.1.1", "", on_sagemaker=False, noble=True),
    _row("26.02", "2.66.0", "13.1.1", "", on_sagemaker=False, noble=True),
    _row("26.03", "2.67.0", "13.2.0", "", on_sagemaker=True, noble=True),
    _row("26.04", "2.68.0", "13.2.1", "", on_sagemaker=True, noble=True),
    _row("26.05", "2.69.0", "13.2.1", "", on_sagemaker=True, noble=True),
)}
# `mme deploy`'s default SageMaker Triton release (harness.deployment.DEFAULT_TRITON_VERSION).
DEFAULT_RELEASE = "24.09"
# The Triton the nvidia-pytriton wheel embeds (`mme serve`'s default launcher): Triton 2.51,
# whose container release is 24.10. It runs the Python backend's stub with this machine's Python
# and has the Python backend only (no TensorRT, ONNX Runtime or PyTorch backend).
EMBEDDED = RELEASES["24.10"]


class UnknownImage(ValueError):
    """An --image whose release the table does not hold."""


_TAG = re.compile(r"(?:^|[:/])(\d{2}\.\d{2})(?:-[\w.-]+)?$")


def release_of(image: str | None) -> Release:
    """The row of ``--image``: ``sagemaker-tritonserver:24.09-py3`` (any registry in front),
    ``nvcr.io/nvidia/tritonserver:24.09-py3`` or just ``24.09``; None: `mme deploy`'s default."""
    if not image:
        return RELEASES[DEFAULT_RELEASE]
    match = _TAG.search(image.strip())
    if match is None or match[1] not in RELEASES:
        raise UnknownImage(
            f"--image {image}: not a Triton release this table knows; one of "
            f"{', '.join(r.image for r in RELEASES.values())} (or just the release, e.g. "
            f"{DEFAULT_RELEASE})")
    return RELEASES[match[1]]


def served_release(image: str | None) -> Release:
    """The release a served endpoint's container image runs: the row its tag names (as
    ``release_of`` reads it), else `mme deploy`'s default."""
    try:
        return release_of(image)
    except UnknownImage:
        return RELEASES[DEFAULT_RELEASE]
