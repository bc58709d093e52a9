"""A model's shape as the memory estimate reads it: the language model's transformer from its
config.json, and a vision tower with how the data's images become tokens.

An image's tokens are what its processor makes of it, by the processor's own arithmetic
(transformers 5.x): Qwen2-VL / Qwen2.5-VL resize each side to a multiple of patch x merge and
clamp the pixel count into [min_pixels, max_pixels] (`smart_resize`: the aspect ratio stays,
so 1000x1000 and 2000x500 px give other grids); Idefics3 / SmolVLM resize the longest edge to
`size.longest_edge` and split the image into tiles of `max_image_size` plus a global image
(the tokens follow the aspect ratio); CLIP-style processors (LLaVA) resize and crop every
image to one square. tests/plan/test_model_shape.py runs the real processors on real images.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

# Token budgets tried as a Qwen2-VL-style cap (max_pixels = budget x (patch x merge)^2), the
# largest first: Qwen's model card suggests 1280 tokens (1,003,520 px at patch 14, merge 2),
# LLaMA-Factory caps images at 768 x 768 px by default (`image_max_pixels`), ms-swift's
# maintainers answer Qwen2-VL-7B's out-of-memory with MAX_PIXELS=602112 (768 tokens).
TOKEN_BUDGETS = (4096, 2048, 1280, 1024, 768, 512, 256, 128, 64, 16)
# Idefics3 never lets a side grow past this (transformers' MAX_IMAGE_SIZE, "4k resolution").
IDEFICS3_MAX_SIDE = 4096
# Qwen2VLImageProcessor's class defaults, where a config names neither key.
QWEN_MIN_PIXELS = 56 * 56
QWEN_MAX_PIXELS = 28 * 28 * 1280


@dataclass(frozen=True)
class ImageTokens:
    """One image as the vision tower and the language model see it."""

    patches: int  # the tower's sequence for the image (all its tiles; CLIP's class token)
    tokens: int  # visual tokens that reach the language model
    pixel_values: int  # the processor's output floats for it


@dataclass(frozen=True)
class ImageCap:
    """A smaller image limit for the processor, and what the data's largest image becomes."""

    setting: str  # the processor setting, under `model.processor` (`max_pixels`)
    value: int
    image: ImageTokens


@dataclass(frozen=True)
class VisionShape:
    """A vision tower: its transformer blocks and how the data's images become tokens."""

    hidden_size: int
    num_layers: int
    intermediate_size: int
    patches_per_image: int  # the tower's sequence per image
    tokens_per_image: int  # what reaches the language model (after merging)
    pixel_values_per_image: int  # processor output floats per image
    # The data's image (width, height) that gives the most tokens; None: no size known, the
    # largest image the processor makes is counted.
    image_size: tuple[int, int] | None = None
    sizes_in_data: int = 0  # how many distinct image sizes the data has
    processor: str = ""  # the processor's limits the tokens come from, as `plan` prints them
    caps: tuple[ImageCap, ...] = ()  # smaller limits that give fewer tokens, largest first

    def describe_images(self, per_row: int) -> str:
        """`1000x1000 px -> 1,296 visual tokens each (processor: max_pixels 12,845,056, ...)`:
        the data's image with the most tokens, and the processor limits they come from."""
        each = f"{self.tokens_per_image:,} visual tokens each"
        rows = f", {per_row} a row" if per_row > 1 else ""
        limits = f"(processor: {self.processor})"
        if self.image_size is None:
            return f"size not read: up to {each}, the processor's largest{rows} {limits}"
        width, height = self.image_size
        if self.sizes_in_data > 1:
            return (
                f"up to {each}, from {width}x{height} px (the most of the data's "
                f"{self.sizes_in_data:,} sizes){rows} {limits}"
            )
        return f"{width}x{height} px -> {each}{rows} {limits}"

    def capped(self, cap: ImageCap) -> VisionShape:
        """The same tower, the data's images under `cap`."""
        return replace(
            self,
            patches_per_image=cap.image.patches,
            tokens_per_image=cap.image.tokens,
            pixel_values_per_image=cap.image.pixel_values,
            caps=(),
        )


@dataclass(frozen=True)
class ModelShape:
    """The language model's transformer, and the vision tower of a VLM."""

    hidden_size: int
    num_layers: int
    intermediate_size: int
    vocab_size: int
    num_heads: int
    vision: VisionShape | None = None
    # Keys and values a token keeps per layer (the KV cache of generation): key/value heads
    # (fewer than the query heads under grouped-query attention) x head width.
    kv_channels: int = 0

    @property
    def cached_per_token_layer(self) -> int:
        """Key and value elements one token keeps in one layer's cache."""
        return 2 * (self.kv_channels or self.hidden_size)


def model_shape(
    config: Mapping,
    processor: Mapping | None = None,
    image_sizes: Iterable[tuple[int, int]] = (),
) -> ModelShape:
    """The shape from a transformers config.json; a VLM's image tokens from its processor's
    config and the data's image sizes (width, height): the size that gives the most tokens."""
    text = config.get("text_config") or config
    vision = config.get("vision_config")
    hidden = int(_first(text, "hidden_size", "n_embd", "d_model"))
    return ModelShape(
        hidden_size=hidden,
        num_layers=int(_first(text, "num_hidden_layers", "n_layer", "num_layers")),
        intermediate_size=int(_first(text, "intermediate_size", "n_inner", default=4 * hidden)),
        vocab_size=int(_first(text, "vocab_size", default=config.get("vocab_size", 32000))),
        num_heads=int(_first(text, "num_attention_heads", "n_head", default=1)),
        vision=_vision_shape(config, processor or {}, tuple(image_sizes)) if vision else None,
        kv_channels=_kv_channels(text, hidden),
    )


def _kv_channels(text: Mapping, hidden: int) -> int:
    heads = int(_first(text, "num_attention_heads", "n_head", default=1))
    kv_heads = int(_first(text, "num_key_value_heads", default=heads))
    head_dim = int(_first(text, "head_dim", default=hidden // max(heads, 1)))
    return kv_heads * head_dim


def _first(config: Mapping, *keys: str, default: object = None) -> object:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    if default is None:
        raise KeyError(f"config has none of {', '.join(keys)}")
    return default


# --------------------------------------------------------------------------- processors


class ImageArithmetic(Protocol):
    """A processor family's arithmetic: what it makes of an image of a given size."""

    def image(self, width: int, height: int) -> ImageTokens: ...

    def largest(self) -> tuple[int, int]:
        """An image size that gives the most tokens this processor makes."""
        ...

    def describe(self) -> str: ...

    def caps(self) -> list[tuple[str, int, ImageArithmetic]]:
        """Smaller limits (setting, value, the processor under it), largest first."""
        ...


@dataclass(frozen=True)
class SmartResize:
    """Qwen2VLImageProcessor (Qwen2-VL, Qwen2.5-VL): `smart_resize`, then patches of
    patch x patch px (each repeated temporal_patch_size times), merge x merge of them a token."""

    patch: int
    merge: int
    temporal: int
    min_pixels: int
    max_pixels: int

    def image(self, width: int, height: int) -> ImageTokens:
        factor = self.patch * self.merge
        h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
        if h_bar * w_bar > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h_bar = max(factor, math.floor(height / beta / factor) * factor)
            w_bar = max(factor, math.floor(width / beta / factor) * factor)
        elif h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h_bar = math.ceil(height * beta / factor) * factor
            w_bar = math.ceil(width * beta / factor) * factor
        patches = (h_bar // self.patch) * (w_bar // self.patch)
        floats = patches * 3 * self.temporal * self.patch * self.patch
        return ImageTokens(patches, patches // self.merge**2, floats)

    def largest(self) -> tuple[int, int]:
        side = math.isqrt(self.max_pixels)
        return side, side

    def describe(self) -> str:
        return f"max_pixels {self.max_pixels:,}, patch {self.patch}, merge {self.merge}"

    def caps(self) -> list[tuple[str, int, ImageArithmetic]]:
        token = (self.patch * self.merge) ** 2
        values = [
            b * token for b in TOKEN_BUDGETS if self.min_pixels <= b * token < self.max_pixels
        ]
        return [("max_pixels", v, replace(self, max_pixels=v)) for v in values]


@dataclass(frozen=True)
class Idefics3Tiles:
    """Idefics3ImageProcessor (Idefics3, SmolVLM): the longest edge resized to `resize_edge`,
    then (splitting) each side rounded up to whole tiles of `tile` px, split into them, plus
    the whole image as one more tile; without splitting, one tile. Each tile is
    `tokens_per_tile` tokens (the processor's image_seq_len) from (tile / patch)^2 patches."""

    resize_edge: int | None  # size.longest_edge; None: do_resize is off
    tile: int  # max_image_size.longest_edge
    splitting: bool
    tokens_per_tile: int
    patch: int

    def tiles(self, width: int, height: int) -> int:
        if not self.splitting:
            return 1
        if self.resize_edge:  # do_resize
            height, width = _longest_edge_to(height, width, self.resize_edge)
            height, width = _within(height, width, IDEFICS3_MAX_SIDE)
        aspect = width / height
        if width >= height:
            width = math.ceil(width / self.tile) * self.tile
            height = math.ceil(int(width / aspect) / self.tile) * self.tile
        else:
            height = math.ceil(height / self.tile) * self.tile
            width = math.ceil(int(height * aspect) / self.tile) * self.tile
        if height > self.tile or width > self.tile:
            return math.ceil(height / self.tile) * math.ceil(width / self.tile) + 1
        return 1

    def image(self, width: int, height: int) -> ImageTokens:
        tiles = self.tiles(width, height)
        per_tile = (self.tile // self.patch) ** 2
        return ImageTokens(tiles * per_tile, tiles * self.tokens_per_tile, tiles * 3 * self.tile**2)

    def largest(self) -> tuple[int, int]:
        side = self.resize_edge or IDEFICS3_MAX_SIDE
        return side, side  # a square image gives the most tiles

    def describe(self) -> str:
        if not self.splitting:
            return f"one {self.tile} px tile of {self.tokens_per_tile} tokens"
        edge = f"longest_edge {self.resize_edge:,}, " if self.resize_edge else ""
        return f"{edge}tiles of {self.tile} px, {self.tokens_per_tile} tokens a tile"

    def caps(self) -> list[tuple[str, int, ImageArithmetic]]:
        if not self.splitting:
            return []
        most = math.ceil((self.resize_edge or IDEFICS3_MAX_SIDE) / self.tile)
        edges = [k * self.tile for k in range(most - 1, 0, -1)]
        return [("size.longest_edge", e, replace(self, resize_edge=e)) for e in edges]


@dataclass(frozen=True)
class FixedSquare:
    """CLIP-style processors (LLaVA): every image resized and cropped to one `side` px
    square, whatever its size; the tower adds a class token."""

    side: int
    patch: int
    tokens: int  # what LlavaProcessor expands the image into

    def image(self, width: int, height: int) -> ImageTokens:
        patches = (self.side // self.patch) ** 2
        return ImageTokens(patches + 1, self.tokens, 3 * self.side * self.side)

    def largest(self) -> tuple[int, int]:
        return self.side, self.side

    def describe(self) -> str:
        return f"every image {self.side}x{self.side} px, patch {self.patch}"

    def caps(self) -> list[tuple[str, int, ImageArithmetic]]:
        return []


def image_arithmetic(config: Mapping, processor: Mapping) -> ImageArithmetic:
    """The processor family's arithmetic from the model's config.json and its processor's
    config (the files merged, `model.processor` over them, as from_pretrained takes them)."""
    vision = config.get("vision_config") or {}
    kind = str(processor.get("image_processor_type") or "")
    merge = int(processor.get("merge_size") or vision.get("spatial_merge_size") or 1)
    if kind.startswith("Qwen2VL") or merge > 1:
        # Qwen2VLImageProcessor.__init__: min_pixels / max_pixels win over size.
        size = _mapping(processor.get("size"))
        return SmartResize(
            patch=int(_first(processor, "patch_size", default=vision.get("patch_size", 14))),
            merge=merge,
            temporal=int(
                processor.get("temporal_patch_size") or vision.get("temporal_patch_size") or 1
            ),
            min_pixels=int(
                processor.get("min_pixels") or size.get("shortest_edge") or QWEN_MIN_PIXELS
            ),
            max_pixels=int(
                processor.get("max_pixels") or size.get("longest_edge") or QWEN_MAX_PIXELS
            ),
        )
    patch = int(vision.get("patch_size") or processor.get("patch_size") or 14)
    if kind.startswith("Idefics3") or config.get("model_type") == "idefics3":
        tile = int(_mapping(processor.get("max_image_size")).get("longest_edge") or 364)
        scale = int(config.get("scale_factor") or 1)
        per_tile = (tile // patch) ** 2 // scale**2
        resize = processor.get("do_resize", True)
        edge = _mapping(processor.get("size")).get("longest_edge") or 4 * 364
        return Idefics3Tiles(
            resize_edge=int(edge) if resize else None,
            tile=tile,
            splitting=bool(processor.get("do_image_splitting", True)),
            tokens_per_tile=int(processor.get("image_seq_len") or per_tile),
            patch=patch,
        )
    side = _processor_side(processor, vision)
    tokens = (side // patch) ** 2
    strategy = processor.get("vision_feature_select_strategy") or config.get(
        "vision_feature_select_strategy", "default"
    )
    if strategy != "default":  # LlavaProcessor keeps the class token's place too
        tokens += int(processor.get("num_additional_image_tokens") or 0)
    return FixedSquare(side, patch, tokens)


def _vision_shape(
    config: Mapping, processor: Mapping, image_sizes: tuple[tuple[int, int], ...]
) -> VisionShape:
    vision = config["vision_config"]
    hidden = int(_first(vision, "embed_dim", "hidden_size"))
    mlp = vision.get("intermediate_size") or int(hidden * float(vision.get("mlp_ratio", 4)))
    layers = int(_first(vision, "depth", "num_hidden_layers"))
    arithmetic = image_arithmetic(config, processor)
    size, image = _most_tokens(arithmetic, image_sizes)
    caps = []
    for setting, value, capped in arithmetic.caps():
        _, smaller = _most_tokens(capped, image_sizes)
        if smaller.tokens < image.tokens:
            caps.append(ImageCap(setting, value, smaller))
    return VisionShape(
        hidden,
        layers,
        int(mlp),
        image.patches,
        image.tokens,
        image.pixel_values,
        image_size=size if image_sizes else None,
        sizes_in_data=len(image_sizes),
        processor=arithmetic.describe(),
        caps=tuple(caps),
    )


def _most_tokens(
    arithmetic: ImageArithmetic, image_sizes: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ImageTokens]:
    """The image size (width, height) that gives the most tokens, with them; without sizes,
    the processor's largest image."""
    found = [(size, arithmetic.image(*size)) for size in image_sizes or (arithmetic.largest(),)]
    return max(found, key=lambda pair: (pair[1].tokens, pair[1].patches, pair[1].pixel_values))


def _longest_edge_to(height: int, width: int, edge: int) -> tuple[int, int]:
    """Idefics3's resize: the longest edge to `edge` px (up or down), the other side by the
    aspect ratio, rounded down to an even number of pixels (transformers'
    `_resize_output_size_rescale_to_max_len`)."""
    aspect = width / height
    if width >= height:
        width, height = edge, int(edge / aspect)
        height += height % 2
    else:
        height, width = edge, int(edge * aspect)
        width += width % 2
    return max(height, 1), max(width, 1)


def _within(height: int, width: int, limit: int) -> tuple[int, int]:
    """Both sides at most `limit` px, the aspect ratio kept (transformers'
    `_resize_output_size_scale_below_upper_bound`)."""
    aspect = width / height
    if width >= height and width > limit:
        width, height = limit, int(limit / aspect)
    elif height > width and height > limit:
        height, width = limit, int(limit * aspect)
    return max(height, 1), max(width, 1)


def _mapping(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


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
