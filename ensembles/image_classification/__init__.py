"""The seeds' image-classification ensemble (DALI -> Inception-style classifier)."""

from ensembles.image_classification.builder import VARIANTS, build

__all__ = ["VARIANTS", "build"]
