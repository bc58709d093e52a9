"""A model's shape as the memory estimate reads it: the language model's transformer from its
config.json, and a vision tower with how an image becomes tokens (from the processor's image,
patch and merge sizes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class VisionShape:
    """A vision tower: its transformer blocks and how an image becomes tokens."""

    hidden_size: int
    num_layers: int
    intermediate_size: int
    patches_per_image: int  # the tower's sequence per image
    tokens_per_image: int  # what reaches the language model (after merging)
    pixel_values_per_image: int  # processor output floats per image


@dataclass(frozen=True)
class ModelShape:
    """The language model's transformer, and the vision tower of a VLM."""

    hidden_size: int
    num_layers: int
    intermediate_size: int
    vocab_size: int
    num_heads: int
    vision: VisionShape | None = None


def model_shape(
    config: Mapping, processor: Mapping | None = None, image_pixels: int = 0
) -> ModelShape:
    """The shape from a transformers config.json; a VLM's image tokens from its processor's
    config and the data's largest image (`image_pixels`, width x height)."""
    text = config.get("text_config") or config
    vision = config.get("vision_config")
    hidden = int(_first(text, "hidden_size", "n_embd", "d_model"))
    return ModelShape(
        hidden_size=hidden,
        num_layers=int(_first(text, "num_hidden_layers", "n_layer", "num_layers")),
        intermediate_size=int(_first(text, "intermediate_size", "n_inner", default=4 * hidden)),
        vocab_size=int(_first(text, "vocab_size", default=config.get("vocab_size", 32000))),
        num_heads=int(_first(text, "num_attention_heads", "n_head", default=1)),
        vision=_vision_shape(vision, processor or {}, image_pixels) if vision else None,
    )


def _first(config: Mapping, *keys: str, default: object = None) -> object:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    if default is None:
        raise KeyError(f"config has none of {', '.join(keys)}")
    return default


def _vision_shape(vision: Mapping, processor: Mapping, image_pixels: int) -> VisionShape:
    hidden = int(_first(vision, "embed_dim", "hidden_size"))
    mlp = vision.get("intermediate_size") or int(hidden * float(vision.get("mlp_ratio", 4)))
    patch = int(_first(processor, "patch_size", default=vision.get("patch_size", 14)))
    merge = int(processor.get("merge_size") or vision.get("spatial_merge_size") or 1)
    layers = int(_first(vision, "depth", "num_hidden_layers"))
    if merge > 1:  # Qwen2-VL: the image keeps its size within [min, max] pixels
        temporal = int(vision.get("temporal_patch_size") or 1)
        side = math.sqrt(_clamp_pixels(image_pixels, processor))
        grid = max(round(side / (patch * merge)), 1) * merge
        patches = grid * grid
        return VisionShape(
            hidden,
            layers,
            int(mlp),
            patches,
            patches // merge**2,
            patches * 3 * patch * patch * temporal,
        )
    side = _processor_side(processor, vision)  # CLIP-style: resized to one fixed square
    patches = (side // patch) ** 2
    return VisionShape(hidden, layers, int(mlp), patches + 1, patches, 3 * side * side)


def _clamp_pixels(pixels: int, processor: Mapping) -> float:
    size = processor.get("size") if isinstance(processor.get("size"), Mapping) else {}
    low = processor.get("min_pixels") or size.get("shortest_edge") or 56 * 56
    high = processor.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280
    return float(min(max(pixels or high, low), high))


def _processor_side(processor: Mapping, vision: Mapping) -> int:
    """The square side a fixed-size processor resizes every image to."""
    for key in ("crop_size", "size"):
        value = processor.get(key)
        if isinstance(value, Mapping):
            for inner in ("height", "shortest_edge", "longest_edge"):
                if value.get(inner):
                    return int(value[inner])
        elif isinstance(value, int):
            return value
    return int(vision.get("image_size") or 448)
