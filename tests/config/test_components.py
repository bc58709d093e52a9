"""Component maps: every parameter of each supported architecture lands in a component."""

from __future__ import annotations

import pytest
from tiny_configs import tiny_model

from recipe_engine.config.components import (
    ARCHITECTURES,
    COMPONENTS,
    architecture_of,
    canonical_name,
    component_of,
    covering_modules,
    validate_components,
)
from recipe_engine.errors import RecipeError


@pytest.mark.parametrize(
    ("model_type", "architecture"),
    [
        ("qwen2_vl", "qwen2_vl"),
        ("qwen2_5_vl", "qwen2_5_vl"),
        ("llava", "llava"),
        ("llama", "causal_lm"),
        ("qwen2", "causal_lm"),
        ("mistral", "causal_lm"),
    ],
)
def test_architecture_of(model_type: str, architecture: str) -> None:
    assert architecture_of(model_type) == architecture


def test_architecture_of_unknown_suggests_patterns() -> None:
    with pytest.raises(RecipeError, match="freeze.patterns"):
        architecture_of("bert")
    with pytest.raises(RecipeError, match="Did you mean `qwen2_vl`"):
        architecture_of("qwen2-vl")


# Expected component of each top-level group of names, per architecture.
EXPECTED = {
    "qwen2_vl": {
        "model.visual.merger.": "projector",
        "model.visual.": "vision_tower",
        "model.language_model.embed_tokens.": "embeddings",
        "model.language_model.": "language_model",
        "lm_head.": "lm_head",
    },
    "llava": {
        "model.vision_tower.": "vision_tower",
        "model.multi_modal_projector.": "projector",
        "model.language_model.embed_tokens.": "embeddings",
        "model.language_model.": "language_model",
        "lm_head.": "lm_head",
    },
    "causal_lm": {
        "model.embed_tokens.": "embeddings",
        "model.": "language_model",
        "lm_head.": "lm_head",
    },
}
EXPECTED["qwen2_5_vl"] = EXPECTED["qwen2_vl"]


@pytest.mark.parametrize("kind", ["qwen2_vl", "qwen2_5_vl", "llava", "llama", "qwen2"])
def test_every_parameter_has_its_component(kind: str) -> None:
    model = tiny_model(kind, device="meta")
    architecture = architecture_of(model.config.model_type)
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    for name in names:
        # The first matching prefix in EXPECTED (most specific first) decides.
        want = next(c for p, c in EXPECTED[architecture].items() if name.startswith(p))
        assert component_of(name, architecture) == want, name
    groups = {component_of(name, architecture) for name in names}
    assert "other" not in groups
    expected = (
        set(COMPONENTS)
        if architecture != "causal_lm"
        else set(COMPONENTS)
        - {
            "vision_tower",
            "projector",
        }
    )
    assert set(groups) == expected


def test_architectures_cover_required_keys() -> None:
    assert {"qwen2_vl", "qwen2_5_vl", "llava", "causal_lm"} <= set(ARCHITECTURES)


@pytest.mark.parametrize(
    ("name", "architecture", "component"),
    [
        # PEFT-wrapped names.
        ("base_model.model.lm_head.modules_to_save.default.weight", "qwen2_vl", "lm_head"),
        ("base_model.model.lm_head.original_module.weight", "qwen2_vl", "lm_head"),
        (
            "base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.default.weight",
            "qwen2_vl",
            "language_model",
        ),
        (
            "base_model.model.model.language_model.layers.0.mlp.up_proj.base_layer.weight",
            "llava",
            "language_model",
        ),
        (
            "base_model.model.model.visual.merger.modules_to_save.default.mlp.0.weight",
            "qwen2_vl",
            "projector",
        ),
        ("module._orig_mod.model.embed_tokens.weight", "causal_lm", "embeddings"),
        # transformers 4.x checkpoint names.
        ("visual.merger.mlp.0.weight", "qwen2_vl", "projector"),
        ("visual.blocks.0.attn.qkv.weight", "qwen2_5_vl", "vision_tower"),
        ("model.layers.0.self_attn.q_proj.weight", "qwen2_vl", "language_model"),
        ("model.embed_tokens.weight", "qwen2_vl", "embeddings"),
        ("language_model.model.embed_tokens.weight", "llava", "embeddings"),
        ("language_model.model.layers.0.mlp.up_proj.weight", "llava", "language_model"),
        ("language_model.lm_head.weight", "llava", "lm_head"),
        ("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", "llava", "vision_tower"),
        # Boundaries: no accidental prefix matches.
        ("lm_head_extra.weight", "causal_lm", "other"),
        ("score.weight", "causal_lm", "other"),
    ],
)
def test_component_of_wrapped_and_legacy_names(
    name: str, architecture: str, component: str
) -> None:
    assert component_of(name, architecture) == component


def test_canonical_name() -> None:
    assert (
        canonical_name("base_model.model.lm_head.modules_to_save.default.weight")
        == "lm_head.weight"
    )
    assert canonical_name("model.x.q_proj.lora_B.default.weight") == (
        "model.x.q_proj.lora_B.default.weight"
    )


def test_component_of_unknown_architecture() -> None:
    with pytest.raises(RecipeError, match="Did you mean `llava`"):
        component_of("lm_head.weight", "lava")


def test_validate_components() -> None:
    validate_components(["vision_tower", "lm_head", "other"], "freeze.components")
    with pytest.raises(RecipeError, match="Did you mean `vision_tower`") as info:
        validate_components(["vision_towr"], "freeze.components")
    assert info.value.key == "freeze.components"
    assert "freeze.components" in str(info.value)
    with pytest.raises(RecipeError, match="must be a list"):
        validate_components("lm_head", "lora.components")  # type: ignore[arg-type]


def test_covering_modules() -> None:
    params = [
        "model.visual.blocks.0.w",
        "model.visual.merger.w",
        "model.lm.layers.0.w",
        "model.direct",
        "lm_head.weight",
    ]
    modules, uncovered = covering_modules(
        params,
        ["model.visual.blocks.0.w", "model.visual.merger.w", "lm_head.weight"],
        names_are_modules=False,
    )
    assert modules == ["lm_head", "model.visual"]
    assert uncovered == []
    # A parameter sitting directly on a mixed container cannot be covered by a module.
    modules, uncovered = covering_modules(params, ["model.direct"], names_are_modules=False)
    assert modules == [] and uncovered == ["model.direct"]
    # Module names: the module itself may be the cover.
    mods = ["model.visual.blocks.0", "model.visual.merger", "lm_head"]
    assert covering_modules(mods, ["model.visual.blocks.0", "lm_head"], names_are_modules=True)[
        0
    ] == ["lm_head", "model.visual.blocks"]
