"""The tiny built-in models and datasets: a model and a data source that need no hub."""

from recipe_engine.resolve.tiny.datasets import ARITH_MAX_OPERAND, TINY_DATASETS, build_dataset
from recipe_engine.resolve.tiny.models import TINY_MODELS, build_tiny_model
from recipe_engine.resolve.tiny.shapes import COLOURS, SHAPES, SHAPES_IMAGE_SIZE, SHAPES_QUESTION

__all__ = [
    "ARITH_MAX_OPERAND",
    "COLOURS",
    "SHAPES",
    "SHAPES_IMAGE_SIZE",
    "SHAPES_QUESTION",
    "TINY_DATASETS",
    "TINY_MODELS",
    "build_dataset",
    "build_tiny_model",
]
