"""recipe_engine.resolve.detection: the format `auto` finds from the columns, `data.columns`,
and the refusal that says what it saw."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from data_kit import CHAT, chat, error, load, sharegpt, write_csv, write_jsonl


@pytest.mark.parametrize(
    ("row", "fmt"),
    [
        (chat(0), "messages"),
        ({"prompt": "p", "completion": "c"}, "prompt_completion"),
        ({"instruction": "i", "output": "o"}, "alpaca"),
    ],
)
def test_explicit_format_matches_auto(tmp_path: Path, row: dict, fmt: str) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [row])
    assert load(path, format=fmt).train.to_list() == load(path).train.to_list()


def test_column_mapping(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": "a", "extra": 1}])
    splits = load(path, columns={"prompt": "question", "completion": "answer"})
    assert splits.format == "prompt_completion"
    assert splits.train.to_list() == [{"prompt": "q", "completion": "a"}]

    path = write_jsonl(tmp_path / "c.jsonl", [{"conversation": CHAT}])
    assert load(path, columns={"messages": "conversation"}).train[0]["messages"] == CHAT


def test_explicit_mapping_wins_over_other_columns(tmp_path: Path) -> None:
    row = {**chat(0), "question": "q", "answer": "a"}
    path = write_jsonl(tmp_path / "d.jsonl", [row])
    splits = load(path, columns={"prompt": "question", "completion": "answer"})
    assert splits.format == "prompt_completion"


def test_sharegpt_in_a_mapped_column_and_in_a_csv(tmp_path: Path) -> None:
    rows = [{"dialog": sharegpt(i)["conversations"]} for i in range(2)]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    splits = load(path, columns={"conversations": "dialog"})
    assert splits.train[0]["messages"] == chat(0)["messages"]
    # ShareGPT messages in a `messages` column are recognised by their keys.
    path = write_csv(tmp_path / "d.csv", [{"messages": json.dumps(r["dialog"])} for r in rows])
    assert load(path).train.to_list() == splits.train.to_list()


def test_a_mapped_images_column_that_is_not_there_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "p", "completion": "c"}])
    msg = error(path, kind="vlm", columns={"images": "img"})
    assert "data.columns.images names `img`" in msg and "columns: prompt, completion" in msg


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([{"q": "1+1?", "a": "2"}], ("data.columns.prompt=q data.columns.completion=a",)),
        (
            [{"dialog": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}],
            ("`dialog` holds ShareGPT messages", "data.columns.conversations=dialog"),
        ),
        (
            [{"chat": CHAT, "picture": "x.png"}],
            ("data.columns.messages=chat", "data.columns.images=picture"),
        ),
    ],
)
def test_an_undetectable_format_says_what_it_saw_and_the_mapping(
    tmp_path: Path, rows: list[dict[str, Any]], expected: tuple[str, ...]
) -> None:
    msg = error(write_jsonl(tmp_path / "d.jsonl", rows))
    assert "cannot tell the data format" in msg and "data.format=" in msg
    for text in expected:
        assert text in msg
