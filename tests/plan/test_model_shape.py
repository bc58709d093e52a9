"""How a VLM's images become tokens (plan.model_shape), against the real processors on real
images of several sizes: every shipped VLM layout's processor as training loads it (the tiny
models, with the model entry's `processor` settings), and the shipped hub snapshots' image
processors at their real limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from recipe_engine.config.schema import ModelConfig
from recipe_engine.plan.model_shape import image_arithmetic, model_shape
from recipe_engine.resolve.resolver import processor_config, snapshot_folder
from recipe_engine.resolve.tiny import build_tiny_model
from recipe_engine.run.loading import load_processor

# Square, wide, tall, tiny, odd and past-the-limit sizes (width, height).
SIZES = [(1000, 1000), (2000, 500), (500, 2000), (37, 300), (1456, 700), (333, 334), (113, 57)]
# Idefics3-8B's own limits: the longest edge to 4 x 364 px, tiles of 364 px.
IDEFICS3_LIMITS = {
    "do_image_splitting": True,
    "size": {"longest_edge": 1456},
    "max_image_size": {"longest_edge": 364},
}


def real_image(processor: Any, width: int, height: int) -> tuple[int, int, int | None]:
    """What the processor makes of one drawn image in a chat turn: the image tokens it puts in
    the text, the pixel values it hands the tower, and (Qwen2-VL's grid) the tower's patches."""
    image = Image.new("RGB", (width, height), (30, 60, 90))
    ImageDraw.Draw(image).ellipse((width // 4, height // 4, width // 2, height // 2), "red")
    parts = [{"type": "image"}, {"type": "text", "text": "What is it?"}]
    text = processor.apply_chat_template([{"role": "user", "content": parts}])
    nested = type(processor).__name__.startswith("Idefics3")  # a list of images per text
    out = processor(text=[text], images=[[image]] if nested else [image], return_tensors="pt")
    token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    grid = out.get("image_grid_thw")
    patches = int(grid.prod()) if grid is not None else None
    return int((out["input_ids"] == token).sum()), out["pixel_values"].numel(), patches


def check_sizes(processor: Any, folder: Path, entry: ModelConfig, sizes: list) -> None:
    """The estimate's count (the folder's configs, the entry's settings) is the processor's,
    for every size."""
    config = json.loads((folder / "config.json").read_text())
    arithmetic = image_arithmetic(config, processor_config(folder, entry))
    for width, height in sizes:
        counted = arithmetic.image(width, height)
        tokens, pixel_values, patches = real_image(processor, width, height)
        assert (counted.tokens, counted.pixel_values) == (tokens, pixel_values), (width, height)
        assert patches in (None, counted.patches), (width, height)


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("tiny-qwen2-vl", {}),
        ("tiny-qwen2-vl", {"max_pixels": 200_704}),
        ("tiny-qwen2.5-vl", {"min_pixels": 20_000}),
        ("tiny-llava", {}),
        ("tiny-idefics3", {}),
        ("tiny-idefics3", {"do_image_splitting": True, "size": {"longest_edge": 300}}),
        ("tiny-idefics3", IDEFICS3_LIMITS),
    ],
)
def test_each_layouts_image_tokens_are_its_processors(name: str, settings: dict) -> None:
    entry = ModelConfig(name=name, source="tiny", id=name, kind="vlm", processor=settings)
    folder = build_tiny_model(name)
    check_sizes(load_processor(str(folder), entry), folder, entry, SIZES)


@pytest.mark.parametrize(
    ("hub_id", "tiny", "settings"),
    [
        ("Qwen/Qwen2-VL-7B-Instruct", "tiny-qwen2-vl", {}),
        ("Qwen/Qwen2-VL-7B-Instruct", "tiny-qwen2-vl", {"max_pixels": 1_003_520}),
        ("Qwen/Qwen2.5-VL-3B-Instruct", "tiny-qwen2.5-vl", {}),
        ("llava-hf/llava-1.5-7b-hf", "tiny-llava", {}),
    ],
)
def test_each_snapshots_image_tokens_are_its_processors(
    hub_id: str, tiny: str, settings: dict
) -> None:
    """The snapshot's image processor at the hub model's limits (Qwen2-VL's 12.8 M pixels an
    image), in its family's processor with the tiny model's tokenizer."""
    from transformers import AutoImageProcessor

    folder = snapshot_folder(hub_id)
    assert folder is not None
    entry = ModelConfig(name=hub_id, id=hub_id, kind="vlm", processor=settings)
    processor = load_processor(str(build_tiny_model(tiny)), ModelConfig(name=tiny, id=tiny))
    processor.image_processor = AutoImageProcessor.from_pretrained(folder, **settings)
    check_sizes(processor, folder, entry, [*SIZES, (3000, 2000)])


def test_the_counted_image_is_the_one_with_the_most_tokens_not_the_most_pixels() -> None:
    """Qwen2-VL keeps the aspect ratio: 2000x500 px is 1,278 tokens, not the 1,296 of the
    square of its pixels; Idefics3 splits by the aspect ratio: a 700x700 px image has more
    tiles than a 2000x500 px one."""
    folder = snapshot_folder("Qwen/Qwen2-VL-7B-Instruct")
    assert folder is not None
    config = json.loads((folder / "config.json").read_text())
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    wide = model_shape(config, processor, [(2000, 500)]).vision
    assert wide is not None and wide.tokens_per_image == 18 * 71  # 504 x 1988 px, 28 px a token
    both = model_shape(config, processor, [(2000, 500), (1000, 1000)]).vision
    assert both is not None and (both.image_size, both.tokens_per_image) == ((1000, 1000), 1296)
    assert both.describe_images(1).startswith("up to 1,296 visual tokens each, from 1000x1000 px")

    idefics3 = build_tiny_model("tiny-idefics3")
    config = json.loads((idefics3 / "config.json").read_text())
    entry = ModelConfig(name="i", source="tiny", id="i", kind="vlm", processor=IDEFICS3_LIMITS)
    tiles = model_shape(config, processor_config(idefics3, entry), [(2000, 500), (700, 700)])
    assert tiles.vision is not None and tiles.vision.image_size == (700, 700)
    assert tiles.vision.tokens_per_image == (4 * 4 + 1) * 9  # 16 tiles and the global image


def test_caps_are_the_processors_own_count_under_the_smaller_limit() -> None:
    """The limits the advice offers give what the processor gives under them."""
    from transformers import AutoImageProcessor

    folder = snapshot_folder("Qwen/Qwen2-VL-7B-Instruct")
    assert folder is not None
    config = json.loads((folder / "config.json").read_text())
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    vision = model_shape(config, processor, [(1000, 1000)]).vision
    assert vision is not None
    cap = next(cap for cap in vision.caps if cap.value == 1280 * 28 * 28)
    assert cap.setting == "max_pixels" and cap.image.tokens < vision.tokens_per_image
    real = AutoImageProcessor.from_pretrained(folder, max_pixels=cap.value)
    grid = real(images=[Image.new("RGB", (1000, 1000))], return_tensors="pt")["image_grid_thw"]
    assert cap.image.patches == int(grid.prod()) and cap.image.tokens == int(grid.prod()) // 4
    assert all(c.value < 12_845_056 for c in vision.caps)
