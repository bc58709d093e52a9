"""A second coloured-shapes generator, written apart from recipe_engine.resolve.tiny.shapes.

Same vocabulary (four colours, three shapes, the same question), different drawing code and
parameters: shapes are rasterised with numpy from their geometry (circles by radius, squares by
side, equilateral triangles by side), 4x supersampled and averaged down (soft edges), with their
own colour values, size ranges, stroke widths and a noisy background. A model that learned
shapes and colours reads these pictures; one that learned the embedded generator's quirks
does not.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
from PIL import Image

QUESTION = "What is in the picture?"
SIZE = 84
SUPERSAMPLE = 4
# Not the embedded generator's values: other shades of the same four colour names.
PALETTE = {
    "red": (200, 25, 60),
    "green": (70, 200, 90),
    "blue": (35, 65, 200),
    "yellow": (225, 205, 70),
}
SHAPES = ("circle", "square", "triangle")


def picture(rng: random.Random, colour: str, shape: str) -> Image.Image:
    big = SIZE * SUPERSAMPLE
    ys, xs = np.mgrid[0:big, 0:big].astype(np.float64) / SUPERSAMPLE + 0.5 / SUPERSAMPLE
    extent = rng.uniform(0.45, 0.85) * SIZE  # the shape's width
    cx = rng.uniform(extent / 2, SIZE - extent / 2)
    cy = rng.uniform(extent / 2, SIZE - extent / 2)
    inside = _signed_distance(shape, xs - cx, ys - cy, extent)  # < 0 inside
    if rng.random() < 0.5:
        mask = inside <= 0
    else:
        stroke = rng.uniform(2.5, 5.0)
        mask = (inside <= 0) & (inside > -stroke)
    coverage = mask.reshape(SIZE, SUPERSAMPLE, SIZE, SUPERSAMPLE).mean(axis=(1, 3))[..., None]
    ink = np.array([c + rng.randint(-15, 15) for c in PALETTE[colour]], dtype=np.float64)
    grey = rng.uniform(0, 50)
    noise = np.random.default_rng(rng.randrange(2**32)).normal(0, 3, (SIZE, SIZE, 3))
    background = np.clip(grey + noise, 0, 255)
    pixels = coverage * ink + (1 - coverage) * background
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def _signed_distance(shape: str, dx: np.ndarray, dy: np.ndarray, extent: float) -> np.ndarray:
    if shape == "circle":
        return np.hypot(dx, dy) - extent / 2
    if shape == "square":
        return np.maximum(np.abs(dx), np.abs(dy)) - extent / 2
    # An equilateral triangle pointing up, centred on its bounding box.
    height = extent * np.sqrt(3) / 2
    dy = dy + height / 2  # 0 at the apex, `height` at the base
    base = dy - height
    slope = np.abs(dx) * np.sqrt(3) / 2 - dy / 2  # the two slanted sides, as distances
    return np.maximum.reduce([base, -dy, slope])


def write_probes(folder: Path, per_class: int, seed: int) -> Path:
    """``per_class`` pictures of each colour and shape, as a VLM messages JSONL probe file."""
    rng = random.Random(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for colour in PALETTE:
        for shape in SHAPES:
            for i in range(per_class):
                name = f"images/{colour}-{shape}-{i}.png"
                picture(rng, colour, shape).save(folder / name)
                rows.append(_row(name, f"{colour} {shape}"))
    path = folder / "probes.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _row(image: str, answer: str) -> dict:
    return {
        "images": [image],
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]},
            {"role": "assistant", "content": [{"type": "text", "text": answer}]},
        ],
    }
