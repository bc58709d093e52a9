"""Prompts for the online trainers (`data.format: prompts`): a prompt as text, as messages
ending with a user turn, or with images, and every other column carried on as written (TRL
hands them to the rewards by name; a `completion` column reaches them as `answer`). `auto`
never reads a split as prompts: a prompt beside an answer is an instruction row to SFT."""

from __future__ import annotations

from data_kit import error, load, make_images, write_jsonl

from recipe_engine.resolve.formats import format_taking
from recipe_engine.resolve.row_shapes import row_shape
from recipe_engine.trainers.kind import PREFERENCE_ROWS, PROMPT_ROWS


def test_text_prompts_keep_their_other_columns_with_their_types(tmp_path):
    rows = [{"prompt": f"What is {i} + 1?", "answer": i + 1, "level": "easy"} for i in range(4)]
    splits = load(write_jsonl(tmp_path / "p.jsonl", rows), format="prompts", eval_fraction=0.0)
    assert splits.format == "prompts"
    first = splits.train[0]
    assert first == {"prompt": "What is 0 + 1?", "answer": 1, "level": "easy"}
    assert row_shape(first).prompts


def test_a_completion_column_reaches_the_rewards_as_answer(tmp_path):
    rows = [{"question": "2 + 2?", "completion": "4", "system": "Be brief."}] * 3
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    first = load(path, format="prompts", eval_fraction=0.0, chat_template="false").train[0]
    assert first == {"prompt": "Be brief.\n\n2 + 2?", "answer": "4"}


def test_chat_prompts_are_messages_ending_with_a_user_turn(tmp_path):
    turns = [{"role": "system", "content": "Add."}, {"role": "user", "content": "2 + 2?"}]
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": turns, "answer": "4"}] * 3)
    splits = load(path, format="prompts", eval_fraction=0.0)
    assert splits.format == "chat_prompts"
    assert splits.train[0] == {"prompt": turns, "answer": "4"}
    ends_with_assistant = [*turns, {"role": "assistant", "content": "4"}]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": ends_with_assistant}])
    assert "user" in error(bad, format="prompts", eval_fraction=0.0)


def test_image_prompts_are_one_user_turn_of_parts(tmp_path):
    make_images(tmp_path)
    rows = [{"images": ["img/a.png"], "prompt": "What colour?", "answer": "red"}] * 3
    splits = load(
        write_jsonl(tmp_path / "p.jsonl", rows), kind="vlm", format="prompts", eval_fraction=0.0
    )
    assert splits.format == "vlm_prompts"
    row = splits.train[0]
    assert row["answer"] == "red" and len(row["images"]) == 1
    (user,) = row["prompt"]
    assert [part["type"] for part in user["content"]] == ["image", "text"]


def test_auto_reads_a_prompt_and_its_answer_as_instructions(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "2 + 2?", "answer": "4"}] * 3)
    assert load(path, eval_fraction=0.0).format.endswith("prompt_completion")
    assert format_taking(PROMPT_ROWS) == "prompts"  # what a GRPO stage reads instead
    assert format_taking(PREFERENCE_ROWS) is None  # detected from its columns
