"""The seeds' DALI preprocessing: decode, resize to 299x299, crop-mirror-normalize (HWC float).

The seeds decode with ``device="mixed"`` (nvJPEG on the GPU); ``device="cpu"`` gives the same
pipeline for CPU-only hosts such as the embedded launcher, and is the default here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from nvidia.dali.data_node import DataNode
    from nvidia.dali.pipeline import Pipeline

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
INPUT_NAME = "DALI_INPUT_0"
SIZE = 299


def define(batch_size: int, num_threads: int, decode_device: str = "cpu") -> Pipeline:
    from nvidia.dali import fn
    from nvidia.dali.pipeline import pipeline_def
    from nvidia.dali.types import DALIDataType, DALIImageType

    @pipeline_def
    def preprocess() -> DataNode:
        encoded = fn.external_source(device="cpu", name=INPUT_NAME)
        decoded = fn.decoders.image(encoded, device=decode_device, output_type=DALIImageType.RGB)
        # resize's stub also allows a tuple (save_attrs=True) or None; here it is one node
        resized = cast("DataNode", fn.resize(decoded, resize_x=SIZE, resize_y=SIZE))
        return fn.crop_mirror_normalize(
            resized, dtype=DALIDataType.FLOAT, output_layout="HWC", crop=(SIZE, SIZE),
            mean=MEAN, std=STD,
        )

    # The pipeline's parameters go to the call, which the stub leaves open: pipeline_def's own
    # stub types device_id as int, while Pipeline takes its default None (no device chosen) too.
    return preprocess(batch_size=batch_size, num_threads=num_threads,
                      device_id=0 if decode_device == "mixed" else None)


def serialize(target: Path, batch_size: int, num_threads: int,
              decode_device: str = "cpu") -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    define(batch_size, num_threads, decode_device).serialize(filename=str(target))
    return target


def run_reference(images: list[bytes], num_threads: int = 2) -> npt.NDArray[np.float32]:
    """Run the same pipeline in-process (CPU): the reference the ensemble is checked against."""
    import numpy as np

    pipe = define(batch_size=max(len(images), 1), num_threads=num_threads)
    pipe.build()
    pipe.feed_input(INPUT_NAME, [np.frombuffer(image, dtype=np.uint8) for image in images])
    (out,) = pipe.run()
    # A CPU pipeline: as_cpu() is the list itself (the stub's run() may also give a GPU list).
    array: npt.NDArray[np.float32] = out.as_cpu().as_array()
    return array
