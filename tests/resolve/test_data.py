"""recipe_engine.resolve.data: file types, formats, splits, validation errors, identity."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data import data_identity, load_splits

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
    from recipe_engine.resolve import tiny

    monkeypatch.setattr(tiny, "build_dataset", lambda name: tmp_path)
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
        "import sys, recipe_engine.resolve.data as d\n"
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


# --------------------------------------------------------------------------- issue 11: formats


def pictures(folder: Path, n: int = 3) -> list[str]:
    """`n` small PNG squares drawn here; their paths relative to `folder`."""
    from PIL import Image, ImageDraw

    (folder / "pics").mkdir(exist_ok=True)
    names = []
    for i in range(n):
        image = Image.new("RGB", (16, 16), (0, 0, 0))
        ImageDraw.Draw(image).rectangle((2, 2, 12, 12), fill=(200, 40 * i, 40))
        image.save(folder / "pics" / f"{i}.png")
        names.append(f"pics/{i}.png")
    return names


def sharegpt(i: int, **extra: Any) -> dict[str, Any]:
    turns = [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"}]
    return {"conversations": [{"from": "system", "value": "Be brief."}, *turns], **extra}


def test_sharegpt_is_detected_and_converted_with_trls_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trl.data_utils

    calls = []
    original = trl.data_utils.maybe_convert_to_chatml

    def spy(example: dict[str, Any]) -> dict[str, Any]:
        calls.append(example)
        return original(example)

    monkeypatch.setattr(trl.data_utils, "maybe_convert_to_chatml", spy)
    path = write_jsonl(tmp_path / "d.jsonl", [sharegpt(0), sharegpt(1)])
    splits = load(path)
    assert splits.format == "messages" and splits.source_format == "sharegpt"
    assert splits.train[1]["messages"] == chat(1)["messages"]  # human/gpt -> user/assistant
    assert len(calls) == 2  # every row went through TRL's converter
    assert load(path, format="sharegpt").train.to_list() == splits.train.to_list()


def test_sharegpt_in_a_mapped_column_and_in_a_csv(tmp_path: Path) -> None:
    rows = [{"dialog": sharegpt(i)["conversations"]} for i in range(2)]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    splits = load(path, columns={"conversations": "dialog"})
    assert splits.train[0]["messages"] == chat(0)["messages"]
    # ShareGPT messages in a `messages` column are recognised by their keys.
    path = write_csv(tmp_path / "d.csv", [{"messages": json.dumps(r["dialog"])} for r in rows])
    assert load(path).train.to_list() == splits.train.to_list()


def test_sharegpt_with_images_for_a_vlm(tmp_path: Path) -> None:
    images = pictures(tmp_path, 2)
    plain = sharegpt(0, images=[images[0]])
    marked = {  # LLaVA-style: the image's place marked in the text
        "images": [images[1]],
        "conversations": [
            {"from": "human", "value": "<image>\nWhat colour?"},
            {"from": "gpt", "value": "red"},
        ],
    }
    splits = load(write_jsonl(tmp_path / "d.jsonl", [plain, marked]), kind="vlm")
    assert splits.format == "vlm" and splits.source_format == "sharegpt with images"
    first, second = splits.train[0], splits.train[1]
    assert [p["type"] for p in first["messages"][1]["content"]] == ["image", "text"]
    assert second["messages"][0]["content"] == [
        {"type": "image", "text": None},
        {"type": "text", "text": "What colour?"},
    ]
    assert first["images"][0].mode == "RGB" and first["images"][0].size == (16, 16)


def test_bad_sharegpt_rows_name_the_row(tmp_path: Path) -> None:
    bad = {"conversations": [{"from": "robot", "value": "q"}, {"from": "gpt", "value": "a"}]}
    path = write_jsonl(tmp_path / "d.jsonl", [sharegpt(0), bad])
    msg = error(path)
    assert f"data file {path}, row 2: message 1 of `conversations` is from `robot`" in msg
    assert "human, gpt" in msg

    path = write_jsonl(tmp_path / "e.jsonl", [sharegpt(0), {"conversations": [{"from": "human"}]}])
    assert "row 2: message 1 of `conversations` is not a {from, value} object" in error(path)


def test_image_path_question_answer_parquet_maps_to_vision_prompt_completion(
    tmp_path: Path,
) -> None:
    """TRL 1.16's conversational prompt-completion with images, the shape its vision collator
    takes (trl/trainer/sft_trainer.py, _collate_prompt_completion)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    images = pictures(tmp_path)
    table = {"img_path": images, "question": ["Colour?"] * 3, "answer": ["red", "pink", "x"]}
    pq.write_table(pa.table(table), tmp_path / "vqa.parquet")
    mapping = {"images": "img_path", "prompt": "question", "completion": "answer"}
    splits = load(tmp_path / "vqa.parquet", kind="vlm", columns=mapping)
    assert splits.format == "vlm_prompt_completion"
    row = splits.train[2]
    assert row["prompt"] == [
        {
            "role": "user",
            "content": [{"type": "image", "text": None}, {"type": "text", "text": "Colour?"}],
        }
    ]
    assert row["completion"] == [{"role": "assistant", "content": [{"type": "text", "text": "x"}]}]
    assert [image.mode for image in row["images"]] == ["RGB"]
    # A text model gets the rows refused, not its images dropped.
    assert "text-only model" in error(tmp_path / "vqa.parquet", columns=mapping)


def test_prompt_completion_with_images_in_jsonl_and_csv(tmp_path: Path) -> None:
    images = pictures(tmp_path, 2)
    rows = [{"images": [im], "prompt": "Colour?", "completion": "red"} for im in images]
    from_jsonl = load(write_jsonl(tmp_path / "d.jsonl", rows), kind="vlm")
    csv_rows = [{**r, "images": json.dumps(r["images"])} for r in rows]
    from_csv = load(write_csv(tmp_path / "d.csv", csv_rows), kind="vlm")
    assert from_jsonl.format == from_csv.format == "vlm_prompt_completion"
    assert from_csv.train[1]["prompt"] == from_jsonl.train[1]["prompt"]

    bad = [
        rows[0],
        {"images": [images[0], images[1]], "prompt": "<image> Colour?", "completion": "x"},
    ]
    msg = error(write_jsonl(tmp_path / "bad.jsonl", bad), kind="vlm")
    assert "row 2: 1 image placeholder(s)" in msg and "2 image(s)" in msg


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


def test_json_lines_errors_name_the_line_past_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(chat(0)) + "\n\n\n" + json.dumps(msgs(("user", "q"))) + "\n")
    assert f"data file {path}, row 4: the last message" in error(path)


def test_a_csv_row_with_too_many_cells_is_found_after_the_reader_fails(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("prompt,completion\n1+1?,2\n2+2?,4,5\n")
    assert f"data file {path}, row 2: the row has more cells than the header" in error(path)
    # Cells stay text as written: `2` is not an int, `2.50` not 2.5.
    path.write_text("prompt,completion\n1+1?,2\nhalf of 5?,2.50\n")
    assert load(path).train["completion"] == ["2", "2.50"]


def test_hub_rows_stay_arrow_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    hub = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([sharegpt(i) for i in range(3)]),
            "test": datasets.Dataset.from_list([sharegpt(9)]),
        }
    )
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: hub)
    splits = load_splits({"source": "hub", "path": "org/set"}, kind="causal_lm")
    assert isinstance(splits.train, datasets.Dataset) and isinstance(splits.eval, datasets.Dataset)
    assert splits.eval[0]["messages"] == chat(9)["messages"]
