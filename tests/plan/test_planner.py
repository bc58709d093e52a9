"""`plan`: every shipped recipe is validated, fingerprinted and placed without loading weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from machines import CPU_ONLY

from recipe_engine.cli.main import main
from recipe_engine.config.compose import available, compose_config
from recipe_engine.errors import RecipeError
from recipe_engine.plan.render import render_plan
from recipe_engine.run.planning import plan_from_config

USER_RECIPES = Path(__file__).resolve().parents[1] / "fixtures" / "recipes"


def plan(*overrides: str, extra_dirs=()):
    return plan_from_config(compose_config(list(overrides), extra_dirs=extra_dirs), CPU_ONLY)


@pytest.mark.parametrize("recipe", available("recipe"))
def test_every_shipped_recipe_plans_on_this_machine(recipe):
    result = plan(f"recipe={recipe}")
    for stage in result.stages.values():
        assert stage.placement.device == "cpu" and stage.placement.n_gpu == 0
        assert stage.policy.trained or stage.policy.lora.targets


def test_two_stage_plan_on_a_two_gpu_profile_matches_the_field_notes_fix(capsys):
    """plan recipe=r3-two-stage gpus=6,7 hardware=2x-rtx6000-ada, from a CPU-only laptop."""
    assert main(["plan", "recipe=r3-two-stage", "gpus=6,7", "hardware=2x-rtx6000-ada"]) == 0
    out = capsys.readouterr().out
    assert out.index("stage vision") < out.index("stage llm")
    llm = out[out.index("stage llm") :]
    assert "parent: vision" in llm
    assert "device_map: {'': 0}" in llm
    assert "n_gpu: 1" in llm and "never DataParallel" in llm
    assert "idle" in llm and "parallel=ddp" in llm
    assert "CUDA_VISIBLE_DEVICES=6,7" in out


def test_plan_reports_policies_per_stage():
    result = plan("recipe=r3-two-stage")
    vision, llm = result.stages["vision"], result.stages["llm"]
    assert vision.policy.trained == ["vision_tower", "projector"]
    assert "language_model" in vision.policy.frozen and vision.policy.bits == "none"
    assert llm.policy.lora.components == ["language_model"] and llm.policy.trained == ["lm_head"]
    assert llm.policy.bits == "4bit"
    assert all(".visual." not in target for target in llm.policy.lora.targets)
    # The exact library settings run will use: skip-modules keep the vision tower in full.
    assert llm.policy.quantization.config["llm_int8_skip_modules"]
    assert llm.policy.lora.config["target_modules"] == llm.policy.lora.targets
    assert llm.data.format == "vlm" and llm.data.train_rows == 960 and llm.data.eval_rows == 96
    text = render_plan(result)
    assert "4bit nf4 on language_model" in text


def test_stage_key_ignores_logging_and_follows_parent_settings():
    base = plan("recipe=r3-two-stage")
    logged = plan(
        "recipe=r3-two-stage", "stage.llm.train.logging_steps=1", "output_root=/elsewhere"
    )
    assert logged.stages["llm"].fingerprint == base.stages["llm"].fingerprint
    vision_changed = plan("recipe=r3-two-stage", "stage.vision.train.learning_rate=1e-3")
    assert vision_changed.stages["llm"].fingerprint != base.stages["llm"].fingerprint
    # r1's llm stage starts from the base model, r3's from the vision stage: different keys.
    assert plan("recipe=r1-llm-only").stages["llm"].fingerprint != base.stages["llm"].fingerprint


def test_user_recipes_come_from_another_folder_without_editing_the_package():
    result = plan("recipe=user-fanout", extra_dirs=[str(USER_RECIPES)])
    assert result.graph.children("vision") == ["llm", "joint"]


def test_hub_model_plans_offline_with_checks_waiting_for_load_time():
    """A plan for another machine: `plan` says what it could not check; `run` refuses."""
    result = plan("recipe=r1-llm-only", "model=qwen2-vl-7b")
    stage = result.stages["llm"]
    assert any("module checks wait for load time" in note for note in stage.notes)
    assert stage.init.description == "hub model Qwen/Qwen2-VL-7B-Instruct"
    assert "HF_HUB_OFFLINE=1 is set" in stage.init.unavailable


def test_a_child_of_an_unreadable_hub_stage_does_not_ask_for_the_config_again(monkeypatch):
    """The root stage already knows the hub model cannot be had here; asking again for the
    child imports transformers and, with a network that does not answer, waits for the
    hub's timeouts (26 s for r3 on a 7B entry)."""
    from recipe_engine.resolve import resolver

    asked = []
    real = resolver.model_inventory
    asking = lambda model, *more: asked.append(model.id) or real(model, *more)  # noqa: E731
    monkeypatch.setattr(resolver, "model_inventory", asking)
    result = plan("recipe=r3-two-stage", "model=qwen2-vl-7b")
    assert all(stage.policy.deferred for stage in result.stages.values())
    assert asked == []


def test_the_zero_stage_comes_from_the_stages_deepspeed_config(tmp_path):
    from recipe_engine.errors import RecipeError
    from recipe_engine.plan.trainer_settings import zero_stage
    from recipe_engine.resolve.resolver import deepspeed_config

    def stage_of(train):
        return zero_stage(deepspeed_config("llm", train))

    assert stage_of({}) == 2  # the engine's default config
    assert stage_of({"deepspeed": {"zero_optimization": {"stage": 3}}}) == 3
    config = tmp_path / "ds.json"
    config.write_text('{"zero_optimization": {"stage": 1}}')
    assert stage_of({"deepspeed": str(config)}) == 1
    with pytest.raises(RecipeError, match="stage.llm.train.deepspeed"):
        stage_of({"deepspeed": str(tmp_path / "missing.json")})


def test_library_keys_can_be_set_on_a_template_that_leaves_the_section_empty():
    # `stage.vision.lora.r=8` on the command line arrives as `++stage.vision.lora.r=8`.
    vision = plan("recipe=r3-two-stage", "++stage.vision.lora.r=8").stages["vision"]
    assert vision.policy.lora.config["r"] == 8
    assert vision.policy.lora.components == ["vision_tower", "projector"]
    qlora = plan("recipe=text-lora", "++stage.llm.quantization.load_in_4bit=true").stages["llm"]
    assert qlora.policy.bits == "4bit" and qlora.policy.quantization.config["load_in_4bit"]


def test_an_empty_library_section_is_no_section_and_keeps_the_stage_key():
    base = plan("recipe=r3-two-stage").stages["vision"]
    assert base.config.lora is None and base.policy.lora is None
    assert (
        base.fingerprint
        == plan("recipe=r3-two-stage", "stage.vision.lora=null").stages["vision"].fingerprint
    )


def test_a_vision_only_stage_on_text_rows_is_refused_before_anything_loads(tmp_path):
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    (tmp_path / "chat.jsonl").write_text((json.dumps({"messages": turns}) + "\n") * 8)
    with pytest.raises(RecipeError, match="has no images, so nothing it trains") as error:
        plan(
            "recipe=r2-vision-only",
            "data.source=local",
            f"data.path={tmp_path / 'chat.jsonl'}",
            "data.eval_fraction=0.25",
        )
    assert error.value.key == "stage.vision.data"


def test_a_declared_layout_enters_the_key_and_plan_prints_it():
    default = plan("recipe=r3-two-stage", "model=tiny-idefics3")
    declared = plan(
        "recipe=r3-two-stage",
        "model=tiny-idefics3",
        "++model.components.projector='model\\.connector(\\.|$)'",
    )
    assert default.stages["vision"].policy.layout.name == "idefics3"
    assert declared.stages["vision"].policy.layout.name == "idefics3 + declared"
    for name in ("vision", "llm"):
        assert default.stages[name].fingerprint != declared.stages[name].fingerprint
    assert "layout:    idefics3 + declared" in render_plan(declared)


def test_a_model_without_a_map_plans_from_patterns_and_names_the_fix_for_components():
    patterns = plan("recipe=user-idefics3-patterns", extra_dirs=[str(USER_RECIPES)])
    llm = patterns.stages["llm"].policy
    assert llm.layout is not None and not llm.layout.mapped
    assert llm.lora is not None and len(llm.lora.targets) == 14
    with pytest.raises(RecipeError, match="has no component map") as error:
        plan("recipe=r3-two-stage", "model=tiny-idefics3", "++model.layout=none")
    assert "model.components" in str(error.value) and "freeze.patterns" in str(error.value)
