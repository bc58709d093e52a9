"""Component maps: every parameter of each supported architecture lands in a component."""

from __future__ import annotations

import dataclasses

import pytest
from tiny_configs import tiny_model

from recipe_engine.config.components import COMPONENTS, Layout, known_layouts, validate_components
from recipe_engine.errors import RecipeError
from recipe_engine.plan.components import (
    canonical_name,
    component_of,
    covering_modules,
    layout_for,
    report_layout,
)


@pytest.mark.parametrize(
    ("model_type", "layout"),
    [
        ("qwen2_vl", "qwen2_vl"),
        ("qwen2_5_vl", "qwen2_vl"),
        ("llava", "llava"),
        ("gemma3", "llava"),
        ("idefics3", "idefics3"),
        ("smolvlm", "idefics3"),
        ("llama", "causal_lm"),
        ("qwen2", "causal_lm"),
        ("mistral", "causal_lm"),
    ],
)
def test_layout_for_model_type(model_type: str, layout: str) -> None:
    assert layout_for(model_type).name == layout


def test_a_model_type_without_a_map_gets_an_empty_layout() -> None:
    layout = layout_for("bert")
    assert not layout.mapped
    assert component_of("encoder.layer.0.attention.self.query.weight", layout) == "other"


def test_an_unknown_layout_name_is_refused_with_a_suggestion() -> None:
    with pytest.raises(RecipeError, match="Did you mean `llava`") as error:
        layout_for("llava", layout="lava")
    assert error.value.key == "model.layout"


def test_declared_components_replace_the_layout_rules_for_those_components() -> None:
    layout = layout_for("llava", components={"projector": [r"model\.vision_tower\.head"]})
    assert component_of("model.vision_tower.head.weight", layout) == "projector"
    assert component_of("model.multi_modal_projector.linear_1.weight", layout) == "other"
    assert component_of("model.language_model.layers.0.mlp.up_proj.weight", layout) == (
        "language_model"
    )


def test_declared_components_alone_map_an_unknown_model() -> None:
    layout = layout_for("my_vlm", components={"vision_tower": "enc", "language_model": "dec"})
    assert layout.name == "declared"
    assert component_of("enc.block.0.weight", layout) == "vision_tower"
    assert component_of("head.weight", layout) == "other"


@pytest.mark.parametrize(
    ("components", "message"),
    [
        ({"vision": "x"}, "Did you mean `vision_tower`"),
        ({"projector": "(unclosed"}, "not a valid regex"),
        ({"projector": []}, "a regex or a list of regexes"),
        ("model.vision", "must map components to regexes"),
    ],
)
def test_bad_declared_components_name_the_key(components: object, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        layout_for("llava", components=components)  # type: ignore[arg-type]


def test_report_layout_groups_a_model_without_a_map_by_the_users_regexes() -> None:
    groups = report_layout(layout_for("bert"), [r"encoder\.layer\.0\.", "pooler"])
    assert component_of("bert.encoder.layer.0.output.dense.weight", groups) == (
        r"encoder\.layer\.0\."
    )
    assert component_of("bert.pooler.dense.bias", groups) == "pooler"
    assert component_of("bert.embeddings.word_embeddings.weight", groups) == "other"
    mapped = layout_for("llava")
    assert report_layout(mapped, ["x"]) is mapped


def test_layouts_are_data_that_round_trips_through_plans() -> None:
    layout = layout_for("idefics3", components={"lm_head": "lm_head"})
    assert Layout.from_dict(dataclasses.asdict(layout)) == layout
    assert set(known_layouts()) >= {"qwen2_vl", "llava", "idefics3", "causal_lm"}


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
EXPECTED["idefics3"] = {
    "model.vision_model.": "vision_tower",
    "model.connector.": "projector",
    "model.text_model.embed_tokens.": "embeddings",
    "model.text_model.": "language_model",
    "lm_head.": "lm_head",
}


@pytest.mark.parametrize(
    "kind", ["qwen2_vl", "qwen2_5_vl", "llava", "idefics3", "gemma3", "llama", "qwen2"]
)
def test_every_parameter_has_its_component(kind: str) -> None:
    model = tiny_model(kind, device="meta")
    layout = layout_for(model.config.model_type)
    architecture = layout.name
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    for name in names:
        # The first matching prefix in EXPECTED (most specific first) decides.
        want = next(c for p, c in EXPECTED[architecture].items() if name.startswith(p))
        assert component_of(name, layout) == want, name
    groups = {component_of(name, layout) for name in names}
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
