"""recipe_engine.resolve.peer_formats.qwen_vl: Qwen-VL's inline `<img>PATH</img>` tags, in
ShareGPT conversations (Qwen-VL's own files) and in ms-swift's `query` / `response` rows, are
found by the survey, detected by `auto`, and read as image parts where they stood: paths
relative to the data file, remote URLs and missing files refused with their row, and a
text-only model refused as image rows are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from data_kit import error, load, pictures, write_csv, write_jsonl

from recipe_engine.resolve.detection import resolve_layout
from recipe_engine.resolve.parts import tagged_parts
from recipe_engine.resolve.survey import Survey, survey

QUESTION = "What is shown?"
SHAREGPT = {"from", "value"}


def tagged(image: str, text: str = QUESTION) -> str:
    return f"Picture 1: <img>{image}</img>\n{text}"


def turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"from": who, "value": text} for who, text in pairs]


def seen(*present: str, keys: dict[str, set[str]] | None = None, tags: tuple = ()) -> Survey:
    """A split's survey as `survey.survey` reads it (`tags`: the columns holding `<img>`)."""
    message_keys = {column: frozenset(k) for column, k in (keys or {}).items()}
    texts = tuple(c for c in present if c not in message_keys)
    return Survey(
        "data file x.jsonl",
        present,
        present,
        texts,
        message_keys,
        frozenset(),
        image_tags=frozenset(tags),
    )


def said(row: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Each message as (role, its parts: `image` or the text)."""
    return [
        (m["role"], [p["text"] if p["type"] == "text" else "image" for p in m["content"]])
        for m in row["messages"]
    ]


# --------------------------------------------------------------------------- the tags


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("no tag here", None),
        ("<img> a.png </img>", [{"type": "image", "image": "a.png"}]),
        (
            "Picture 1: <img>pics/a.png</img>\nWhat is this?",
            [
                {"type": "text", "text": "Picture 1:"},
                {"type": "image", "image": "pics/a.png"},
                {"type": "text", "text": "What is this?"},
            ],
        ),
        (
            "<img>a.png</img><img>https://x.org/b.png</img> both?",
            [
                {"type": "image", "image": "a.png"},
                {"type": "image", "image": "https://x.org/b.png"},
                {"type": "text", "text": "both?"},
            ],
        ),
        ("an <img> without its end", None),
        ("<img></img>", [{"type": "image", "image": ""}]),
    ],
)
def test_a_tag_is_an_image_part_where_it_stood(text: str, parts: list | None) -> None:
    found = tagged_parts(text)
    written = [{"type": p.kind, ("image" if p.kind == "image" else "text"): p.source or p.text}
               for p in found or ()]  # fmt: skip
    assert (written if found is not None else None) == parts


def test_the_survey_finds_tags_in_any_row_and_any_column_shape(tmp_path: Path) -> None:
    import datasets

    rows = [
        {"query": f"q{i}", "response": "a", "conversations": turns(("user", f"q{i}"))}
        for i in range(80)
    ]
    rows += [
        {"query": tagged("a.png"), "response": "a", "conversations": turns(("user", "q"))},
        {"query": "q", "response": "a", "conversations": turns(("user", tagged("b.png")))},
    ]
    path = write_jsonl(tmp_path / "late.jsonl", rows)  # tags only after the first 64 rows
    found = survey(datasets.load_dataset("json", data_files=str(path), split="train"), "x")
    assert found.image_tags == {"query", "conversations"}
    # Conversations stored as JSON text (a CSV cell) are seen too.
    cells = [{"conversations": json.dumps(turns(("user", tagged("a.png")), ("assistant", "a")))}]
    path = write_csv(tmp_path / "d.csv", cells)
    found = survey(datasets.load_dataset("csv", data_files=str(path), split="train"), "x")
    assert found.image_tags == {"conversations"}


# --------------------------------------------------------------------------- detection


def conversations(column: str = "conversations", tags: bool = True, *others: str) -> Survey:
    return seen(column, *others, keys={column: SHAREGPT}, tags=(column,) if tags else ())


@pytest.mark.parametrize(
    ("survey_of", "mapping", "expected"),
    [
        (seen("query", "response", tags=("query",)), {}, "qwen_vl"),
        (seen("prompt", "completion", tags=("prompt",)), {}, "qwen_vl"),
        (conversations(), {}, "qwen_vl"),
        (conversations("dialog"), {"conversations": "dialog"}, "qwen_vl"),
        (seen("q", "a", tags=("q",)), {"prompt": "q", "completion": "a"}, "qwen_vl"),
        # Without a tag (or with one in a column the format does not read), as before.
        (seen("query", "response"), {}, "prompt_completion"),
        (conversations(tags=False), {}, "sharegpt"),
        (seen("instruction", "output", tags=("instruction",)), {}, "alpaca"),
        # Judged rows are what their columns say first.
        (conversations("conversations", True, "chosen", "rejected"), {}, "preference"),
    ],
)
def test_auto_finds_qwen_vl_where_a_tag_is(survey_of, mapping, expected) -> None:
    assert resolve_layout("auto", survey_of, mapping).fmt == expected


def test_tagged_rows_carry_images_and_say_so() -> None:
    layout = resolve_layout("auto", seen("query", "response", tags=("query",)), {})
    assert (layout.images, layout.output) == (True, "vlm")
    assert layout.describe() == "qwen_vl with images (`query` as prompt; `response` as completion)"
    untagged = resolve_layout("qwen_vl", seen("query", "response"), {})
    assert (untagged.images, untagged.output) == (False, "messages")


# --------------------------------------------------------------------------- rows


def test_query_response_rows_become_vision_conversations(tmp_path: Path) -> None:
    """ms-swift's Qwen-VL rows; the file in a folder of its own, its pictures beside it."""
    folder = tmp_path / "data"
    folder.mkdir()
    a, b, _ = pictures(folder)
    rows = [
        {"system": "Be brief.", "query": tagged(a), "response": "red"},
        {"query": f"Picture 1: <img>{a}</img>\nPicture 2: <img>{b}</img>\nSame?", "response": "no"},
        {"query": "No picture: 1 + 1?", "response": "2"},  # text rows may sit among them
    ]
    splits = load(write_jsonl(folder / "d.jsonl", rows), kind="vlm", eval_fraction=0.0)
    assert (splits.format, splits.source_format) == (
        "vlm",
        "qwen_vl with images (`query` as prompt; `response` as completion)",
    )
    first, second, third = splits.train.with_format(None)
    assert said(first) == [
        ("system", ["Be brief."]),
        ("user", ["Picture 1:", "image", QUESTION]),
        ("assistant", ["red"]),
    ]
    assert said(second)[0] == ("user", ["Picture 1:", "image", "Picture 2:", "image", "Same?"])
    assert [image.size for image in second["images"]] == [(16, 16), (16, 16)]
    assert said(third) == [("user", ["No picture: 1 + 1?"]), ("assistant", ["2"])]
    assert third["images"] == []


def test_qwen_vl_conversations_and_history_name_images_in_any_user_turn(tmp_path: Path) -> None:
    a, b, _ = pictures(tmp_path)
    conversation = turns(
        ("user", tagged(a)), ("assistant", "red"), ("user", tagged(b, "And this?")), ("gpt", "b")
    )
    history = {"query": "Same as before?", "response": "yes", "history": [[tagged(a), "red"]]}
    path = write_jsonl(tmp_path / "d.jsonl", [{"conversations": conversation}])
    [row] = load(path, kind="vlm", eval_fraction=0.0).train.with_format(None)
    assert [part for _, parts in said(row) for part in parts].count("image") == 2
    assert len(row["images"]) == 2
    path = write_jsonl(tmp_path / "h.jsonl", [history])
    [row] = load(path, kind="vlm", eval_fraction=0.0).train.with_format(None)
    assert said(row)[0] == ("user", ["Picture 1:", "image", QUESTION])
    assert len(row["images"]) == 1


def test_a_format_set_by_hand_reads_the_tags_as_words(tmp_path: Path) -> None:
    """The way out for text that holds `<img>...</img>` as words (a file about HTML)."""
    rows = [{"conversations": turns(("human", "Wrap it: <img>x</img>"), ("gpt", "done"))}]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    [row] = load(path, format="sharegpt", eval_fraction=0.0).train.with_format(None)
    assert row["messages"][0]["content"] == "Wrap it: <img>x</img>"


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("query", "response", "said_"),
    [
        (
            tagged("https://x.org/a.png"),
            "red",
            ("row 2:", "the image `https://x.org/a.png` is a remote URL", "Download the image"),
        ),
        (tagged("pics/nope.png"), "red", ("row 2:", "nope.png (image 1) does not exist")),
        ("<img></img>What?", "red", ("row 2:", "`query` has an empty `<img></img>` tag")),
        (
            "What is it?",
            tagged("pics/0.png"),
            ("row 2:", "`response` names an image", "the assistant's turn", "data.format"),
        ),
    ],
)
def test_a_bad_tag_is_refused_with_its_row(
    tmp_path: Path, query: str, response: str, said_: tuple[str, ...]
) -> None:
    [good, *_] = pictures(tmp_path)
    rows = [{"query": tagged(good), "response": "red"}, {"query": query, "response": response}]
    message = error(write_jsonl(tmp_path / "d.jsonl", rows), kind="vlm", eval_fraction=0.0)
    for text in said_:
        assert text in message, message


def test_tagged_rows_for_a_text_model_are_refused_as_image_rows_are(tmp_path: Path) -> None:
    [image, *_] = pictures(tmp_path)
    rows = [{"conversations": turns(("user", tagged(image)), ("assistant", "red"))}]
    message = error(write_jsonl(tmp_path / "d.jsonl", rows), kind="causal_lm")
    assert "holds vision-language rows (images, image parts or `<img>` tags)" in message
    assert "this stage trains a text-only model" in message


def test_images_both_tagged_and_listed_are_refused(tmp_path: Path) -> None:
    [image, *_] = pictures(tmp_path)
    rows = [{"query": tagged(image), "response": "red", "images": [image]}]
    message = error(write_jsonl(tmp_path / "d.jsonl", rows), kind="vlm", eval_fraction=0.0)
    assert "row 1: images are listed in `images` and named in content parts too" in message
