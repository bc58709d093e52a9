"""Freeze policy: exactly the right parameters end up with requires_grad False."""

from __future__ import annotations

from typing import Any

import pytest
from tiny_configs import tiny_model

from recipe_engine.errors import RecipeError
from recipe_engine.plan.components import component_of
from recipe_engine.plan.policies.freeze import trained_components
from recipe_engine.resolve.inventory import inventory_of
from recipe_engine.run.policies import apply_freeze


def grads(model: Any) -> dict[str, bool]:
    return {n: p.requires_grad for n, p in model.named_parameters()}


def test_freeze_components_qwen2_vl() -> None:
    model = tiny_model("qwen2_vl")
    frozen = apply_freeze(
        model, layout="qwen2_vl", components=["vision_tower", "embeddings"], patterns=[]
    )
    for name, requires_grad in grads(model).items():
        comp = component_of(name, "qwen2_vl")
        assert requires_grad == (comp not in ("vision_tower", "embeddings")), name
    assert set(frozen) == {
        n for n in grads(model) if component_of(n, "qwen2_vl") in ("vision_tower", "embeddings")
    }
    # The projector lives inside model.visual but is not frozen with the vision tower.
    assert model.model.visual.merger.mlp[0].weight.requires_grad
    assert not model.model.visual.blocks[0].attn.qkv.weight.requires_grad


def test_freeze_unfreezes_everything_else() -> None:
    model = tiny_model("llava")
    model.requires_grad_(False)
    apply_freeze(model, layout="llava", components=["vision_tower"], patterns=[])
    assert all(
        p.requires_grad == (not n.startswith("model.vision_tower."))
        for n, p in model.named_parameters()
    )


def test_freeze_patterns() -> None:
    model = tiny_model("llama")
    frozen = apply_freeze(
        model, layout="causal_lm", components=[], patterns=[r"layers\.0\.mlp\.", r"norm"]
    )
    assert frozen and all(("layers.0.mlp." in n or "norm" in n) for n in frozen)
    assert model.model.layers[0].self_attn.q_proj.weight.requires_grad
    assert not model.model.layers[0].mlp.up_proj.weight.requires_grad
    assert not model.model.norm.weight.requires_grad


def test_freeze_bad_regex() -> None:
    with pytest.raises(RecipeError, match="not a valid regex") as info:
        apply_freeze(tiny_model("llama"), layout="causal_lm", components=[], patterns=["("])
    assert info.value.key == "freeze.patterns"


def test_freeze_pattern_matching_nothing() -> None:
    with pytest.raises(RecipeError, match="matches no parameter") as info:
        apply_freeze(tiny_model("llama"), layout="causal_lm", components=[], patterns=["visual"])
    assert info.value.key == "freeze.patterns"


def test_freeze_component_not_in_model() -> None:
    with pytest.raises(RecipeError, match="no parameters there"):
        apply_freeze(
            tiny_model("llama"), layout="causal_lm", components=["vision_tower"], patterns=[]
        )


def test_freeze_unknown_component() -> None:
    with pytest.raises(RecipeError, match="Did you mean `lm_head`") as info:
        apply_freeze(tiny_model("llama"), layout="causal_lm", components=["lmhead"], patterns=[])
    assert info.value.key == "freeze.components"


def test_freeze_tied_weights_one_side_only() -> None:
    model = tiny_model("llama", tie=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    with pytest.raises(RecipeError, match="tied"):
        apply_freeze(model, layout="causal_lm", components=["embeddings"], patterns=[])
    frozen = apply_freeze(
        model, layout="causal_lm", components=["embeddings", "lm_head"], patterns=[]
    )
    assert {"lm_head.weight", "model.embed_tokens.weight"} <= set(frozen)
    assert not model.lm_head.weight.requires_grad


def test_trained_components() -> None:
    model = tiny_model("qwen2_vl", device="meta")
    assert trained_components(inventory_of(model), layout="qwen2_vl", frozen=["vision_tower"]) == [
        "projector",
        "language_model",
        "embeddings",
        "lm_head",
    ]
    names = [n for n, _ in model.named_parameters()]
    # A component frozen entirely by patterns is not trained.
    assert trained_components(
        names, layout="qwen2_vl", frozen=["vision_tower"], patterns=["merger"]
    ) == ["language_model", "embeddings", "lm_head"]
