"""Plain prompt/completion rows reach a model with a chat template through it (TRL's
conversational prompt-completion), decided by `plan` and keyed; `data.chat_template` opts out
(`false`) or insists (`true`); conversations and the default recipes are untouched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from plans import pairs_csv, plan

from recipe_engine.errors import RecipeError
from recipe_engine.plan.render import render_plan
from recipe_engine.resolve.tiny import build_tiny_model


def pairs(folder: Path, *more: str) -> list[str]:
    data = ["data.source=local", f"data.path={pairs_csv(folder)}", "data.eval_fraction=0.25"]
    return ["recipe=text-lora", *data, *more]


def without_chat_template(folder: Path) -> Path:
    """The tiny Qwen2 saved again with its tokenizer's chat template removed: a base model."""
    copy = folder / "no-template"
    shutil.copytree(build_tiny_model("tiny-qwen2"), copy)
    (copy / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    return copy


def test_prompt_completion_rows_go_through_the_chat_template_and_plan_says_so(tmp_path):
    stage = plan(*pairs(tmp_path)).stages["llm"]
    assert stage.data.format == "chat_prompt_completion"
    row = stage.data.splits().train[0]
    assert row["prompt"] == [{"role": "user", "content": "0 + 0?"}]
    assert row["completion"] == [{"role": "assistant", "content": "0"}]
    assert stage.trainer["completion_only_loss"] is True  # TRL masks the templated prompt
    line = next(x for x in render_plan(plan(*pairs(tmp_path))).splitlines() if "data:" in x)
    assert "(prompt_completion, through the chat template, 6 train / 2 held out)" in line


def test_opting_out_keeps_plain_text_and_a_key_of_its_own(tmp_path):
    chat = plan(*pairs(tmp_path)).stages["llm"]
    plain = plan(*pairs(tmp_path, "data.chat_template=false")).stages["llm"]
    assert plain.data.format == "prompt_completion"
    assert plain.data.splits().train[0]["prompt"] == "0 + 0?"
    assert plain.data.rendering == "as plain text (data.chat_template=false)"
    assert plain.fingerprint != chat.fingerprint  # other rows, another result
    insisted = plan(*pairs(tmp_path, "data.chat_template=true")).stages["llm"]
    assert insisted.fingerprint == chat.fingerprint  # `auto` chose the same


def test_a_model_without_a_chat_template_gets_plain_text_or_a_refusal(tmp_path):
    model = [
        "model=tiny-qwen2",
        "model.source=local",
        f"model.id={without_chat_template(tmp_path)}",
    ]
    stage = plan(*pairs(tmp_path, *model)).stages["llm"]
    assert stage.data.format == "prompt_completion"
    assert stage.data.rendering == "as plain text: the model's tokenizer has no chat template"
    with pytest.raises(RecipeError) as refused:
        plan(*pairs(tmp_path, *model, "data.chat_template=true"))
    assert refused.value.key == "data.chat_template" and "has no chat template" in str(
        refused.value
    )


def test_a_setting_that_is_not_auto_true_or_false_is_refused(tmp_path):
    with pytest.raises(RecipeError) as refused:
        plan(*pairs(tmp_path, "data.chat_template=yes"))
    assert refused.value.key == "data.chat_template" and "auto, true, false" in str(refused.value)


def test_conversations_and_the_default_recipes_keep_their_keys_whatever_the_setting():
    """Their rows never depended on it (conversations go through the template anyway)."""
    for recipe in ("text-lora", "r3-two-stage"):
        default = plan(f"recipe={recipe}")
        assert "through the chat template" not in render_plan(default)
        keys = {name: stage.fingerprint for name, stage in default.stages.items()}
        for setting in ("true", "false"):
            other = plan(f"recipe={recipe}", f"data.chat_template={setting}").stages
            assert {name: stage.fingerprint for name, stage in other.items()} == keys


def test_query_response_rows_with_a_history_of_pairs_are_conversations_whatever_the_setting(
    tmp_path,
):
    """ms-swift's (and Qwen's older) `query` / `response` rows with a `history` of
    [query, response] pairs: the earlier turns come first, and the rows go through the chat
    template under every setting of data.chat_template (they are conversations as written)."""
    rows = [
        {"query": f"{i} + {i}?", "response": str(2 * i), "history": [["Hi", "Ask me a sum."]]}
        for i in range(8)
    ]
    path = tmp_path / "swift.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = ["recipe=text-lora", "data.source=local", f"data.path={path}", "data.eval_fraction=0.25"]
    keys = set()
    for setting in ("auto", "true", "false"):
        stage = plan(*data, f"data.chat_template={setting}").stages["llm"]
        assert stage.data.format == "chat_prompt_completion", setting
        [row] = [r for r in stage.data.splits().train if r["completion"][0]["content"] == "2"]
        assert row["prompt"] == [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Ask me a sum."},
            {"role": "user", "content": "1 + 1?"},
        ], setting
        keys.add(stage.fingerprint)
    assert len(keys) == 1  # the same rows, the same result
