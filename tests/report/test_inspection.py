"""`report.inspection`: the verb's arguments, and what it renders from inspections (built by
hand here: no model is loaded; tests/run/test_inspecting.py measures real ones)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.report.inspection import differences, parse_args, render, render_pair
from recipe_engine.run.inspecting import Inspection, InspectOptions, Row


def inspection(label: str, **language_model) -> Inspection:
    language = Row(
        params=1000, dtypes={"float32": 1000}, devices=["cpu"], requires_grad=1000,
        stage_trainable=250, stage_params=1000,
    )  # fmt: skip
    language = replace(language, **language_model)
    rows = {"language_model": language, "total": replace(language)}
    return Inspection(label, ["stage output"], "Qwen2VLForConditionalGeneration", rows)


def test_one_model_a_line_per_component_then_its_details():
    text = render(inspection("a"))
    assert text.startswith("inspect a\n  stage output\n  architecture: Qwen2VL")
    assert "250 (25.0%)" in text and "1,000 (100.0%)" in text and "float32 1,000" in text
    assert text.endswith("no quantized modules\nno LoRA adapters")


def test_two_models_side_by_side_with_their_differences():
    quantized = ["model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"]
    a, b = inspection("a"), inspection("b", quantized=quantized, dtypes={"uint8": 500})
    assert differences(a, b) == [
        (component, column, left, right)
        for component in ("language_model", "total")  # one component: the total is the same
        for column, left, right in (
            ("dtypes", "float32 1,000", "uint8 500"),
            ("quantized", "-", "2 modules"),
        )
    ]
    text = render_pair(a, b)
    assert text.startswith("A: a  (Qwen2VLForConditionalGeneration)")
    assert "differences (4, marked *):" in text
    assert "language_model quantized: - -> 2 modules" in text
    assert "quantized in language_model: 2, e.g. model.layers.0.mlp.up_proj" in text
    assert "no differences" in render_pair(a, inspection("a again"))


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["a", "b", "c"], "one or two targets"),
        (["load_in_4bit=true"], "one or two targets"),
        (["m", "load_in_4bits=true"], "Did you mean `load_in_4bit`"),
        (["m", "load_in_4bit=true", "load_in_8bit=true"], "not both"),
        (["m", "dtype=fp8"], "float32, bfloat16, float16"),
        (["m", "b.dtype=float16"], "only one"),
    ],
)
def test_bad_arguments(words, message):
    with pytest.raises(RecipeError, match=message):
        parse_args(words)


def test_options_apply_to_both_or_one_target():
    targets, options = parse_args(["x", "y", "dtype=bfloat16", "b.load_in_4bit=true"])
    assert targets == ["x", "y"]
    assert options == [
        InspectOptions(dtype="bfloat16"),
        InspectOptions(dtype="bfloat16", load_in_4bit=True),
    ]
