"""`plan`'s text: a VLM stage's images line, the visual tokens its processor makes of the
data's images, beside the memory estimate that counts them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from data_kit import sized_pictures
from machines import CPU_ONLY
from PIL import Image

from recipe_engine.cli.main import main
from recipe_engine.config.compose import compose_config
from recipe_engine.plan.memory import MemoryRequest, estimate_memory
from recipe_engine.resolve.resolver import snapshot_folder
from recipe_engine.run.planning import plan_from_config

QWEN2_VL = "Qwen/Qwen2-VL-7B-Instruct"


def vision_request(data: Path, *overrides: str) -> MemoryRequest:
    """The vision stage's memory request for r3 on Qwen2-VL-7B (its shipped snapshot: the
    hub's processor limits, offline) over the data file."""
    args = ["recipe=r3-two-stage", "model=qwen2-vl-7b", "data.source=local", f"data.path={data}"]
    stage = plan_from_config(compose_config([*args, *overrides]), CPU_ONLY).stages["vision"]
    assert stage.memory is not None
    return stage.memory.request


def test_plan_says_a_1000px_images_visual_tokens_and_its_estimate_counts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import AutoImageProcessor

    big = sized_pictures(tmp_path / "big", [(1000, 1000)])
    small = sized_pictures(tmp_path / "small", [(100, 100)])
    argv = ["plan", "recipe=r3-two-stage", "model=qwen2-vl-7b", "data.source=local"]
    assert main([*argv, f"data.path={big}"]) == 0
    out = capsys.readouterr().out
    # What the real processor makes of the image (Qwen2VLProcessor: a token per 2 x 2 patches).
    real = AutoImageProcessor.from_pretrained(snapshot_folder(QWEN2_VL))
    pixels = real(images=[Image.open(big.parent / "pics" / "1000x1000.png")], return_tensors="pt")
    patches = int(pixels["image_grid_thw"].prod())
    line = (
        f"images:    1000x1000 px -> {patches // 4:,} visual tokens each (processor: max_pixels "
        "12,845,056, patch 14, merge 2)"
    )
    assert out.count(line) == 2  # both stages read the images

    # The estimate counts the processor's own patches, tokens and pixel values: it is the
    # small images' request with the image's counts put in, and the activations grow by them.
    counted, few = vision_request(big), vision_request(small)
    assert few.shape.vision is not None and few.shape.vision.tokens_per_image == 16  # 112 px
    real_vision = dataclasses.replace(
        few.shape.vision,
        patches_per_image=patches,
        tokens_per_image=patches // 4,
        pixel_values_per_image=pixels["pixel_values"].numel(),
    )
    expected = estimate_memory(
        dataclasses.replace(few, shape=dataclasses.replace(few.shape, vision=real_vision))
    )
    assert estimate_memory(counted) == expected
    assert expected.activations > 50 * estimate_memory(few).activations
    vision = out[out.index("stage vision") : out.index("stage llm")]
    activations = re.search(r"activations ([\d.]+)", vision)
    assert activations is not None and float(activations[1]) == round(expected.activations, 1)


def test_plan_says_a_capped_processors_tokens_and_the_cap_enters_the_stage_key(
    tmp_path: Path,
) -> None:
    """`model.processor.max_pixels` caps the images for the estimate (as for training and
    evaluation, which load the processor with it), and is part of the stage's key; without
    it the key is the one there was."""
    data = sized_pictures(tmp_path, [(1000, 1000)])
    args = ["recipe=r3-two-stage", "model=qwen2-vl-7b", "data.source=local", f"data.path={data}"]
    default = plan_from_config(compose_config(args), CPU_ONLY)
    capped = plan_from_config(compose_config([*args, "+model.processor.max_pixels=1003520"]),
                              CPU_ONLY)  # fmt: skip
    vision = capped.stages["vision"].memory.request.shape.vision  # type: ignore[union-attr]
    assert vision is not None and vision.tokens_per_image == 35 * 35  # 980 x 980 px
    assert "max_pixels 1,003,520" in vision.describe_images(1)
    assert capped.stages["vision"].fingerprint != default.stages["vision"].fingerprint
    unset = plan_from_config(compose_config([*args, "model.processor={}"]), CPU_ONLY)
    assert unset.stages["vision"].fingerprint == default.stages["vision"].fingerprint
