"""What `plan` decides for TRL's language-modeling `text` rows (SFT on the whole text, packed
as TRL packs them; no loss flag, no preference trainer) and for its tool-calling rows (only
through a chat template that renders tools; assistant-only loss as for conversations)."""

from __future__ import annotations

from pathlib import Path

import pytest
from peer_files import model_with_template, trl_language_modeling, trl_tool_calling
from plans import plan

from recipe_engine.errors import RecipeError
from recipe_engine.plan.render import render_plan


def text_rows(folder: Path, *more: str) -> list[str]:
    data = ["data.source=local", f"data.path={trl_language_modeling(folder)}"]
    return ["recipe=text-lora", *data, *more]


def test_language_modeling_rows_train_with_sft_on_the_whole_text(tmp_path):
    planned = plan(*text_rows(tmp_path))
    stage = planned.stages["llm"]
    assert stage.data.format == "language_modeling" and stage.config.trainer == "sft"
    assert not {"completion_only_loss", "assistant_only_loss"} & set(stage.trainer)
    shown = render_plan(planned)
    assert "note: loss: on the whole text (language-modeling rows" in shown
    assert "completion_only_loss" not in shown and "assistant_only_loss" not in shown
    packed = plan(*text_rows(tmp_path, "++stage.llm.train.packing=true"))
    assert "packing: rows packed (bfd)" in render_plan(packed)
    assert packed.stages["llm"].trainer["packing"] is True
    # No chat template applies to them: the setting leaves the rows and the key alone.
    for setting in ("true", "false"):
        other = plan(*text_rows(tmp_path, f"data.chat_template={setting}")).stages["llm"]
        assert other.fingerprint == stage.fingerprint


@pytest.mark.parametrize("flag", ["completion_only_loss", "assistant_only_loss"])
def test_a_loss_flag_on_language_modeling_rows_is_refused(tmp_path, flag):
    with pytest.raises(RecipeError) as refused:
        plan(*text_rows(tmp_path, f"++stage.llm.train.{flag}=true"))
    assert refused.value.key == f"stage.llm.train.{flag}"
    assert "no prompt or assistant turn to mask" in str(refused.value)
    assert "Drop the key (the loss covers the whole text)" in str(refused.value)


@pytest.mark.parametrize("trainer", ["dpo", "orpo", "kto"])
def test_a_preference_trainer_on_language_modeling_rows_is_refused(tmp_path, trainer):
    with pytest.raises(RecipeError) as refused:
        plan(*text_rows(tmp_path, f"stage.llm.trainer={trainer}"))
    message = str(refused.value)
    assert refused.value.key == "stage.llm.trainer"
    assert "holds instruction rows (messages, prompt / completion, or language-modeling text)" in (
        message
    )
    assert "Set stage.llm.trainer=sft" in message


def test_tool_rows_need_a_chat_template_that_renders_tools(tmp_path):
    data = ["recipe=text-lora", "data.source=local", f"data.path={trl_tool_calling(tmp_path)}"]
    with pytest.raises(RecipeError) as refused:
        plan(*data)  # the tiny Qwen2's template leaves the calls out
    assert refused.value.key == "model"
    assert "does not render them" in str(refused.value)
    assert "Use a model whose chat template supports tools" in str(refused.value)
    folder = model_with_template(tmp_path, "qwen2_5")
    stage = plan(*data, "model.source=local", f"model.id={folder}").stages["llm"]
    assert stage.data.format == "tool_messages" and stage.config.trainer == "sft"
    assert stage.trainer["assistant_only_loss"] is True  # TRL's training template marks turns


def test_an_evaluation_stage_on_language_modeling_rows_is_refused(tmp_path):
    """It asks its rows for answers; text asks no question (no generation is attempted)."""
    evaluated = ("+stages@stage.eval=evaluate", "+stage.eval.init={from_stage: llm}")
    with pytest.raises(RecipeError) as refused:
        plan(*text_rows(tmp_path, *evaluated))
    assert refused.value.key == "stage.eval.data"
    assert "language-modeling text, which asks no question" in str(refused.value)
