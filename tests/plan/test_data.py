"""Tests for recipe_engine.plan.data: file types, formats, splits, validation errors, identity."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.plan.data import data_identity, load_splits

CHAT = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
]


def chat(i: int) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"q{i}"},
            {"role": "assistant", "content": f"a{i}"},
        ]
    }


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def load(path: Path, kind: str = "causal_lm", seed: int = 0, **cfg: Any):
    return load_splits({"source": "local", "path": str(path), **cfg}, kind=kind, seed=seed)


def error(path: Path, kind: str = "causal_lm", **cfg: Any) -> str:
    with pytest.raises(RecipeError) as info:
        load(path, kind=kind, **cfg)
    return str(info.value)


# --------------------------------------------------------------------------- file types


def test_jsonl_messages(tmp_path: Path) -> None:
    splits = load(write_jsonl(tmp_path / "d.jsonl", [chat(0), chat(1)]))
    assert splits.format == "messages"
    assert splits.eval is None
    assert splits.train.column_names == ["messages"]
    assert splits.train[1]["messages"] == chat(1)["messages"]
    assert len(splits.identity) == 64


def test_json_list_and_json_lines_in_json_file(tmp_path: Path) -> None:
    (tmp_path / "list.json").write_text(json.dumps([chat(0), chat(1)], indent=2))
    write_jsonl(tmp_path / "lines.json", [chat(0), chat(1)])
    for name in ("list.json", "lines.json"):
        splits = load(tmp_path / name)
        assert [r["messages"] for r in splits.train] == [chat(0)["messages"], chat(1)["messages"]]


def test_csv_prompt_completion(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "d.csv",
        [{"prompt": "2+2=", "completion": "4"}, {"prompt": "Sky is", "completion": " blue"}],
    )
    splits = load(path)
    assert splits.format == "prompt_completion"
    assert splits.train.column_names == ["prompt", "completion"]
    assert splits.train[1] == {"prompt": "Sky is", "completion": " blue"}


def test_csv_messages_as_json_cells(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "d.csv", [{"messages": json.dumps(CHAT)}])
    assert load(path).train[0]["messages"] == CHAT


def test_parquet_alpaca(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"instruction": "Translate", "input": "chat", "output": "cat"},
        {"instruction": "Say hi", "input": "", "output": "hi"},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    splits = load(tmp_path / "d.parquet")
    # Alpaca becomes conversational messages: the rows TRL trains on.
    assert splits.format == "messages"
    assert splits.train[0]["messages"] == [
        {"role": "user", "content": "Translate\n\nchat"},
        {"role": "assistant", "content": "cat"},
    ]
    assert splits.train[1]["messages"][0] == {"role": "user", "content": "Say hi"}


def test_alpaca_without_input_column(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"instruction": "Do", "output": "Done"}])
    assert load(path).train[0]["messages"][0]["content"] == "Do"


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


# --------------------------------------------------------------------------- splits


def test_folder_with_train_and_eval_files(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", [chat(i) for i in range(3)])
    write_jsonl(tmp_path / "eval.jsonl", [chat(9)])
    splits = load(tmp_path, eval_fraction=0.5)  # an eval file wins over eval_fraction
    assert len(splits.train) == 3
    assert splits.eval is not None and splits.eval[0]["messages"] == chat(9)["messages"]


def test_folder_validation_file_is_eval_by_default(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", [chat(0)])
    write_jsonl(tmp_path / "validation.jsonl", [chat(1)])
    assert len(load(tmp_path).eval) == 1
    assert load(tmp_path, eval_split=None).eval is None


def test_folder_named_splits(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "sft.jsonl", [chat(0)])
    write_jsonl(tmp_path / "dev.jsonl", [chat(1)])
    splits = load(tmp_path, train_split="sft", eval_split="dev")
    assert (len(splits.train), len(splits.eval)) == (1, 1)
    msg = error(tmp_path, train_split="sft", eval_split="devv")
    assert "no `devv` split" in msg and "Did you mean `dev`?" in msg


def test_eval_fraction_is_deterministic(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [chat(i) for i in range(20)])
    a, b = load(path, eval_fraction=0.25, seed=1), load(path, eval_fraction=0.25, seed=1)
    assert (len(a.train), len(a.eval)) == (15, 5)
    assert a.eval.to_list() == b.eval.to_list() and a.train.to_list() == b.train.to_list()
    every = {json.dumps(r) for r in a.train.to_list() + a.eval.to_list()}
    assert len(every) == 20  # a partition: nothing lost or duplicated
    other = load(path, eval_fraction=0.25, seed=2)
    assert other.eval.to_list() != a.eval.to_list()


def test_max_samples_caps_train_only(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", [chat(i) for i in range(10)])
    write_jsonl(tmp_path / "eval.jsonl", [chat(i) for i in range(4)])
    splits = load(tmp_path, max_samples=3)
    assert [r["messages"][1]["content"] for r in splits.train] == ["q0", "q1", "q2"]
    assert len(splits.eval) == 4


def test_saved_dataset_dict_and_dataset(tmp_path: Path) -> None:
    import datasets

    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([{"prompt": "p", "completion": "c"}] * 3),
            "test": datasets.Dataset.from_list([{"prompt": "e", "completion": "f"}]),
        }
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    splits = load(tmp_path / "dd")
    assert (len(splits.train), len(splits.eval)) == (3, 1)
    assert splits.eval[0] == {"prompt": "e", "completion": "f"}

    datasets.Dataset.from_list([chat(0)]).save_to_disk(str(tmp_path / "ds"))
    assert load(tmp_path / "ds").train[0]["messages"] == chat(0)["messages"]


def test_tiny_source_uses_built_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_jsonl(tmp_path / "train.jsonl", [chat(0)])
    write_jsonl(tmp_path / "eval.jsonl", [chat(1)])
    fake = types.ModuleType("recipe_engine.tiny")
    fake.build_dataset = lambda name: tmp_path  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "recipe_engine.tiny", fake)
    splits = load_splits({"source": "tiny", "path": "arithmetic"}, kind="causal_lm")
    assert (len(splits.train), len(splits.eval)) == (1, 1)


def test_a_file_given_to_the_tiny_source_says_to_set_source_local() -> None:
    with pytest.raises(RecipeError) as info:
        load_splits({"source": "tiny", "path": "my/train.jsonl"}, kind="causal_lm")
    assert "not a built-in dataset" in str(info.value) and "data.source=local" in str(info.value)


def test_hub_unreachable_explains(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    def offline(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Couldn't reach huggingface.co")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(RecipeError) as info:
        load_splits({"source": "hub", "path": "org/set"}, kind="causal_lm")
    msg = str(info.value)
    assert "org/set" in msg and "Hub" in msg and "data.source=local" in msg


# --------------------------------------------------------------------------- VLM


def make_images(folder: Path) -> None:
    from PIL import Image

    (folder / "img").mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (255, 0, 0)).save(folder / "img" / "a.png")
    Image.new("L", (6, 4), 128).save(folder / "img" / "b.png")  # grayscale -> RGB on load


def vlm_row(images: list[str], placeholders: int = -1) -> dict[str, Any]:
    n = len(images) if placeholders < 0 else placeholders
    content = [{"type": "image"}] * n + [{"type": "text", "text": "What is shown?"}]
    return {
        "images": images,
        "messages": [
            {"role": "user", "content": content},
            {"role": "assistant", "content": "Squares."},
        ],
    }


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


def test_causal_lm_rejects_vlm_rows(tmp_path: Path) -> None:
    make_images(tmp_path)
    path = write_jsonl(tmp_path / "d.jsonl", [vlm_row(["img/a.png"])])
    assert "text-only model" in error(path, kind="causal_lm")


def test_vlm_kind_accepts_text_rows(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [chat(0)])
    splits = load(path, kind="vlm")
    assert splits.format == "messages"
    assert splits.train[0]["messages"] == chat(0)["messages"]


# --------------------------------------------------------------------------- bad rows


def bad_jsonl(tmp_path: Path, bad: Any, raw: bool = False) -> Path:
    """A file whose 3rd line is `bad` (lines 1-2 are fine)."""
    lines = [json.dumps(chat(0)), json.dumps(chat(1)), bad if raw else json.dumps(bad)]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def msgs(*pairs: tuple[Any, Any]) -> dict[str, Any]:
    return {"messages": [{"role": r, "content": c} for r, c in pairs]}


@pytest.mark.parametrize(
    ("bad", "raw", "expected"),
    [
        ('{"messages": [', True, "invalid JSON"),
        ("[1, 2]", True, "expected a JSON object"),
        ({"messages": None, "text": "x"}, False, "`messages` is missing (columns: messages, text)"),
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


def test_file_level_errors(tmp_path: Path) -> None:
    msg = error(tmp_path / "nope.jsonl")
    assert "data.path" in msg and "does not exist" in msg

    (tmp_path / "d.txt").write_text("hello")
    msg = error(tmp_path / "d.txt")
    assert "unsupported extension `.txt`" in msg and ".jsonl, .json, .csv, .parquet" in msg

    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    assert f"data file {tmp_path / 'bin.jsonl'}: cannot read it" in error(tmp_path / "bin.jsonl")

    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    assert "cannot read it" in error(tmp_path / "bad.parquet")

    path = write_jsonl(tmp_path / "odd.jsonl", [{"text": "x"}])
    assert "cannot tell the data format" in error(path)

    (tmp_path / "empty.jsonl").write_text("\n")
    assert "has no rows" in error(tmp_path / "empty.jsonl")

    (tmp_path / "folder").mkdir()
    assert "holds no data files" in error(tmp_path / "folder")


@pytest.mark.parametrize(
    ("key", "value"),
    [("format", "chatml"), ("source", "s3"), ("eval_fraction", 1.5), ("max_samples", 0)],
)
def test_bad_settings(tmp_path: Path, key: str, value: Any) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [chat(0)])
    with pytest.raises(RecipeError) as info:
        load(path, **{key: value})
    assert info.value.key == f"data.{key}"


def test_unknown_column_name(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [chat(0)])
    with pytest.raises(RecipeError) as info:
        load(path, columns={"mesages": "x"})
    assert "Did you mean `messages`?" in str(info.value)


# --------------------------------------------------------------------------- identity


def test_identity_tracks_bytes_and_settings(tmp_path: Path) -> None:
    make_images(tmp_path)
    write_jsonl(tmp_path / "train.jsonl", [chat(0)])
    cfg = {"source": "local", "path": str(tmp_path)}
    first = data_identity(cfg)
    assert data_identity(cfg) == first
    assert data_identity({**cfg, "max_samples": 5}) != first
    assert data_identity({**cfg, "columns": {"messages": "m"}}) != first

    image = tmp_path / "img" / "a.png"
    original = image.read_bytes()
    image.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    assert data_identity(cfg) != first
    image.write_bytes(original)
    assert data_identity(cfg) == first

    single = {"source": "local", "path": str(tmp_path / "train.jsonl")}
    before = data_identity(single)
    write_jsonl(tmp_path / "train.jsonl", [chat(1)])
    assert data_identity(single) != before


def test_identity_for_hub_and_tiny_needs_no_files() -> None:
    hub = {"source": "hub", "path": "org/set"}
    assert data_identity(hub) != data_identity({**hub, "revision": "v2"})
    assert data_identity({"source": "tiny", "path": "shapes"}) != data_identity(
        {"source": "tiny", "path": "arithmetic"}
    )


def test_module_import_is_light() -> None:
    code = (
        "import sys, recipe_engine.plan.data as d\n"
        "d.data_identity({'source': 'hub', 'path': 'x'})\n"
        "print(sorted(m for m in ('torch', 'datasets', 'pyarrow', 'PIL') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_explicit_mapping_wins_over_other_columns(tmp_path: Path) -> None:
    row = {**chat(0), "question": "q", "answer": "a"}
    path = write_jsonl(tmp_path / "d.jsonl", [row])
    splits = load(path, columns={"prompt": "question", "completion": "answer"})
    assert splits.format == "prompt_completion"


def test_saved_vlm_dataset_with_image_feature(tmp_path: Path) -> None:
    import datasets
    from PIL import Image

    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Gray."}]},
    ]  # Arrow can't mix string and list content, so every content is a list here
    ds = datasets.Dataset.from_dict({"images": [[Image.new("L", (3, 3))]], "messages": [messages]})
    ds = ds.cast_column("images", datasets.List(datasets.Image()))
    ds.save_to_disk(str(tmp_path / "saved"))
    splits = load(tmp_path / "saved", kind="vlm")
    assert splits.format == "vlm"
    assert splits.train[0]["images"][0].mode == "RGB"


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
        load_splits({"source": "local", "path": str(path)}, kind="causal_lm")
    assert f"{path}, row 2: {problem}" in str(info.value) and "alternate" in str(info.value)


def test_alternating_turns_after_a_system_message_are_accepted(tmp_path: Path) -> None:
    roles = ["system", "user", "assistant", "user", "assistant"]
    path = write_jsonl(
        tmp_path / "t.jsonl", [{"messages": [{"role": r, "content": "x"} for r in roles]}]
    )
    assert len(load_splits({"source": "local", "path": str(path)}, kind="causal_lm").train) == 1
