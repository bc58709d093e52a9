"""The embedded shapes generator varies everything that is not the answer."""

from __future__ import annotations

import colorsys
import random
from itertools import pairwise

import numpy as np

from recipe_engine.resolve.tiny.shapes import (
    ALL_SHAPES,
    COLOURS,
    SHAPES,
    SHAPES_IMAGE_SIZE,
    draw_any_shape,
    draw_shape,
)


def pictures(n: int, colour: str = "red", shape: str = "square") -> list[np.ndarray]:
    rng = random.Random(0)
    return [np.asarray(draw_shape(rng, colour, shape), dtype=np.int32) for _ in range(n)]


def ink_mask(picture: np.ndarray) -> np.ndarray:
    """Pixels far from the background (read at the corner, which no shape fully covers)."""
    corners = [picture[0, 0], picture[0, -1], picture[-1, 0], picture[-1, -1]]
    background = min(corners, key=lambda c: int(c.sum()))
    return np.abs(picture - background).sum(axis=-1) > 60


def test_pictures_are_the_shapes_size_and_rgb():
    for shape in ALL_SHAPES:
        image = draw_any_shape(random.Random(1), (200, 50, 50), shape)
        assert image.mode == "RGB" and image.size == (SHAPES_IMAGE_SIZE, SHAPES_IMAGE_SIZE)
    assert set(SHAPES) < set(ALL_SHAPES)


def test_sizes_and_positions_vary_widely():
    boxes = []
    for picture in pictures(60):
        ys, xs = np.nonzero(ink_mask(picture))
        boxes.append((xs.min(), ys.min(), xs.max() - xs.min() + 1))
    widths = [w / SHAPES_IMAGE_SIZE for *_, w in boxes]
    assert min(widths) < 0.5 and max(widths) > 0.8
    assert len({(x // 10, y // 10) for x, y, _ in boxes}) > 10


def test_some_shapes_are_outlines_and_some_are_filled():
    filled_shares = []
    for picture in pictures(60, shape="circle"):
        mask = ink_mask(picture)
        ys, xs = np.nonzero(mask)
        centre = mask[(ys.min() + ys.max()) // 2, (xs.min() + xs.max()) // 2]
        filled_shares.append(bool(centre))
    assert 0.3 < sum(filled_shares) / len(filled_shares) < 0.9


def test_backgrounds_are_dark_shades_that_vary():
    corners = {tuple(p[0, 0]) for p in pictures(40)}
    assert len(corners) > 20
    assert all(max(c) <= 90 for c in corners)


def test_each_colour_name_covers_a_range_of_hues_that_never_meet():
    rng = random.Random(2)
    hues: dict[str, list[float]] = {}
    for colour in COLOURS:
        for _ in range(30):
            picture = np.asarray(draw_shape(rng, colour, "square"), dtype=np.int32)
            ink = picture[ink_mask(picture)].mean(axis=0) / 255
            hue = colorsys.rgb_to_hsv(*ink)[0] * 360
            hues.setdefault(colour, []).append((hue + 30) % 360 - 30)  # red near 0 stays whole
    ranges = sorted((min(h), max(h)) for h in hues.values())
    assert all(high - low > 8 for low, high in ranges)  # jittered, not one pixel value
    assert all(a[1] < b[0] for a, b in pairwise(ranges))  # names never overlap
