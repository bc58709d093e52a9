"""A model entry's own settings, checked before anything is read by them: `model.processor`."""

from __future__ import annotations

import pytest

from recipe_engine.cli.main import main


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["recipe=text-lora", "model=tiny-qwen2", "+model.processor.max_pixels=3136"],
         "`model.processor` sets a vision-language model's processor"),
        (["+model.processor.max_pixels=big"], "`model.processor.max_pixels` is 'big'"),
        (["+model.processor.size=1456"], "`model.processor.size` is 1456; it takes a mapping"),
        (["+model.processor.do_image_splitting=1"], "it takes true or false"),
    ],
)  # fmt: skip
def test_processor_settings_the_estimate_cannot_count_by_are_refused(
    overrides: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *overrides]) == 2
    error = capsys.readouterr().err
    assert named in error and error.count("\n") == 1
