"""The embedded coloured-shapes pictures: one shape per picture, answered "<colour> <shape>".

The generator varies everything that is not the answer, so a model that scores well has learned
colours and shapes, not this generator: the shape's size, position and aspect, filled or drawn
as an outline of varying width, the background's shade and tint, and the colour's exact value.
"""

from __future__ import annotations

import colorsys
import random
from typing import Any

from recipe_engine.config.library_objects import LibraryKwargs

# Each colour name covers a range of hues (degrees on the colour wheel), drawn at a saturation
# and brightness from the ranges below: many reds, not one red pixel value.
COLOURS: dict[str, tuple[float, float]] = {
    "red": (-15.0, 12.0),
    "yellow": (45.0, 62.0),
    "green": (95.0, 145.0),
    "blue": (205.0, 240.0),
}
_SATURATION = (0.6, 1.0)
_BRIGHTNESS = (0.7, 1.0)
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
# The vision tower's pre-training also sees shapes no answer names (see tiny_pretrain).
ALL_SHAPES: tuple[str, ...] = (*SHAPES, "diamond", "cross")
SHAPES_QUESTION = "What is in the picture?"
# 84 px = 6x6 patches of 14 px: 36 patches for the vision towers, 9 merged tokens for Qwen2-VL.
SHAPES_IMAGE_SIZE = 84

# Shape side as a fraction of the picture side, and width / height within this range.
_SIDE = (0.4, 0.9)
_ASPECT = (0.85, 1.15)
_OUTLINE_SHARE = 0.4  # pictures whose shape is an outline, not filled
_OUTLINE_WIDTH_PX = (3, 6)
# Dark backgrounds so that every colour (yellow included) contrasts; a small tint per channel.
_BACKGROUND_SHADE = (10, 70)
_BACKGROUND_TINT = 12


def draw_shape(rng: random.Random, colour: str, shape: str) -> Any:
    """One PIL picture of ``shape`` in a shade of ``colour`` on a shaded background."""
    return draw_any_shape(rng, _shade_of(rng, colour), shape)


def draw_any_shape(rng: random.Random, ink: tuple[int, int, int], shape: str) -> Any:
    """A PIL picture of any of ``ALL_SHAPES`` in the colour ``ink``, placed and sized at random."""
    from PIL import Image, ImageDraw

    n = SHAPES_IMAGE_SIZE
    image = Image.new("RGB", (n, n), _background(rng))
    width = rng.uniform(*_SIDE) * n
    height = min(n - 1.0, width * rng.uniform(*_ASPECT))
    x0, y0 = rng.uniform(0, n - width), rng.uniform(0, n - height)
    outline = rng.random() < _OUTLINE_SHARE
    style: LibraryKwargs = (  # ImageDraw's
        {"outline": ink, "width": rng.randint(*_OUTLINE_WIDTH_PX)} if outline else {"fill": ink}
    )
    draw = ImageDraw.Draw(image)
    if shape == "circle":
        draw.ellipse((x0, y0, x0 + width, y0 + height), **style)
    elif shape == "square":
        draw.rectangle((x0, y0, x0 + width, y0 + height), **style)
    else:
        draw.polygon(_corners(shape, x0, y0, width, height), **style)
    return image


def _corners(shape: str, x0: float, y0: float, w: float, h: float) -> list[tuple[float, float]]:
    """The polygon shapes' corners inside the box (x0, y0, w, h)."""
    if shape == "triangle":  # pointing up
        return [(x0, y0 + h), (x0 + w, y0 + h), (x0 + w / 2, y0)]
    if shape == "diamond":
        return [(x0 + w / 2, y0), (x0 + w, y0 + h / 2), (x0 + w / 2, y0 + h), (x0, y0 + h / 2)]
    # a cross: a plus sign whose arms are a third of the box wide
    a, b, c, d = x0, x0 + w / 3, x0 + 2 * w / 3, x0 + w
    e, f, g, k = y0, y0 + h / 3, y0 + 2 * h / 3, y0 + h
    return [
        (b, e),
        (c, e),
        (c, f),
        (d, f),
        (d, g),
        (c, g),
        (c, k),
        (b, k),
        (b, g),
        (a, g),
        (a, f),
        (b, f),
    ]


def _background(rng: random.Random) -> tuple[int, int, int]:
    shade = rng.randint(*_BACKGROUND_SHADE)
    return tuple(  # type: ignore[return-value]
        max(0, shade + rng.randint(-_BACKGROUND_TINT, _BACKGROUND_TINT)) for _ in range(3)
    )


def _shade_of(rng: random.Random, colour: str) -> tuple[int, int, int]:
    hue = rng.uniform(*COLOURS[colour]) % 360 / 360
    rgb = colorsys.hsv_to_rgb(hue, rng.uniform(*_SATURATION), rng.uniform(*_BRIGHTNESS))
    return tuple(round(255 * c) for c in rgb)  # type: ignore[return-value]
