"""Images: which local image runs a production image URI, and getting it onto the engine.

A SageMaker model names ECR images this machine cannot pull. ``--image`` maps them to local
images, once per image (``--image URI=LOCAL``, repeatable); a plain ``--image LOCAL`` is the
Triton image for every Triton container without a mapping (the emulator's original flag).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from emulator.settings import parse_image_mappings
from emulator.supervision import LauncherError

if TYPE_CHECKING:
    from docker.client import DockerClient

log = logging.getLogger(__name__)


class PullProgress:
    """One progress line for a docker pull: a bar on a terminal, a log line every 10% otherwise."""

    def __init__(self, image: str, stream: Any = None) -> None:
        self.image = image
        self.stream = stream if stream is not None else sys.stderr
        self.layers: dict[str, tuple[int, int]] = {}
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_decile = -1

    def update(self, event: dict[str, Any]) -> None:
        detail = event.get("progressDetail") or {}
        layer = event.get("id")
        if layer and event.get("status") == "Downloading" and detail.get("total"):
            self.layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
        elif layer and event.get("status") in ("Download complete", "Pull complete",
                                               "Already exists"):
            _, total = self.layers.get(layer, (0, 0))
            self.layers[layer] = (total, total)
        self._render()

    def _render(self) -> None:
        done = sum(current for current, _ in self.layers.values())
        total = sum(total for _, total in self.layers.values())
        if not total:
            return
        fraction = min(done / total, 1.0)
        if self._tty:
            width = 30
            bar = "#" * int(fraction * width)
            self.stream.write(
                f"\rpulling {self.image} [{bar:<{width}}] {fraction:4.0%} "
                f"{done / 1e6:.0f}/{total / 1e6:.0f} MB"
            )
            self.stream.flush()
        elif int(fraction * 10) > self._last_decile:
            self._last_decile = int(fraction * 10)
            log.info("pulling %s: %.0f%% of %.0f MB", self.image, fraction * 100, total / 1e6)

    def close(self) -> None:
        if self._tty and self.layers:
            self.stream.write("\n")
            self.stream.flush()


def split_image(image: str) -> tuple[str, str]:
    # "host:5000/repo" has a ':' that is not a tag: only a ':' after the last '/' is.
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return image, "latest"
    return name, tag


def ensure_image(client: DockerClient, image: str, pull: bool = True) -> Any:
    """The image, pulled (with progress) when missing; LauncherError saying what to do."""
    import docker.errors

    with contextlib.suppress(docker.errors.ImageNotFound):
        return client.images.get(image)
    hint = (
        f"pull it where a registry is reachable (docker pull {image}; NGC images need "
        "`docker login nvcr.io`), or build the CPU test image with docker/build-test-image.sh "
        "and pass --image mme-triton-cpu:test"
    )
    if not pull:
        raise LauncherError(f"image {image} is not on this Docker engine: {hint}")
    repository, tag = split_image(image)
    progress = PullProgress(image)
    log.info("image %s not found locally; pulling it", image)
    try:
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise LauncherError(f"pulling {image} failed: {event['error']}; {hint}")
            progress.update(event)
        return client.images.get(image)
    except LauncherError:
        raise
    except Exception as exc:
        raise LauncherError(f"image {image} is missing and pulling it failed ({exc}); {hint}") \
            from exc
    finally:
        progress.close()




# Labels of the emulator's own test images (docker/build-test-image.sh).
IMAGE_KIND_LABEL = "com.sagemaker-mme-emulator.image"
SHIMS_DIR_LABEL = "com.sagemaker-mme-emulator.shims-dir"


def names_triton(image: str | None) -> bool:
    """Whether an image URI names a Triton image (SageMaker's ``sagemaker-tritonserver``,
    NGC's ``tritonserver``, the CPU test image ``mme-triton-cpu``): the repository part says so.

    A container without an Image is taken for Triton, as the emulator always did.
    """
    if not image:
        return True
    repository, _ = split_image(image)
    return "triton" in repository.rsplit("/", 1)[-1].lower()


def is_triton_image(production: str | None, local: str | None,
                    labels: dict[str, str] | None = None) -> bool:
    """Triton (run as ``tritonserver`` behind the emulator's model manager) or any other
    SageMaker inference container (run as ``docker run IMAGE serve``)."""
    labels = labels or {}
    if labels.get(SHIMS_DIR_LABEL) or labels.get(IMAGE_KIND_LABEL, "").startswith("triton"):
        return True
    if labels.get(IMAGE_KIND_LABEL):
        return False  # one of the emulator's other test images (e.g. the scikit-learn server)
    return names_triton(local) or (local is None and names_triton(production))


@dataclass(frozen=True)
class ImageMap:
    """Production image URI -> local image. ``resolve`` is the one place the choice is made."""

    mappings: dict[str, str] = field(default_factory=dict)
    triton_default: str | None = None

    @classmethod
    def parse(cls, values: str | Iterable[str] | None) -> ImageMap:
        """The ``--image`` flag's values (``settings.parse_image_mappings`` reads them)."""
        mappings, default = parse_image_mappings(values)
        return cls(mappings, default)

    def mapped(self, production: str | None) -> str | None:
        """The local image a mapping names for ``production``, if any."""
        if not production:
            return None
        if production in self.mappings:
            return self.mappings[production]
        repository, _ = split_image(production)
        return self.mappings.get(repository)

    def resolve(self, production: str | None) -> str | None:
        """The image to run: a mapping, else the Triton default for a Triton container, else
        the production image itself (run if this engine has it)."""
        mapped = self.mapped(production)
        if mapped is not None:
            return mapped
        if self.triton_default and names_triton(production):
            return self.triton_default
        return production

    def __bool__(self) -> bool:
        return bool(self.mappings or self.triton_default)
