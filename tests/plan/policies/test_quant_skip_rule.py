"""`quant.skipped_by` is transformers' own skip-module rule (`should_convert_module`), copied so
that plan decides without importing transformers: the two agree on every name and entry."""

from __future__ import annotations

import pytest
from transformers.quantizers.quantizers_utils import should_convert_module

from recipe_engine.errors import RecipeError
from recipe_engine.plan.policies.quant import quantization_plan, skipped_by

NAMES = [
    "lm_head",
    "model.embed_tokens",
    "model.layers.1.self_attn.q_proj",
    "model.layers.11.self_attn.q_proj",
    "model.layers.1.mlp.gate_proj",
    "model.layers.1.mlp.gate",
    "model.vision_model.encoder.layers.0.mlp.fc1",
    "model.visual.blocks.0.attn.qkv",
    "visual.merger.mlp.0",
    "model.decoder.layers.23.fc1",
    "multi_modal_projector.linear_1",
]
SKIPS = [
    "lm_head",
    "model.layers.1",
    "model.layers.1.",
    "layers.1",
    "model.layers.*",
    r"model\.layers\.1\d",
    "mlp.gate",
    "gate",
    "fc1",
    "vision_model",
    "model.vision_model",
    "visual",
    "model.visual",
    "q_proj",
    "proj",
    "multi_modal_projector",
    ".*merger",
    "",
]


@pytest.mark.parametrize("skip", SKIPS)
def test_skipped_by_matches_transformers(skip: str) -> None:
    for name in NAMES:
        expected = not should_convert_module(name, [skip])
        assert skipped_by(name, skip) == expected, (name, skip)


def test_an_entry_that_is_no_regex_is_refused() -> None:
    quant = {"load_in_4bit": True, "llm_int8_skip_modules": ["model.layers[0"]}
    names = ["model", "model.layers", "model.layers.0", "model.layers.0.q_proj", "lm_head"]
    with pytest.raises(RecipeError, match="is not a valid regex") as error:
        quantization_plan(quant, layout="causal_lm", module_names=names, trained=[])
    assert error.value.key == "quantization.llm_int8_skip_modules"
