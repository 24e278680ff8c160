"""The seeds' DALI preprocessing: decode, resize to 299x299, crop-mirror-normalize (HWC float).

The seeds decode with ``device="mixed"`` (nvJPEG on the GPU); ``device="cpu"`` gives the same
pipeline for CPU-only hosts such as the embedded launcher, and is the default here.
"""

from __future__ import annotations

from pathlib import Path

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
INPUT_NAME = "DALI_INPUT_0"
SIZE = 299


def define(batch_size: int, num_threads: int, decode_device: str = "cpu") -> object:
    from nvidia import dali
    from nvidia.dali import fn, types

    @dali.pipeline_def(batch_size=batch_size, num_threads=num_threads,
                       device_id=0 if decode_device == "mixed" else None)
    def preprocess() -> object:
        images = fn.external_source(device="cpu", name=INPUT_NAME)
        images = fn.decoders.image(images, device=decode_device, output_type=types.RGB)
        images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
        return fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="HWC", crop=(SIZE, SIZE),
            mean=MEAN, std=STD,
        )

    return preprocess()


def serialize(target: Path, batch_size: int, num_threads: int,
              decode_device: str = "cpu") -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    define(batch_size, num_threads, decode_device).serialize(filename=str(target))
    return target


def run_reference(images: list[bytes], num_threads: int = 2):  # type: ignore[no-untyped-def]
    """Run the same pipeline in-process (CPU): the reference the ensemble is checked against."""
    import numpy as np

    pipe = define(batch_size=max(len(images), 1), num_threads=num_threads)
    pipe.build()
    pipe.feed_input(INPUT_NAME, [np.frombuffer(image, dtype=np.uint8) for image in images])
    (out,) = pipe.run()
    return out.as_array()
