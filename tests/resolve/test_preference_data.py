"""Preference pairs (prompt / chosen / rejected) for DPO and ORPO stages: every way users write
them (text, conversations, TRL's implicit prompt, images, their own column names; JSON lines,
CSV, parquet) read into TRL's preference rows, each refusal naming the file, the row and the
fix, and the two built-in preference sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from data_kit import data, error, load, pictures, write_csv, write_jsonl

from recipe_engine.config.schema import ModelConfig
from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data import load_splits
from recipe_engine.resolve.formats import (
    is_plain_text,
    is_preference,
    is_text_prompt_completion,
    written_as,
)
from recipe_engine.resolve.row_shapes import OUTPUT_FORMATS, SHAPES, row_shape


def pair(i: int, **extra: Any) -> dict[str, Any]:
    return {"prompt": f"What is {i} + 1?", "chosen": str(i + 1), "rejected": str(i + 2), **extra}


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text}


def reply(text: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def conversation_pair(i: int) -> dict[str, Any]:
    """A conversational pair, each answer written another way TRL accepts."""
    return {
        "prompt": [{"role": "system", "content": "Be brief."}, user(f"q{i}")],
        "chosen": f"good {i}",  # text
        "rejected": [reply(f"bad {i}")],  # a list of one assistant message
    }


def implicit_pair(i: int) -> dict[str, Any]:
    shared = [user(f"q{i}"), reply(f"a{i}"), user(f"and q{i}?")]
    return {"chosen": [*shared, reply(f"good {i}")], "rejected": [*shared, reply(f"bad {i}")]}


# --------------------------------------------------------------------------- the queries


def test_the_preference_shapes_are_pairs_without_an_sft_loss_asked_their_prompt() -> None:
    pairs = [name for name in OUTPUT_FORMATS if is_preference(name)]
    assert pairs == ["preference", "chat_preference", "vlm_preference"]
    assert [name for name in OUTPUT_FORMATS if is_plain_text(name)] == [
        "prompt_completion",
        "preference",
        "unpaired",
        "prompts",
    ]
    assert not any(is_text_prompt_completion(name) for name in pairs)
    assert [written_as(name) for name in pairs] == ["preference", "preference", "vlm_preference"]
    assert written_as("chat_prompt_completion") == "prompt_completion"
    assert written_as("messages") == "messages"
    row = {"prompt": [user("2+2?")], "chosen": [reply("4")], "rejected": [reply("5")]}
    shape = row_shape(row)
    assert shape.name == "chat_preference" and shape.loss is None
    assert shape.asked.question(row) == [user("2+2?")] and shape.asked.answer(row) == [reply("4")]
    # A prompt/completion row is not a pair, nor a pair a prompt/completion row.
    assert row_shape({"prompt": "2+2?", "completion": "4"}).name == "prompt_completion"
    assert row_shape({"prompt": "2+2?", "chosen": "4", "rejected": "5"}).name == "preference"


# --------------------------------------------------------------------------- text pairs


def test_text_pairs_are_detected_and_kept_as_text_or_put_through_the_chat_template(
    tmp_path: Path,
) -> None:
    path = write_jsonl(tmp_path / "pairs.jsonl", [pair(0), pair(1)])
    splits = load(path)
    assert (splits.format, splits.source_format) == ("preference", "preference")
    assert splits.train.column_names == ["prompt", "chosen", "rejected"]
    assert splits.train.to_list() == [pair(0), pair(1)]
    assert load(path, format="preference").train.to_list() == splits.train.to_list()
    assert load(path, chat_template="false").format == "preference"
    chat = load(path, chat_template="true")
    assert chat.format == "chat_preference"
    assert chat.train[1] == {
        "prompt": [user("What is 1 + 1?")],
        "chosen": [reply("2")],
        "rejected": [reply("3")],
    }


def test_text_pairs_in_csv_and_parquet_and_under_the_users_column_names(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [pair(i) for i in range(3)]
    from_csv = load(write_csv(tmp_path / "pairs.csv", rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pairs.parquet")
    from_parquet = load(tmp_path / "pairs.parquet")
    assert from_csv.format == from_parquet.format == "preference"
    assert from_csv.train.to_list() == from_parquet.train.to_list() == rows

    theirs = [{"question": r["prompt"], "good": r["chosen"], "bad": r["rejected"]} for r in rows]
    mapping = {"prompt": "question", "chosen": "good", "rejected": "bad"}
    mapped = load(write_jsonl(tmp_path / "theirs.jsonl", theirs), columns=mapping)
    assert mapped.format == "preference" and mapped.train.to_list() == rows


# --------------------------------------------------------------------------- conversations


def test_conversational_pairs_become_chat_preference_whatever_the_chat_template_setting(
    tmp_path: Path,
) -> None:
    single = {**conversation_pair(2), "rejected": reply("bad 2")}  # one message, no list
    path = write_jsonl(tmp_path / "chat.jsonl", [conversation_pair(0), conversation_pair(1)])
    splits = load(path)
    assert splits.format == "chat_preference"
    assert splits.train[0] == {
        "prompt": [{"role": "system", "content": "Be brief."}, user("q0")],
        "chosen": [reply("good 0")],
        "rejected": [reply("bad 0")],
    }
    for setting in ("false", "true"):
        assert load(path, chat_template=setting).train.to_list() == splits.train.to_list()
    one = load(write_jsonl(tmp_path / "one.jsonl", [single]))
    assert one.format == "chat_preference" and one.train[0]["rejected"] == [reply("bad 2")]
    # A prompt given as text beside conversational answers is the user's turn.
    text_prompt = {"prompt": "q", "chosen": [reply("yes")], "rejected": [reply("no")]}
    read = load(write_jsonl(tmp_path / "t.jsonl", [text_prompt]))
    assert read.format == "chat_preference" and read.train[0]["prompt"] == [user("q")]


def test_answers_that_read_as_json_numbers_stay_text_beside_messages(tmp_path: Path) -> None:
    """A column mixing text and messages is read as JSON (`datasets.Json`), which hands "4"
    back as the number 4: it is the answer "4" again."""
    rows = [
        {"prompt": "What is 2 + 2?", "chosen": "4", "rejected": [reply("5")]},
        {"prompt": "Say yes.", "chosen": [reply("yes")], "rejected": "no"},
    ]
    splits = load(write_jsonl(tmp_path / "mixed.jsonl", rows))
    assert splits.format == "chat_preference"
    assert splits.train[0]["chosen"] == [reply("4")]
    assert splits.train[1]["rejected"] == [reply("no")]


def test_conversations_in_csv_cells_and_parquet_read_as_in_json_lines(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{**conversation_pair(i), "rejected": [reply(f"bad {i}")]} for i in range(2)]
    from_jsonl = load(write_jsonl(tmp_path / "chat.jsonl", rows))
    cells = [{k: v if isinstance(v, str) else json.dumps(v) for k, v in r.items()} for r in rows]
    cells[1]["rejected"] = json.dumps(reply("bad 1"))  # one message object as JSON
    from_csv = load(write_csv(tmp_path / "chat.csv", cells))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "chat.parquet")
    from_parquet = load(tmp_path / "chat.parquet")
    assert from_jsonl.format == from_csv.format == from_parquet.format == "chat_preference"
    assert from_csv.train.to_list() == from_jsonl.train.to_list()
    assert from_parquet.train.to_list() == from_jsonl.train.to_list()


def test_an_implicit_prompt_is_the_turns_chosen_and_rejected_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trl.data_utils

    calls = []
    original = trl.data_utils.extract_prompt
    monkeypatch.setattr(
        trl.data_utils, "extract_prompt", lambda example: calls.append(1) or original(example)
    )
    path = write_jsonl(tmp_path / "implicit.jsonl", [implicit_pair(0), implicit_pair(1)])
    splits = load(path)
    assert splits.format == "chat_preference"
    assert splits.source_format == "preference (implicit prompt)"
    assert splits.train[1] == {
        "prompt": [user("q1"), reply("a1"), user("and q1?")],
        "chosen": [reply("good 1")],
        "rejected": [reply("bad 1")],
    }
    assert len(calls) == 2  # every row through TRL's own reader
    mapped = [{"win": r["chosen"], "lose": r["rejected"]} for r in (implicit_pair(0),)]
    theirs = load(
        write_jsonl(tmp_path / "theirs.jsonl", mapped),
        columns={"chosen": "win", "rejected": "lose"},
    )
    assert theirs.train[0] == splits.train[0]


# --------------------------------------------------------------------------- images


def test_image_pairs_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    images = pictures(folder, 3)
    parts = [{"type": "image"}, {"type": "text", "text": "Colour?"}]
    rows = [
        {"images": [images[0]], **pair(0)},  # text prompt: the placeholder goes first
        {"images": [images[1]], **pair(1), "prompt": "<image>\nColour?"},  # LLaVA's mark
        {"images": [images[2]], **pair(2), "prompt": [user(parts)]},  # image parts
    ]
    splits = load(write_jsonl(folder / "train.jsonl", rows), kind="vlm")
    assert (splits.format, splits.source_format) == ("vlm_preference", "preference with images")
    assert splits.train.column_names == ["images", "prompt", "chosen", "rejected"]
    image_part = {"type": "image", "text": None}
    expected_text = ["What is 0 + 1?", "Colour?", "Colour?"]
    for row, text in zip(splits.train, expected_text, strict=True):
        assert row["prompt"] == [user([image_part, {"type": "text", "text": text}])]
        assert [(im.mode, im.size) for im in row["images"]] == [("RGB", (16, 16))]
    assert splits.train[0]["chosen"] == [reply([{"type": "text", "text": "1"}])]
    assert splits.train[0]["rejected"] == [reply([{"type": "text", "text": "2"}])]
    assert row_shape(splits.train[0]).name == "vlm_preference"
    # A text-only model gets the rows refused, not their images dropped.
    assert "text-only model" in error(folder / "train.jsonl")


def test_image_pairs_reach_trls_vision_preference_collator(tmp_path: Path) -> None:
    """The rows as TRL 1.16's DPO collator for vision models takes them (dpo_trainer.py,
    DataCollatorForVisionPreference): pixels for every image, chosen and rejected batched."""
    from trl.trainer.dpo_trainer import DataCollatorForVisionPreference

    from recipe_engine.resolve.tiny import build_tiny_model
    from recipe_engine.run.loading import load_processor

    images = pictures(tmp_path, 2)
    rows = [{"images": [image], **pair(i)} for i, image in enumerate(images)]
    splits = load(write_jsonl(tmp_path / "d.jsonl", rows), kind="vlm")
    tiny = ModelConfig(name="tiny-qwen2-vl", source="tiny", id="tiny-qwen2-vl")
    processor = load_processor(str(build_tiny_model(tiny.id)), tiny)
    batch = DataCollatorForVisionPreference(processor)([splits.train[i] for i in range(2)])
    assert batch["input_ids"].shape[0] == 4  # chosen then rejected, each with its prompt
    assert batch["image_grid_thw"].shape[0] == 4 and batch["pixel_values"].shape[0] > 0
    answers = [
        processor.tokenizer.decode(ids[mask.bool()])
        for ids, mask in zip(batch["input_ids"], batch["completion_mask"], strict=True)
    ]
    assert answers[0].startswith("1") and answers[2].startswith("2")


def test_conversational_pairs_go_through_trls_chat_template_reader() -> None:
    """chat_preference rows as DPO reads them: TRL's apply_chat_template on each pair."""
    from transformers import AutoTokenizer
    from trl.data_utils import apply_chat_template, is_conversational

    from recipe_engine.resolve.tiny import build_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model("tiny-qwen2"))
    row = {"prompt": [user("2+2?")], "chosen": [reply("4")], "rejected": [reply("5")]}
    assert is_conversational(row)
    text = apply_chat_template(row, tokenizer)
    assert "2+2?" in text["prompt"] and text["chosen"].startswith("4")
    assert text["rejected"].startswith("5")


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (
            {"prompt": "q", "rejected": "r"},
            "`chosen` is missing (columns: prompt, rejected). Map your column with "
            "data.columns.chosen=<name> or fix the row.",
        ),
        ({"prompt": "q", "chosen": "c"}, "`rejected` is missing (columns: prompt, chosen)"),
        ({"chosen": "c", "rejected": "r"}, "`prompt` is missing (columns: chosen, rejected)"),
        ({**pair(0), "chosen": "  "}, "`chosen` is empty. Fill it in or remove the row."),
        ({**pair(0), "rejected": ""}, "`rejected` is empty"),
        (
            {"prompt": "q", "chosen": "Paris", "rejected": " Paris\n"},
            "`chosen` and `rejected` are the same answer: nothing to prefer. Give a rejected "
            "answer that differs from the chosen one, or remove the row.",
        ),
        ({**pair(0), "chosen": ["a"]}, "`chosen` must be a string, got list"),
    ],
)
def test_bad_text_pairs_name_the_row_and_the_fix(
    tmp_path: Path, bad: dict[str, Any], expected: str
) -> None:
    path = write_jsonl(tmp_path / "pairs.jsonl", [pair(0), pair(1), bad, pair(3)])
    with pytest.raises(RecipeError) as info:
        load(path)
    assert f"data file {path}, row 3: {expected}" in str(info.value)
    assert info.value.key == "data.path"  # a plan-time refusal of the data


def test_a_mapped_column_missing_from_a_row_names_the_mapping(tmp_path: Path) -> None:
    rows = [{"q": "x", "good": "a", "bad": "b"}, {"q": "y", "bad": "b"}]
    mapping = {"prompt": "q", "chosen": "good", "rejected": "bad"}
    msg = error(write_jsonl(tmp_path / "d.jsonl", rows), columns=mapping)
    assert "row 2: `good` (data.columns.chosen) is missing (columns: q, bad)" in msg
    assert "data.columns.chosen=<name>" in msg


def test_text_pairs_without_a_prompt_column_say_how_to_give_one(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"chosen": "a", "rejected": "b"}])
    msg = error(path)
    assert f"data file {path}, row 1: `chosen` and `rejected` begin differently" in msg
    assert "data.columns.prompt=<name>" in msg and "implicit prompt" in msg


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (
            {**conversation_pair(9), "prompt": [user("q"), reply("a")]},
            "the last message of the prompt is from `assistant`, not `user`. End the prompt "
            "with the user turn",
        ),
        (
            {**conversation_pair(9), "chosen": [reply("a"), user("b")]},
            "`chosen` holds 2 messages, not one answer",
        ),
        (
            {**conversation_pair(9), "chosen": user("a")},
            "`chosen` is a message from `user`, not `assistant`",
        ),
        ({**conversation_pair(9), "rejected": [reply(" ")]}, "`rejected` is empty"),
        ({**conversation_pair(9), "rejected": []}, "`rejected` is empty"),
        (
            {**conversation_pair(9), "chosen": [reply("bad 9")]},
            "`chosen` and `rejected` are the same answer: nothing to prefer",
        ),
        ({**conversation_pair(9), "prompt": [{"from": "human"}]}, "message 1 of `prompt`"),
    ],
)
def test_bad_conversational_pairs_name_the_row(
    tmp_path: Path, bad: dict[str, Any], expected: str
) -> None:
    rows = [conversation_pair(0), conversation_pair(1), bad]
    path = write_jsonl(tmp_path / "chat.jsonl", rows)
    assert f"data file {path}, row 3: {expected}" in error(path)


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (
            {"chosen": "c", "rejected": implicit_pair(5)["rejected"]},
            "there is no `prompt` column, and `chosen` is text, not a conversation",
        ),
        (
            {"chosen": [user("x"), reply("a")], "rejected": [user("y"), reply("b")]},
            "`chosen` and `rejected` share no turns",
        ),
        (
            {
                "chosen": [user("x"), reply("a"), user("z"), reply("c")],
                "rejected": [user("x"), reply("b"), user("z"), reply("d")],
            },
            "`chosen` and `rejected` differ before their final assistant turn (they share 1 ",
        ),
        (
            {"chosen": implicit_pair(5)["chosen"], "rejected": implicit_pair(5)["chosen"]},
            "`chosen` and `rejected` are the same answer: nothing to prefer",
        ),
    ],
)
def test_bad_implicit_prompts_name_the_row(
    tmp_path: Path, bad: dict[str, Any], expected: str
) -> None:
    path = write_jsonl(tmp_path / "implicit.jsonl", [implicit_pair(0), implicit_pair(1), bad])
    assert f"data file {path}, row 3: {expected}" in error(path)


def test_a_split_is_read_one_way_and_a_row_written_the_other_is_refused(tmp_path: Path) -> None:
    """The first rows say text: a conversation further down is refused, not guessed at."""
    rows = [pair(i) for i in range(69)] + [{**pair(69), "prompt": [user("q")]}]
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    msg = error(path)
    assert f"data file {path}, row 70: `prompt` holds messages, but this split's first rows " in msg
    assert "all as text, or all as messages" in msg


def test_image_pairs_with_placeholders_that_do_not_match_their_images(tmp_path: Path) -> None:
    images = pictures(tmp_path, 2)
    two_marks = {"images": [images[0]], **pair(1), "prompt": "<image><image> Colour?"}
    rows = [{"images": [images[0]], **pair(0)}, two_marks]
    msg = error(write_jsonl(tmp_path / "d.jsonl", rows), kind="vlm")
    assert "row 2: 2 image placeholder(s)" in msg and "but 1 image(s) in `images`" in msg

    parts = [{"type": "image"}, {"type": "text", "text": "Colour?"}]
    bad = {"images": images, **pair(1), "prompt": [user(parts)]}
    msg = error(write_jsonl(tmp_path / "e.jsonl", [bad]), kind="vlm")
    assert "row 1: 1 image placeholder(s)" in msg and "2 image(s)" in msg

    answer = {"images": [images[0]], **pair(2), "chosen": [reply(parts)]}
    msg = error(write_jsonl(tmp_path / "f.jsonl", [rows[0], answer]), kind="vlm")
    assert "row 2: `chosen` holds an image part" in msg


# --------------------------------------------------------------------------- detection


def test_half_a_pair_names_the_missing_column(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "q", "chosen": "a"}])
    with pytest.raises(RecipeError) as info:
        load(path)
    assert str(info.value).startswith(
        f"data file {path} has `chosen` but no `rejected` column (columns: prompt, chosen): "
        "`prompt`+`chosen`+`rejected` (preference pairs) rows need it."
    )
    assert "data.columns.rejected=<name>" in str(info.value)
    assert info.value.key == "data.columns.rejected"


def test_columns_named_like_a_pair_get_the_mapping_in_the_refusal(tmp_path: Path) -> None:
    rows = [{"question": "q", "preferred": "a", "dispreferred": "b"}]
    msg = error(write_jsonl(tmp_path / "d.jsonl", rows))
    assert "cannot tell the data format" in msg
    assert (
        "`preferred`, `dispreferred` look like a preference pair (chosen, rejected): "
        "data.columns.prompt=question data.columns.chosen=preferred "
        "data.columns.rejected=dispreferred (data.format=preference)"
    ) in msg
    assert "data.columns.completion=" not in msg  # not offered as prompt/completion
    assert "`prompt`+`chosen`+`rejected` (preference pairs)" in msg


# --------------------------------------------------------------------------- built-in sets


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from recipe_engine.resolve.tiny import build_dataset

    cache = tmp_path_factory.mktemp("cache")
    return {
        name: build_dataset(name, cache) for name in ("arithmetic-preference", "shapes-preference")
    }


def rows_of(folder: Path, split: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines()]


def test_the_arithmetic_pairs_prefer_the_sum_in_a_sentence_to_the_bare_sum_or_a_wrong_one(
    built: dict[str, Path],
) -> None:
    folder = built["arithmetic-preference"]
    for split, count in (("train", 400), ("eval", 64)):
        rows = rows_of(folder, split)
        assert len(rows) == count
        bare = 0
        for row in rows:
            a, op, b = row["prompt"].removeprefix("What is ").removesuffix("?").split()
            right = int(a) + int(b) if op == "+" else int(a) - int(b)
            assert row["chosen"] == f"It is {right}." and right >= 0
            if row["rejected"] == str(right):  # the bare answer `arithmetic` teaches
                bare += 1
                continue
            wrong = int(row["rejected"].removeprefix("It is ").removesuffix("."))
            assert abs(wrong - right) in (1, 2) and wrong >= 0
        assert 0.3 < bare / count < 0.7  # both kinds of rejected answer, about half each


def test_the_shape_pairs_prefer_the_sentence_to_the_bare_name_or_a_near_miss(
    built: dict[str, Path],
) -> None:
    from recipe_engine.resolve.tiny import COLOURS, SHAPES, SHAPES_QUESTION

    folder = built["shapes-preference"]
    for split, per_class in (("train", 20), ("eval", 4)):
        rows = rows_of(folder, split)
        assert len(rows) == per_class * len(COLOURS) * len(SHAPES)
        counts: dict[str, int] = {}
        for row in rows:
            (image,) = row["images"]
            assert (folder / image).is_file()
            assert row["prompt"][0]["content"][1]["text"] == SHAPES_QUESTION
            colour, shape = row["chosen"].removeprefix("It is a ").removesuffix(".").split()
            rejected = row["rejected"]
            if rejected == f"{colour} {shape}":  # the bare name `shapes` teaches
                continue
            other_colour, other_shape = rejected.removeprefix("It is a ").removesuffix(".").split()
            assert (colour == other_colour) != (shape == other_shape)  # one of them wrong
            assert other_colour in COLOURS and other_shape in SHAPES
            counts[row["chosen"]] = counts.get(row["chosen"], 0) + 1
        assert set(counts) == {f"It is a {c} {s}." for c in COLOURS for s in SHAPES}


def test_the_built_in_pairs_are_deterministic(built: dict[str, Path], tmp_path: Path) -> None:
    from recipe_engine.resolve.tiny import build_dataset

    for name, folder in built.items():
        again = build_dataset(name, tmp_path)
        for split in ("train", "eval"):
            assert (folder / f"{split}.jsonl").read_bytes() == (
                again / f"{split}.jsonl"
            ).read_bytes()
    first = rows_of(built["shapes-preference"], "train")[0]["images"][0]
    again = build_dataset("shapes-preference", tmp_path)
    assert (built["shapes-preference"] / first).read_bytes() == (again / first).read_bytes()


@pytest.mark.parametrize(
    ("name", "kind", "expected"),
    [
        ("arithmetic-preference", "causal_lm", ("preference", 400, 64)),
        ("shapes-preference", "vlm", ("vlm_preference", 240, 48)),
    ],
)
def test_the_built_in_pairs_read_as_the_data_source_tiny(
    built: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    kind: str,
    expected: tuple[str, int, int],
) -> None:
    from recipe_engine.resolve import tiny

    monkeypatch.setattr(tiny, "build_dataset", lambda asked: built[asked])
    splits = load_splits(data(source="tiny", path=name), kind=kind)
    assert (splits.format, len(splits.train), len(splits.eval)) == expected
    assert splits.train.features == SHAPES[splits.format].features(__import__("datasets"))
    row = splits.train[0]
    assert row_shape(row).name == splits.format
    source = rows_of(built[name], "train")[0]
    answer = row_shape(row).asked.answer(row)
    assert (answer if isinstance(answer, str) else answer[0]["content"][0]["text"]) == (
        source["chosen"]
    )


def test_a_pairs_longest_row_is_its_prompt_and_its_longer_answer(tmp_path: Path) -> None:
    """What the memory estimate reads: the trainer runs each answer after the prompt, so one
    sequence holds the prompt and one answer, the longer."""
    from recipe_engine.config.schema import DataConfig
    from recipe_engine.resolve.resolver import survey

    rows = [{"prompt": "p" * 10, "chosen": "c" * 300, "rejected": "r" * 50}] * 4
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = DataConfig(name="pairs", path=str(path), eval_fraction=0.25, chat_template="false")
    longest = survey(config, "causal_lm", 0, {}).longest
    assert longest.chars == 10 + 300 and longest.messages == 2
