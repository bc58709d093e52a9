"""recipe_engine.resolve.peer_formats.swift_pretrain: ms-swift's pretraining rows, a `response`
alone, are language-modeling text; `response` beside a prompt (or any other format's column)
keeps the meaning it had."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_kit import error, load, write_jsonl

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.detection import resolve_layout
from recipe_engine.resolve.survey import Survey


def seen(*present: str) -> Survey:
    return Survey("data file x.jsonl", present, present, present, {}, frozenset())


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        (("response",), "swift_pretrain"),
        (("response", "system"), "swift_pretrain"),  # a column no format states
        (("text",), "language_modeling"),
        # `response` as ms-swift's completion, as before.
        (("query", "response"), "prompt_completion"),
        (("prompt", "response"), "prompt_completion"),
        (("query", "response", "history"), "prompt_completion"),
        (("prompt", "response", "label"), "unpaired"),
    ],
)
def test_a_response_alone_is_pretraining_text(columns: tuple[str, ...], expected: str) -> None:
    assert resolve_layout("auto", seen(*columns), {}).fmt == expected


def test_a_response_beside_another_formats_column_is_not_pretraining_text() -> None:
    with pytest.raises(RecipeError, match="cannot tell the data format"):
        resolve_layout("auto", seen("text", "response"), {})  # which is the text?
    with pytest.raises(RecipeError, match="has `chosen_response` but no `rejected` column"):
        resolve_layout("auto", seen("response", "chosen_response"), {})


def test_pretraining_rows_are_language_modeling_rows(tmp_path: Path) -> None:
    rows = [{"response": f"Water boils at {100 + i} degrees."} for i in range(3)]
    splits = load(write_jsonl(tmp_path / "pt.jsonl", rows), eval_fraction=0.0)
    assert (splits.format, splits.source_format) == (
        "language_modeling",
        "swift_pretrain (`response` as text)",
    )
    assert splits.train.to_list() == [{"text": row["response"]} for row in rows]
    # Set by hand, the format reads a mapped column as its text.
    path = write_jsonl(tmp_path / "body.jsonl", [{"body": "Some text."}])
    named = load(path, format="swift_pretrain", columns={"text": "body"}, eval_fraction=0.0)
    assert named.train.to_list() == [{"text": "Some text."}]


def test_an_empty_response_is_refused_with_its_row(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "pt.jsonl", [{"response": "Text."}, {"response": " "}])
    assert "row 2: `response` is empty" in error(path, eval_fraction=0.0)
