"""plan.trainer_settings: the loss flags follow the data (the format registry's `Loss` of the
row shape): `assistant_only_loss` for conversations whose chat template marks the assistant's
turns, `completion_only_loss` for prompt/completion rows, a contradicting setting refused at
plan time; templates set neither."""

from __future__ import annotations

from pathlib import Path

import pytest
from plans import pairs_csv, plan

from recipe_engine.config.compose import CONFIG_DIR
from recipe_engine.errors import RecipeError
from recipe_engine.plan.trainer_settings import choose_loss
from recipe_engine.resolve.templates import MARKED, PATCHED, UNMARKED, UNREAD

STAGES = CONFIG_DIR / "stages"


def test_no_shipped_template_sets_a_loss_flag() -> None:
    for template in STAGES.glob("*.yaml"):
        text = template.read_text()
        assert "assistant_only_loss" not in text and "completion_only_loss" not in text, template


@pytest.mark.parametrize(
    ("fmt", "template", "flags"),
    [
        ("messages", MARKED, {"assistant_only_loss": True}),
        ("vlm", PATCHED, {"assistant_only_loss": True}),
        ("messages", UNMARKED, {"assistant_only_loss": False}),
        ("vlm", UNREAD, {"assistant_only_loss": False}),
        ("prompt_completion", UNREAD, {"completion_only_loss": True}),
        ("vlm_prompt_completion", MARKED, {"completion_only_loss": True}),
    ],
)
def test_the_flag_follows_the_format_and_the_chat_template(fmt, template, flags) -> None:
    choice = choose_loss("llm", {}, fmt, template)
    assert choice.flags == flags
    assert choice.note.startswith("loss: ")


def test_a_flag_the_user_sets_is_kept_and_a_contradiction_refused() -> None:
    kept = choose_loss("llm", {"assistant_only_loss": False}, "messages", MARKED)
    assert kept.flags == {} and "assistant_only_loss=false, as set in stage.llm.train" in kept.note
    with pytest.raises(RecipeError) as info:
        choose_loss("llm", {"assistant_only_loss": True}, "vlm_prompt_completion", MARKED)
    assert info.value.key == "stage.llm.train.assistant_only_loss"
    assert "Drop the key" in str(info.value) and "completion_only_loss" in str(info.value)
    with pytest.raises(RecipeError) as info:
        choose_loss("llm", {"completion_only_loss": True}, "messages", MARKED)
    assert info.value.key == "stage.llm.train.completion_only_loss"
    assert "data.columns.prompt=" in str(info.value)


def test_plan_chooses_the_flag_prints_it_and_keys_it(tmp_path: Path) -> None:
    default = plan("recipe=text-lora").stages["llm"]
    assert default.trainer["assistant_only_loss"] is True
    assert any("loss: assistant_only_loss (messages rows" in n for n in default.notes)
    # The default run keeps its key: the chosen flag is what the template used to set.
    explicit = plan("recipe=text-lora", "++stage.llm.train.assistant_only_loss=true").stages["llm"]
    assert explicit.fingerprint == default.fingerprint

    data = ["data.source=local", f"data.path={pairs_csv(tmp_path)}", "data.eval_fraction=0.25"]
    pairs = plan("recipe=text-lora", *data).stages["llm"]
    assert pairs.trainer["completion_only_loss"] is True
    assert "assistant_only_loss" not in pairs.trainer
    assert any("completion_only_loss (prompt/completion rows)" in n for n in pairs.notes)
    off = plan("recipe=text-lora", *data, "++stage.llm.train.completion_only_loss=false")
    assert off.stages["llm"].fingerprint != pairs.fingerprint  # the flag is in the key
    with pytest.raises(RecipeError) as info:
        plan("recipe=text-lora", *data, "++stage.llm.train.assistant_only_loss=true")
    assert "prompt/completion rows" in str(info.value)


# --- precision on a GPU: what the Trainer's `bf16=True` means (seen on an H100, docs/gpu/) ---

GPU = ("hardware=1x-rtx4090", "gpus=0")


def test_a_float32_model_left_at_dtype_auto_trains_with_bf16_autocast_on_a_gpu() -> None:
    vision = plan("recipe=r2-vision-only", *GPU).stages["vision"]
    assert vision.dtype == "float32" and vision.trainer["bf16"] is True
    assert any("bf16 autocast" in note for note in vision.notes)


def test_a_stage_that_names_float32_keeps_pure_float32_on_a_gpu() -> None:
    vision = plan("recipe=r2-vision-only", *GPU, "stage.vision.dtype=float32").stages["vision"]
    assert vision.trainer["bf16"] is False
    assert not any("autocast" in note for note in vision.notes)


def test_on_the_cpu_a_float32_stage_stays_float32_and_its_key_is_unchanged() -> None:
    vision = plan("recipe=r2-vision-only").stages["vision"]
    assert vision.trainer["bf16"] is False
    assert vision.fingerprint.startswith("8754e3875076")  # r2's vision stage, key version 2
