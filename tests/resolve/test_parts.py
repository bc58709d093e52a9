"""recipe_engine.resolve.parts: content parts in every spelling users bring (TRL's, OpenAI's,
LLaMA-Factory's `value`, transformers' inline images), the image sources they name (paths
relative to the data file, `file://`, `data:`) and the remote ones refused; read into rows."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from data_kit import error, load, pictures, write_jsonl

from recipe_engine.resolve.parts import (
    IMAGE,
    TEXT,
    BadPart,
    ImageSource,
    Part,
    RemoteImage,
    image_source,
    read_part,
)


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ({"type": "text", "text": "hi"}, Part(TEXT, text="hi")),
        ({"type": "text", "value": "hi"}, Part(TEXT, text="hi")),
        ({"type": "text", "text": "hi", "image": None}, Part(TEXT, text="hi")),  # Arrow's nulls
        ({"type": "image"}, Part(IMAGE)),
        ({"type": "image", "text": None}, Part(IMAGE)),
        ({"type": "image", "image": "a.png"}, Part(IMAGE, source="a.png")),
        ({"type": "image", "url": "file:///x/a.png"}, Part(IMAGE, source="file:///x/a.png")),
        ({"type": "image", "path": "a.png"}, Part(IMAGE, source="a.png")),
        ({"type": "image_url", "image_url": {"url": "a.png"}}, Part(IMAGE, source="a.png")),
        ({"type": "image_url", "image_url": "a.png"}, Part(IMAGE, source="a.png")),
        ({"type": "image_url", "value": "a.png"}, Part(IMAGE, source="a.png")),
    ],
)
def test_every_spelling_of_a_part_reads_as_text_or_an_image(given: Any, read: Part) -> None:
    assert read_part(given) == read


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"type": "text", "text": " "}, "empty or non-string"),
        ({"type": "text", "value": 3}, "empty or non-string"),
        ({"type": "image_url"}, "without a URL"),
        ({"type": "image", "image": 7}, "not a path or URL"),
        ({"type": "audio", "audio": "a.wav"}, "not text or an image"),
        ("just text", "not text or an image"),
    ],
)
def test_a_part_of_no_known_spelling_says_how_it_differs(given: Any, said: str) -> None:
    with pytest.raises(BadPart, match=said):
        read_part(given)


def test_image_sources_are_paths_file_urls_or_data_uris_never_remote() -> None:
    assert image_source("pics/a.png") == ImageSource(path="pics/a.png")
    assert image_source("file:///data/my%20pics/a.png") == ImageSource(path="/data/my pics/a.png")
    assert image_source("C:\\pics\\a.png").path == "C:\\pics\\a.png"  # a drive, not a scheme
    uri = "data:image/png;base64," + base64.b64encode(b"\x89PNG").decode()
    assert image_source(uri) == ImageSource(data=b"\x89PNG")
    for remote in ("https://example.com/a.png", "http://x/a.png", "s3://bucket/a.png"):
        with pytest.raises(RemoteImage, match="remote URL"):
            image_source(remote)
    with pytest.raises(ValueError, match="base64"):
        image_source("data:image/png,raw")


# --------------------------------------------------------------------------- in rows


def vlm_row(parts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": parts},
            {"role": "assistant", "content": [{"type": "text", "value": "red"}]},
        ],
        **extra,
    }


def test_images_named_in_parts_become_the_rows_images_in_order(tmp_path: Path) -> None:
    names = pictures(tmp_path)
    uri = "data:image/png;base64," + base64.b64encode((tmp_path / names[2]).read_bytes()).decode()
    row = vlm_row(
        [
            {"type": "image_url", "image_url": {"url": f"file://{tmp_path / names[0]}"}},
            {"type": "text", "text": "and"},
            {"type": "image", "image": names[1]},
            {"type": "image_url", "image_url": {"url": uri}},
        ]
    )
    splits = load(write_jsonl(tmp_path / "d.jsonl", [row]), kind="vlm", eval_fraction=0.0)
    got = splits.train.with_format(None)[0]
    kinds = [part["type"] for part in got["messages"][0]["content"]]
    assert kinds == ["image", "text", "image", "image"]
    assert [image.size for image in got["images"]] == [(16, 16)] * 3
    assert splits.train.features["images"].feature.decode  # decoded as RGB when TRL reads


def test_a_path_written_from_a_project_root_is_found_above_the_data_file(tmp_path: Path) -> None:
    """LLaMA-Factory's v1 demo names `data/mllm_demo_data/1.jpg` from the repository root,
    and its file lives in `data/`."""
    (tmp_path / "data").mkdir()
    names = pictures(tmp_path / "data")
    row = vlm_row(
        [{"type": "image_url", "value": f"data/{names[0]}"}, {"type": "text", "value": "?"}]
    )
    splits = load(write_jsonl(tmp_path / "data" / "d.jsonl", [row]), kind="vlm", eval_fraction=0.0)
    assert len(splits.train.with_format(None)[0]["images"]) == 1


@pytest.mark.parametrize(
    ("row", "said"),
    [
        (
            vlm_row([{"type": "image_url", "image_url": {"url": "https://x.org/a.png"}}]),
            "row 1: the image `https://x.org/a.png` is a remote URL",
        ),
        (
            vlm_row([{"type": "image", "image": "pics/0.png"}], images=["pics/1.png"]),
            "row 1: images are listed in `images` and named in content parts too",
        ),
        (vlm_row([{"type": "image", "image": "nope.png"}]), "nope.png (image 1) does not exist"),
        (vlm_row([{"type": "video", "value": "a.mp4"}]), "row 1: message 1 has a content part"),
        (
            vlm_row([{"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}]),
            "row 1: image 1: a data: URI image whose base64 does not decode",
        ),
    ],
)
def test_bad_image_parts_name_the_row(row: dict[str, Any], said: str, tmp_path: Path) -> None:
    pictures(tmp_path)
    assert said in error(write_jsonl(tmp_path / "d.jsonl", [row]), kind="vlm", eval_fraction=0.0)


def test_text_parts_train_a_text_model_and_an_image_part_there_is_refused(tmp_path: Path) -> None:
    texts = vlm_row([{"type": "text", "value": "What colour"}, {"type": "text", "text": "is it?"}])
    splits = load(write_jsonl(tmp_path / "t.jsonl", [texts]), eval_fraction=0.0)
    assert splits.format == "messages"
    assert splits.train[0]["messages"][0]["content"] == "What colour\nis it?"
    late_image = vlm_row([{"type": "image", "image": pictures(tmp_path)[0]}])
    path = write_jsonl(tmp_path / "i.jsonl", [texts] * 70 + [late_image])
    assert "holds vision-language rows" in error(path, eval_fraction=0.0)
    assert load(path, kind="vlm", eval_fraction=0.0).format == "vlm"  # found past row 64
