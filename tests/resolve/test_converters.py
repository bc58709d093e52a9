"""recipe_engine.resolve.converters: each format's rows as TRL takes them (Alpaca, ShareGPT through
TRL's helper, prompt/completion with images)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from data_kit import chat, error, load, pictures, sharegpt, write_csv, write_jsonl


def test_alpaca_without_input_column(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"instruction": "Do", "output": "Done"}])
    assert load(path).train[0]["messages"][0]["content"] == "Do"


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


def test_vision_prompt_completion_rows_reach_trls_collator_with_their_images(
    tmp_path: Path,
) -> None:
    """The rows as TRL's vision collator takes them: pixels for every image, the loss on
    the completion only (prompt and image tokens masked)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    from recipe_engine.config.schema import ModelConfig
    from recipe_engine.resolve.tiny import build_tiny_model
    from recipe_engine.run.loading import load_processor

    (tmp_path / "pictures").mkdir()
    colours = {"red": (220, 40, 40), "green": (40, 180, 60)}
    for colour, rgb in colours.items():
        Image.new("RGB", (56, 56), rgb).save(tmp_path / "pictures" / f"{colour}.png")
    paths = [f"pictures/{colour}.png" for colour in colours]
    table = {"img_path": paths, "question": ["What colour?"] * 2, "answer": list(colours)}
    pq.write_table(pa.table(table), tmp_path / "vqa.parquet")
    mapping = {"images": "img_path", "prompt": "question", "completion": "answer"}
    splits = load(tmp_path / "vqa.parquet", kind="vlm", columns=mapping)
    tiny = ModelConfig(name="tiny-qwen2-vl", source="tiny", id="tiny-qwen2-vl")
    processor = load_processor(str(build_tiny_model(tiny.id)), tiny)
    collator = DataCollatorForVisionLanguageModeling(processor, completion_only_loss=True)
    batch = collator([splits.train[i] for i in range(2)])
    assert batch["pixel_values"].shape[0] > 0 and batch["image_grid_thw"].shape[0] == 2
    answer = processor.tokenizer.decode(batch["labels"][0][batch["labels"][0] != -100])
    assert answer.startswith(splits.train[0]["completion"][0]["content"][0]["text"])
