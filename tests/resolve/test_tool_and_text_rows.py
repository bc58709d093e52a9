"""The two formats TRL documents beside conversations: tool-calling `messages` with a `tools`
column (kept as written, checked, through the chat template with TRL's own training template
masking all but the assistant's turns), and language-modeling `text` (read only where nothing
states another format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from data_kit import error, load, write_jsonl
from peer_files import ADD_TOOL, model_with_template, trl_tool_calling

from recipe_engine.resolve.formats import REGISTRY, format_table

QUESTION = {"role": "user", "content": "What is 2 + 3?"}
CALL = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
CALLING = {"role": "assistant", "tool_calls": [CALL]}
RESULT = {"role": "tool", "name": "add", "content": "5"}
ANSWER = {"role": "assistant", "content": "It is 5."}


def tool_file(tmp_path: Path, *messages: dict[str, Any], tools: Any = None) -> Path:
    good = {"messages": [QUESTION, CALLING, RESULT, ANSWER], "tools": [ADD_TOOL]}
    bad = {"messages": list(messages), "tools": [ADD_TOOL] if tools is None else tools}
    return write_jsonl(tmp_path / "tools.jsonl", [good, good, bad])


def test_tool_rows_keep_the_calls_the_results_and_the_schemas_as_written(tmp_path):
    rows = load(trl_tool_calling(tmp_path), eval_fraction=0.0).train.with_format(None)
    first = rows[0]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "tool", "assistant"]
    # Arrow gives every message every key (null where absent): each is as it was written.
    assert first["messages"][0] == {"role": "user", "content": "What is 1 + 1?"}
    call = first["messages"][1]
    assert call == {"role": "assistant", "tool_calls": [CALL | {"function": call_of(1, 1)}]}
    assert first["messages"][2] == {"role": "tool", "name": "add", "content": "The sum is 2."}
    assert json.loads(first["tools"]) == [ADD_TOOL]  # TRL decodes the JSON text


def call_of(a: int, b: int) -> dict[str, Any]:
    return {"name": "add", "arguments": {"a": a, "b": b}}


def test_arguments_written_as_json_text_are_read_as_the_object(tmp_path):
    """OpenAI's chat format writes a call's arguments as JSON text; templates render objects."""
    openai = {"type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    row = {"messages": [QUESTION, {"role": "assistant", "tool_calls": [openai]}, RESULT, ANSWER]}
    path = write_jsonl(tmp_path / "openai.jsonl", [row | {"tools": [ADD_TOOL]}] * 3)
    messages = load(path, eval_fraction=0.0).train.with_format(None)[0]["messages"]
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == {"a": 2, "b": 3}


@pytest.mark.parametrize(
    ("messages", "tools", "expected"),
    [
        ((QUESTION, RESULT, ANSWER), None, "message 2 is a `tool` turn that answers no call"),
        ((QUESTION, CALLING, ANSWER), None, "message 2 calls a tool, but message 3 is from"),
        (
            (QUESTION, {"role": "assistant", "tool_calls": [CALL | {"function": {"name": "mul"}}]}),
            None,
            "message 2 calls `mul`, which the row's `tools` does not declare (functions: add)",
        ),
        ((QUESTION, CALLING, RESULT, ANSWER), [{"name": "add"}], "`tools` must be a non-empty"),
        (({"role": "user", "tool_calls": [CALL]}, ANSWER), None, "is from `user` but has"),
        ((QUESTION, {"role": "robot", "content": "5"}), None, "has role `robot`"),
    ],
)
def test_a_bad_tool_row_is_named_with_its_fix(tmp_path, messages, tools, expected):
    path = tool_file(tmp_path, *messages, tools=tools)
    message = error(path)
    assert f"data file {path}, row 3: " in message and expected in message


def test_assistant_only_loss_covers_the_assistant_turns_only(tmp_path):
    """TRL's training version of the chat template (its swap for assistant_only_loss) marks
    the call and the answer, not the question, the schemas or the tool's result."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    tokenizer = AutoTokenizer.from_pretrained(model_with_template(tmp_path, "qwen2_5"))
    row = load(trl_tool_calling(tmp_path), eval_fraction=0.0).train.with_format(None)[0]
    rendered = tokenizer.apply_chat_template(
        row["messages"],
        tools=json.loads(row["tools"]),
        chat_template=get_training_chat_template(tokenizer),
        return_assistant_tokens_mask=True,
        return_dict=True,
    )
    ids, mask = rendered["input_ids"], rendered["assistant_masks"]
    learned = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert '"name": "add"' in learned and '"a": 1' in learned and "2<|im_end|>" in learned
    for unlearned in ("What is 1 + 1?", "The sum is 2.", "Adds two whole numbers."):
        assert unlearned in tokenizer.decode(ids) and unlearned not in learned


def test_text_rows_are_language_modeling_where_nothing_states_another_format(tmp_path):
    path = write_jsonl(
        tmp_path / "lm.jsonl", [{"text": f"{i} + {i} is {2 * i}."} for i in range(8)]
    )
    splits = load(path, eval_fraction=0.0)
    assert splits.format == "language_modeling" and splits.train[0] == {"text": "0 + 0 is 0."}
    both = [{"text": "x", "prompt": f"{i}?", "completion": str(i)} for i in range(4)]
    assert load(write_jsonl(tmp_path / "pc.jsonl", both)).format == "prompt_completion"
    labelled = write_jsonl(tmp_path / "kto.jsonl", [{"text": "x", "label": True}] * 4)
    assert "has `label` but no `completion` column" in error(labelled)


def test_formats_without_an_image_form_refuse_images(tmp_path):
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    path = write_jsonl(tmp_path / "lm.jsonl", [{"text": "A square.", "images": ["a.png"]}] * 4)
    message = error(path, kind="vlm")
    assert "has images, but `text` (language modeling) rows have no form with images" in message


def test_the_docs_table_of_formats_is_the_registry_rendered():
    docs = (Path(__file__).parents[2] / "docs" / "data.md").read_text()
    assert format_table() in docs, (
        "docs/data.md: paste recipe_engine.resolve.formats.format_table()"
    )
    assert docs.count("| `data.format` |") == 1
    assert all(given.doc_columns and given.doc_trl for given in REGISTRY.values())
