"""The `diff` verb: resolved settings that differ between two recipes, stage by stage."""

from __future__ import annotations

import pytest

from recipe_engine.cli.main import main
from recipe_engine.errors import RecipeError
from recipe_engine.report.diff import ABSENT, Change, diff_recipes, render_diff


def test_r1_vs_r4_differ_exactly_in_what_lora_and_freezing_cover():
    diff = diff_recipes("r1-llm-only", "r4-joint")
    assert diff.general == []
    assert [(p.a, p.b, p.by, p.position) for p in diff.stages] == [("llm", "joint", "position", 1)]
    assert diff.stages[0].changes == [
        Change(
            "freeze.components",
            ["vision_tower", "projector", "embeddings"],
            ["embeddings"],
        ),
        Change("lora.components", ["language_model"], ["vision_tower", "language_model"]),
    ]
    # Labels, kept apart: they always differ and train nothing differently.
    assert [c.key for c in diff.labels] == [
        "recipe.name",
        "recipe.description",
        "stage.llm.template",
        "stage.llm.description",
    ]


def test_cli_output_says_how_stages_were_paired(capsys):
    assert main(["diff", "r1-llm-only", "r4-joint"]) == 0
    out = capsys.readouterr().out
    assert "names differ, paired by topological position 1" in out
    assert "lora.components: [language_model] -> [vision_tower, language_model]" in out
    assert "recipe.name" not in out and "--all shows them" in out
    assert main(["diff", "r1-llm-only", "r4-joint", "--all"]) == 0
    assert "recipe.name: r1-llm-only -> r4-joint" in capsys.readouterr().out


def test_same_named_stages_pair_by_name_and_extra_stages_are_listed():
    diff = diff_recipes("r1-llm-only", "r3-two-stage", ["b.stage.llm.train.learning_rate=1e-4"])
    by_name = {(p.a, p.b): p for p in diff.stages}
    llm = by_name[("llm", "llm")]
    assert llm.by == "name"
    assert {c.key: (c.a, c.b) for c in llm.changes} == {
        "init.from_stage": (None, "vision"),
        "train.learning_rate": (0.005, 0.0001),
    }
    assert by_name[(None, "vision")].by == "only"


def test_shared_overrides_apply_to_both_and_outside_keys_are_diffed():
    diff = diff_recipes("r2-vision-only", "text-lora", ["seed=7"])
    keys = [c.key for c in diff.general]
    assert "seed" not in keys
    assert {"model.kind", "data.name"} <= set(keys)
    lora = next(c for c in diff.stages[0].changes if c.key == "lora")
    assert lora.a is None and lora.b["r"] == 16
    assert "lora: null -> {components: [language_model]" in render_diff(diff)


def test_identical_recipes_and_absent_keys():
    diff = diff_recipes("r3-two-stage", "r3-two-stage", ["+b.stage.llm.train.max_steps=3"])
    llm = next(p for p in diff.stages if p.a == "llm")
    assert llm.changes == [Change("train.max_steps", ABSENT, 3)]
    assert "train.max_steps: (absent) -> 3" in render_diff(diff)
    assert "stage vision (vision-full -> vision-full): identical" in render_diff(diff)


def test_unknown_recipe_suggests_the_closest(capsys):
    with pytest.raises(RecipeError, match="Did you mean `r4-joint`"):
        diff_recipes("r1-llm-only", "r4-jiont")
    assert main(["diff", "r1-llm-only"]) == 2
    assert "compares two recipes, got 1" in capsys.readouterr().err
