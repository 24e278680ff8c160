"""The seeds' text-embedding ensemble (preprocess -> BERT -> postprocess)."""

from ensembles.text_embedding.builder import VARIANTS, build

__all__ = ["VARIANTS", "build"]
