"""A stage's longest row in its own tokenizer's tokens (`resolve.template_tokens`): the text as
the tokenizer counts it, and what the chat template adds around it, for the memory estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from recipe_engine.resolve import template_tokens as counting
from recipe_engine.resolve.inputs import LongestRow, ModelFiles, TemplateTokens
from recipe_engine.resolve.template_tokens import (
    longest_tokens,
    saved_tokenizer,
    template_tokens,
)
from recipe_engine.resolve.tiny import build_dataset, build_tiny_model


def measured_template(folder: Path) -> TemplateTokens | None:
    tokenizer = saved_tokenizer(folder)
    return template_tokens(tokenizer) if tokenizer else None


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-llama"])
def test_the_templates_fixed_and_per_message_tokens_add_up_to_a_rows_templated_length(
    name: str,
) -> None:
    folder = build_tiny_model(name)
    measured = measured_template(folder)
    assert measured is not None
    tokenizer = AutoTokenizer.from_pretrained(folder)
    lines = (build_dataset("arithmetic") / "train.jsonl").read_text().splitlines()
    for row in map(json.loads, lines[:20]):
        messages = row["messages"]
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        real = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        content = sum(len(tokenizer(m["content"])["input_ids"]) for m in messages)
        predicted = content + measured.fixed + measured.per_message * len(messages)
        assert abs(predicted - real) <= 2, (name, messages, predicted, real)


def test_qwen2s_default_system_message_is_in_the_fixed_part() -> None:
    """Qwen2's template opens a conversation without a system message with "You are a
    helpful assistant.": a dozen tokens a row that four characters a token never saw."""
    qwen2 = measured_template(build_tiny_model("tiny-qwen2"))
    llama = measured_template(build_tiny_model("tiny-llama"))
    assert qwen2 is not None and llama is not None
    assert qwen2.fixed >= 8 > llama.fixed


def test_what_is_measured_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_tiny_model("tiny-qwen2")
    first = measured_template(folder)
    monkeypatch.setattr(counting, "_tokenizer", lambda folder: pytest.fail("measured again"))
    assert measured_template(folder) == first


def test_the_longest_rows_text_is_counted_and_scaled_past_its_sample(tmp_path: Path) -> None:
    folder = build_tiny_model("tiny-qwen2")
    tokenizer = saved_tokenizer(folder)
    assert tokenizer is not None
    files = ModelFiles({}, {}, template_tokens(tokenizer), tokenizer)
    text = "What is 7 + 1?"
    tokens = len(AutoTokenizer.from_pretrained(folder)(text, add_special_tokens=False)["input_ids"])
    whole = LongestRow(chars=len(text), messages=1, sample=text)
    assert longest_tokens(files, whole) == tokens
    # A row longer than the sample it keeps: counted at the sample's rate.
    assert longest_tokens(files, LongestRow(chars=10 * len(text), sample=text)) == 10 * tokens
    assert longest_tokens(ModelFiles({}, {}), whole) is None  # no tokenizer: the guess
    assert longest_tokens(files, LongestRow(chars=0)) is None  # no text: nothing to count


def test_a_folder_without_a_template_or_tokenizer_gives_none(tmp_path: Path) -> None:
    assert saved_tokenizer(tmp_path) is None and measured_template(tmp_path) is None


def test_the_longest_row_keeps_its_text_and_counts_an_image_listed_and_placed_once() -> None:
    """A VLM row lists its image under `images` and marks where it goes with an image part in
    its message: one image (counted twice, the estimate took 2 x 9 image tokens a row)."""
    from recipe_engine.config.schema import DataConfig
    from recipe_engine.resolve.resolver import survey

    config = DataConfig(name="shapes", source="tiny", path="shapes")
    longest = survey(config, "vlm", 0, {}).longest
    assert longest.images == 1 and longest.messages == 2
    assert longest.sample.startswith("What is in the picture?\n")
    assert longest.chars == len(longest.sample) - longest.sample.count("\n")


def test_a_damaged_tokenizer_leaves_the_guess_and_raises_nothing(tmp_path: Path) -> None:
    """Found by the fuzzer: `tokenizer.json` of `{}` made transformers raise KeyError inside
    `plan`; the model's own check refuses such a folder, in one message, after this."""
    (tmp_path / "tokenizer.json").write_text("{}")
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    (tmp_path / "chat_template.jinja").write_text(template)
    damaged = saved_tokenizer(tmp_path)
    assert damaged is not None and template_tokens(damaged) is None
    files = ModelFiles({}, {}, None, saved_tokenizer(tmp_path))
    assert longest_tokens(files, LongestRow(chars=2, sample="Hi")) is None
