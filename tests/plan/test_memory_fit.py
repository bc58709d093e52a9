"""What `plan` says when a stage does not fit: here, a processor whose default image limit
makes the data's images too many tokens for the GPU, and the cap that fits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from data_kit import sized_pictures

from recipe_engine.cli.main import main


def test_images_too_large_for_the_gpu_are_refused_naming_the_processor_cap_that_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Qwen2-VL-7B's processor takes a 2000x2000 px photo whole (up to 12.8 M pixels an
    image): 5,041 visual tokens, and r1's LoRA stage no longer fits a 24 GiB card (1000x1000 px
    does). The refusal names the cap; with it the stage fits."""
    data = sized_pictures(tmp_path, [(2000, 2000)])
    argv = ["plan", "recipe=r1-llm-only", "model=qwen2-vl-7b", "hardware=1x-rtx4090",
            "data.source=local", f"data.path={data}"]  # fmt: skip
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "fits nowhere" in error
    cap = re.search(r"(\+\+model\.processor\.max_pixels=(\d+)) \(the images then give ([\d,]+) "
                    r"visual tokens each, not 5,041\)", error)  # fmt: skip
    assert cap is not None, error
    assert main([*argv, cap[1]]) == 0
    out = capsys.readouterr().out
    tokens, limit = cap[3], int(cap[2])
    assert f"2000x2000 px -> {tokens} visual tokens each (processor: max_pixels {limit:,}" in out
    assert "warning: it does not fit" not in out
