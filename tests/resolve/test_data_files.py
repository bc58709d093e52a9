"""recipe_engine.resolve.data_files: local files, folders and saved datasets read into splits, with
errors that name the file and the line."""

from __future__ import annotations

import json
from pathlib import Path

from data_kit import CHAT, chat, error, load, msgs, write_csv, write_jsonl


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


def test_file_level_errors(tmp_path: Path) -> None:
    msg = error(tmp_path / "nope.jsonl")
    assert "data.path" in msg and "does not exist" in msg

    (tmp_path / "d.txt").write_text("hello")
    msg = error(tmp_path / "d.txt")
    assert "unsupported extension `.txt`" in msg and ".jsonl, .json, .csv, .parquet" in msg

    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    binary = error(tmp_path / "bin.jsonl")
    assert f"data file {tmp_path / 'bin.jsonl'}, line 1, byte 1 (0xff)" in binary
    assert "not UTF-8 text" in binary

    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    assert "cannot read it" in error(tmp_path / "bad.parquet")

    path = write_jsonl(tmp_path / "odd.jsonl", [{"body": "x"}])
    assert "cannot tell the data format" in error(path)

    (tmp_path / "empty.jsonl").write_text("\n")
    assert "has no rows" in error(tmp_path / "empty.jsonl")

    (tmp_path / "folder").mkdir()
    assert "holds no data files" in error(tmp_path / "folder")


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
