"""recipe_engine.resolve.rows: every row checked, errors naming the file, the row and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from data_kit import (
    CHAT,
    bad_jsonl,
    chat,
    data,
    error,
    load,
    make_images,
    msgs,
    sharegpt,
    vlm_row,
    write_csv,
    write_jsonl,
)

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data import load_splits


def test_vlm_rows_with_relative_images(tmp_path: Path) -> None:
    make_images(tmp_path)
    text_only = {"messages": CHAT}
    plain = {"images": ["img/a.png"], "messages": CHAT}
    absolute = vlm_row([str(tmp_path / "img" / "a.png")])
    rows = [vlm_row(["img/a.png", "img/b.png"]), text_only, plain, absolute]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    splits = load(path, kind="vlm")
    assert splits.format == "vlm"
    row = splits.train[0]
    assert [(im.mode, im.size) for im in row["images"]] == [("RGB", (8, 8)), ("RGB", (6, 4))]
    assert [p["type"] for p in row["messages"][0]["content"]] == ["image", "image", "text"]
    assert row["messages"][1]["content"] == [
        {
            "type": "text",
            "text": "Squares.",
        }
    ]
    assert splits.train[1]["images"] == []  # text-only rows are allowed for VLMs
    # String content with images gets TRL's placeholders in the first user message.
    assert [p["type"] for p in splits.train[2]["messages"][0]["content"]] == ["image", "text"]
    assert len(splits.train[3]["images"]) == 1


@pytest.mark.parametrize(
    ("bad", "raw", "expected"),
    [
        ('{"messages": [', True, "invalid JSON"),
        ("[1, 2]", True, "expected a JSON object"),
        # A null cell is missing: the row's columns with a value are listed.
        ({"messages": None, "text": "x"}, False, "`messages` is missing (columns: text)"),
        (msgs(("user", "q"), ("assistant", "  ")), False, "message 2 has empty content"),
        (msgs(("user", 5), ("assistant", "a")), False, "message 1 content must be a string"),
        (msgs(("human", "q"), ("assistant", "a")), False, "message 1 has role `human`"),
        (msgs(("user", "q"), ("assistant", "a"), ("user", "q2")), False, "last message"),
        ({"messages": []}, False, "non-empty list"),
    ],
)
def test_bad_rows_name_file_row_and_problem(
    tmp_path: Path, bad: Any, raw: bool, expected: str
) -> None:
    path = bad_jsonl(tmp_path, bad, raw)
    msg = error(path)
    assert f"data file {path}, row 3: " in msg
    assert expected in msg


def test_missing_column_suggests_mapping(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [chat(0), {"text": "x", "label": 1}])
    msg = error(path, format="messages")
    assert msg == (
        f"data file {path}, row 2: `messages` is missing (columns: text, label). "
        "Map your column with data.columns.messages=<name> or fix the row."
    )
    path = write_jsonl(tmp_path / "m.jsonl", [{"q": "x"}])
    msg = error(path, columns={"prompt": "question", "completion": "q"})
    assert "`question` (data.columns.prompt) is missing" in msg


def test_bad_csv_and_parquet_rows(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "d.csv",
        [{"prompt": "a", "completion": "b"}, {"prompt": "c", "completion": ""}],
    )
    msg = error(path)
    assert f"data file {path}, row 2: `completion` is empty" in msg

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"instruction": "i", "output": "o"}, {"instruction": "i", "output": 3}]
    pq.write_table(pa.Table.from_pylist(rows[:1]), tmp_path / "ok.parquet")
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([rows[0], {"instruction": "i", "output": None}]), path)
    assert f"data file {path}, row 2: `output` is missing" in error(path)


def test_vlm_missing_image_and_count_mismatch(tmp_path: Path) -> None:
    make_images(tmp_path)
    path = write_jsonl(tmp_path / "d.jsonl", [vlm_row(["img/a.png"]), vlm_row(["img/nope.png"])])
    msg = error(path, kind="vlm")
    assert f"data file {path}, row 2: image file {tmp_path / 'img' / 'nope.png'}" in msg
    assert "does not exist" in msg

    path = write_jsonl(tmp_path / "d.jsonl", [vlm_row(["img/a.png", "img/b.png"], placeholders=1)])
    msg = error(path, kind="vlm")
    assert f"data file {path}, row 1: 1 image placeholder(s)" in msg and "2 image(s)" in msg

    (tmp_path / "img" / "junk.png").write_text("not an image")
    path = write_jsonl(tmp_path / "d.jsonl", [vlm_row(["img/junk.png"])])
    assert "not a readable image" in error(path, kind="vlm")


def test_vlm_bad_text_part(tmp_path: Path) -> None:
    row = vlm_row([], placeholders=0)
    row["messages"][0]["content"] = [{"type": "text", "text": ""}]
    path = write_jsonl(tmp_path / "d.jsonl", [row])
    assert "row 1: message 1 has a text part with empty" in error(path, kind="vlm")


@pytest.mark.parametrize(
    ("roles", "problem"),
    [
        (["assistant", "user", "assistant"], "message 1 is from `assistant`"),
        (["user", "user", "assistant"], "message 2 is from `user` where assistant comes"),
        (["user", "system", "assistant"], "message 2 is from `system`"),
        (["user", "assistant", "assistant"], "message 3 is from `assistant` where user comes"),
        (["system", "system", "user", "assistant"], "message 2 is from `system`"),
    ],
)
def test_turns_out_of_order_are_refused_naming_the_row(
    tmp_path: Path, roles: list[str], problem: str
) -> None:
    rows = [chat(0), {"messages": [{"role": r, "content": "x"} for r in roles]}]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(RecipeError) as info:
        load_splits(data(path=str(path)), kind="causal_lm")
    assert f"{path}, row 2: {problem}" in str(info.value) and "alternate" in str(info.value)


def test_alternating_turns_after_a_system_message_are_accepted(tmp_path: Path) -> None:
    roles = ["system", "user", "assistant", "user", "assistant"]
    path = write_jsonl(
        tmp_path / "t.jsonl", [{"messages": [{"role": r, "content": "x"} for r in roles]}]
    )
    assert len(load_splits(data(path=str(path)), kind="causal_lm").train) == 1


def test_bad_sharegpt_rows_name_the_row(tmp_path: Path) -> None:
    bad = {"conversations": [{"from": "robot", "value": "q"}, {"from": "gpt", "value": "a"}]}
    path = write_jsonl(tmp_path / "d.jsonl", [sharegpt(0), bad])
    msg = error(path)
    assert f"data file {path}, row 2: message 1 of `conversations` is from `robot`" in msg
    assert "human, gpt" in msg

    path = write_jsonl(tmp_path / "e.jsonl", [sharegpt(0), {"conversations": [{"from": "human"}]}])
    assert "row 2: message 1 of `conversations` is not a {from, value} object" in error(path)


def test_sharegpt_rows_under_an_explicit_messages_format_name_the_fix(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"messages": sharegpt(0)["conversations"]}])
    msg = error(path, format="messages")
    assert "row 1: message 1 of `messages` is not a {role, content} object" in msg
    assert "ShareGPT" in msg and "data.format=sharegpt" in msg
    path = write_jsonl(tmp_path / "r.jsonl", [msgs(("human", "q"), ("gpt", "a"))])
    assert "data.format=sharegpt converts it" in error(path)
    assert load(path, format="sharegpt").train[0]["messages"] == CHAT[:0] + [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]
