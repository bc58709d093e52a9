"""LoRA policy: exact targets inside the LoRA components, full training via modules_to_save."""

from __future__ import annotations

import peft
import pytest
import torch
import transformers as tf
from policy_steps import apply_lora
from policy_steps import lora_config as build_lora_config
from tiny_configs import QWEN_TEXT, QWEN_VISION, tiny_model

from recipe_engine.errors import RecipeError
from recipe_engine.plan.components import component_of
from recipe_engine.plan.policies.lora import plan_lora
from recipe_engine.resolve.inventory import inventory_of
from recipe_engine.run.policies import apply_freeze

LM_LINEARS = [
    f"model.language_model.layers.0.{m}"
    for m in (
        "mlp.down_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "self_attn.k_proj",
        "self_attn.o_proj",
        "self_attn.q_proj",
        "self_attn.v_proj",
    )
]


def test_all_linear_inside_language_model_only() -> None:
    model = tiny_model("qwen2_vl")
    lora = {"r": 4, "target_modules": "all-linear", "components": ["language_model"]}
    plan = plan_lora(inventory_of(model), layout="qwen2_vl", lora=lora, frozen=["vision_tower"])
    assert plan.targets == LM_LINEARS
    assert plan.components == ["language_model"]
    # Everything else that is not frozen is trained in full.
    assert plan.fully_trained == ["projector", "embeddings", "lm_head"]
    assert plan.modules_to_save == [
        "lm_head",
        "model.language_model.embed_tokens",
        "model.visual.merger",
    ]


def test_default_components_skip_lm_head_and_embeddings() -> None:
    model = tiny_model("qwen2_vl")
    targets = lora_targets(model, layout="qwen2_vl", lora={"r": 4}, frozen=["vision_tower"])
    # Default: all-linear over projector and language model, never lm_head or the tower.
    assert all(component_of(t, "qwen2_vl") in ("projector", "language_model") for t in targets)
    assert "model.visual.merger.mlp.0" in targets and "lm_head" not in targets
    assert not any(t.startswith("model.visual.blocks") for t in targets)


def test_apply_lora_requires_grad() -> None:
    model = tiny_model("qwen2_vl")
    apply_freeze(model, layout="qwen2_vl", components=["vision_tower", "embeddings"], patterns=[])
    lora = {
        "r": 4,
        "lora_alpha": 8,
        "target_modules": "all-linear",
        "components": ["language_model"],
    }
    peft_model = apply_lora(
        model, layout="qwen2_vl", lora=lora, frozen=["vision_tower", "embeddings"]
    )
    assert isinstance(peft_model, peft.PeftModel)
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    for name in trainable:
        assert "lora_" in name or ".modules_to_save." in name, name
    assert "base_model.model.lm_head.modules_to_save.default.weight" in trainable
    assert "base_model.model.model.visual.merger.modules_to_save.default.mlp.0.weight" in trainable
    lora_layers = {n.split(".lora_")[0] for n in trainable if "lora_" in n}
    assert lora_layers == {"base_model.model." + t for t in LM_LINEARS}
    assert not any("visual.blocks" in n or "embed_tokens" in n for n in trainable)
    # The adapted model still runs.
    out = peft_model(input_ids=torch.tensor([[5, 6, 7]]))
    assert out.logits.shape == (1, 3, 128)


def test_modules_to_save_for_lm_head() -> None:
    model = tiny_model("llama")
    config = build_lora_config(model, layout="causal_lm", lora={"r": 4}, frozen=["embeddings"])
    assert config.task_type == "CAUSAL_LM"
    assert config.modules_to_save == ["lm_head"]
    assert sorted(config.target_modules) == [
        t.replace("model.language_model.", "model.") for t in LM_LINEARS
    ]
    peft_model = apply_lora(model, layout="causal_lm", lora={"r": 4}, frozen=["embeddings"])
    params = dict(peft_model.named_parameters())
    assert params["base_model.model.lm_head.modules_to_save.default.weight"].requires_grad
    assert not params["base_model.model.lm_head.original_module.weight"].requires_grad


def test_target_in_frozen_component() -> None:
    model = tiny_model("qwen2_vl", device="meta")
    with pytest.raises(RecipeError, match="vision_tower") as info:
        lora_targets(
            model,
            layout="qwen2_vl",
            lora={"target_modules": ["qkv"]},
            frozen=["vision_tower"],
        )
    assert info.value.key == "lora.target_modules"
    with pytest.raises(RecipeError, match="frozen"):
        lora_targets(
            model,
            layout="qwen2_vl",
            lora={"target_modules": r"model\.visual\.blocks\..*"},
            frozen=["vision_tower"],
        )
    with pytest.raises(RecipeError, match="freezes") as info:
        lora_targets(
            model,
            layout="qwen2_vl",
            lora={"components": ["vision_tower"]},
            frozen=["vision_tower"],
        )
    assert info.value.key == "lora.components"


def test_suffix_target_restricted_to_lora_components() -> None:
    # CLIP and Llama both name their projections q_proj/v_proj.
    model = tiny_model("llava", device="meta")
    plan = plan_lora(
        inventory_of(model),
        layout="llava",
        lora={"target_modules": ["q_proj", "v_proj"]},
        frozen=["vision_tower"],
    )
    assert plan.targets == [
        "model.language_model.layers.0.self_attn.q_proj",
        "model.language_model.layers.0.self_attn.v_proj",
    ]
    assert len(plan.dropped["q_proj"]) == 2  # the two CLIP layers, frozen
    # The projector has no q_proj: with default components it is trained in full instead.
    assert plan.components == ["language_model"]
    assert "projector" in plan.fully_trained
    assert "model.multi_modal_projector" in plan.modules_to_save


def test_explicit_component_without_target() -> None:
    model = tiny_model("llava", device="meta")
    with pytest.raises(RecipeError, match="no LoRA target lies there"):
        plan_lora(
            inventory_of(model),
            layout="llava",
            lora={"target_modules": ["q_proj"], "components": ["language_model", "projector"]},
            frozen=["vision_tower"],
        )


def test_target_outside_lora_components() -> None:
    model = tiny_model("llama", device="meta")
    with pytest.raises(RecipeError, match="not a LoRA component"):
        lora_targets(
            model,
            layout="causal_lm",
            lora={"target_modules": ["lm_head"], "components": ["language_model"]},
            frozen=[],
        )
    # Named explicitly with default components, lm_head can carry an adapter.
    plan = plan_lora(
        inventory_of(model),
        layout="causal_lm",
        lora={"target_modules": ["lm_head"]},
        frozen=["embeddings"],
    )
    assert plan.targets == ["lm_head"] and plan.components == ["lm_head"]
    assert plan.fully_trained == ["language_model"]


def test_no_match_lists_available_names() -> None:
    model = tiny_model("qwen2_vl", device="meta")
    with pytest.raises(RecipeError, match="Did you mean `q_proj`") as info:
        lora_targets(model, layout="qwen2_vl", lora={"target_modules": ["q_prj"]}, frozen=[])
    assert "gate_proj" in str(info.value)
    assert info.value.key == "lora.target_modules"
    with pytest.raises(RecipeError, match="matches no module"):
        lora_targets(model, layout="qwen2_vl", lora={"target_modules": r".*\.nothing"}, frozen=[])


def test_regex_target() -> None:
    model = tiny_model("qwen2_vl", device="meta")
    targets = lora_targets(
        model,
        layout="qwen2_vl",
        lora={"target_modules": r".*language_model.*\.(q|v)_proj"},
        frozen=["vision_tower"],
    )
    assert targets == [LM_LINEARS[5], LM_LINEARS[6]]


def test_exclude_modules() -> None:
    model = tiny_model("llama", device="meta")
    targets = lora_targets(
        model,
        layout="causal_lm",
        lora={"exclude_modules": ["down_proj", "up_proj"]},
        frozen=[],
    )
    assert not any(t.endswith(("down_proj", "up_proj")) for t in targets) and len(targets) == 5


def test_unknown_lora_key() -> None:
    """Keys are checked once, where the recipe's LoRA section is read (before any model)."""
    from recipe_engine.config.library_keys import validate_lora

    with pytest.raises(RecipeError, match="Did you mean `lora_alpha`") as info:
        validate_lora({"lora_alpah": 8})
    assert info.value.key == "lora.lora_alpah"
    with pytest.raises(RecipeError, match="set by the engine"):
        validate_lora({"modules_to_save": ["lm_head"]})


def test_meta_device_model_resolves_targets() -> None:
    config = tf.Qwen2VLConfig(text_config=QWEN_TEXT, vision_config=dict(QWEN_VISION, embed_dim=32))
    with torch.device("meta"):
        model = tf.Qwen2VLForConditionalGeneration(config)
    assert next(model.parameters()).device.type == "meta"
    lora = {"components": ["language_model"], "target_modules": "all-linear"}
    assert lora_targets(model, layout="qwen2_vl", lora=lora, frozen=[]) == LM_LINEARS
    config = build_lora_config(
        model, layout="qwen2_vl", lora=lora, frozen=["vision_tower", "lm_head"]
    )
    assert config.target_modules == set(LM_LINEARS)
    assert config.modules_to_save == ["model.language_model.embed_tokens", "model.visual.merger"]


def test_pattern_frozen_params_stay_frozen_in_modules_to_save() -> None:
    model = tiny_model("qwen2_vl")
    patterns = [r"merger\.ln_q"]
    apply_freeze(model, layout="qwen2_vl", components=["vision_tower"], patterns=patterns)
    lora = {"r": 4, "components": ["language_model"]}
    peft_model = apply_lora(
        model, layout="qwen2_vl", lora=lora, frozen=["vision_tower"], patterns=patterns
    )
    params = dict(peft_model.named_parameters())
    copy = "base_model.model.model.visual.merger.modules_to_save.default."
    assert params[copy + "mlp.0.weight"].requires_grad
    assert not params[copy + "ln_q.weight"].requires_grad
    # all-linear never adapts a layer whose weight a pattern freezes.
    targets = lora_targets(
        model, layout="qwen2_vl", lora={"r": 4}, frozen=[], patterns=[r"layers\.0\.mlp\."]
    )
    assert not any(".mlp." in t and "language_model" in t for t in targets)


def test_gradient_checkpointing_unquantized() -> None:
    model = tiny_model("llama")
    frozen = ["embeddings", "lm_head"]
    apply_freeze(model, layout="causal_lm", components=frozen, patterns=[])
    peft_model = apply_lora(
        model, layout="causal_lm", lora={"r": 2}, frozen=frozen, gradient_checkpointing=True
    )
    peft_model.train()
    ids = torch.tensor([[5, 6, 7, 8]])
    peft_model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert len(grads) == 7 and all(g is not None for g in grads)


def test_gradient_checkpointing_reentrant() -> None:
    model = tiny_model("llama")
    peft_model = apply_lora(
        model,
        layout="causal_lm",
        lora={"r": 2},
        frozen=["embeddings", "lm_head"],
        gradient_checkpointing=True,
        gradient_checkpointing_kwargs={"use_reentrant": True},
    )
    peft_model.train()
    ids = torch.tensor([[5, 6, 7, 8]])
    peft_model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is not None for n, p in peft_model.named_parameters() if "lora_B" in n)


def test_omegaconf_mapping_becomes_plain_config() -> None:
    from omegaconf import OmegaConf

    model = tiny_model("llama", device="meta")
    lora = OmegaConf.create(
        {"r": 4, "target_modules": ["q_proj", "v_proj"], "rank_pattern": {"q_proj": 8}}
    )
    config = build_lora_config(model, layout="causal_lm", lora=lora, frozen=["embeddings"])
    assert config.target_modules == {
        "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.v_proj",
    }
    assert type(config.rank_pattern) is dict and config.rank_pattern == {"q_proj": 8}
    assert config.modules_to_save == ["lm_head"]


def lora_targets(model, **policy) -> list[str]:
    """The exact module names that get adapters (sorted), as the planner resolves them."""
    return plan_lora(inventory_of(model), **policy).targets
