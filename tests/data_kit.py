"""Shared helpers of the data tests (tests/resolve/test_data*.py, test_rows.py, ...): rows,
files of them, typed data settings and `load_splits` on them."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from recipe_engine.config.schema import DataConfig
from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data import load_splits

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


def write_alpaca(path: Path, n: int) -> Path:
    """`n` instructions as LLaMA-Factory's alpaca demo (data/alpaca_en_demo.json) is written:
    one indented JSON list of {instruction, input, output}, no held-out split."""
    rows = [
        {
            "instruction": f"Add {i} and {i % 7}.",
            "input": "" if i % 3 else f"{i} {i % 7}",
            "output": str(i + i % 7),
        }
        for i in range(n)
    ]
    path.write_text(json.dumps(rows, indent=2, ensure_ascii=False))
    return path


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def data(**keys: Any) -> DataConfig:
    """Data settings as a recipe gives them (`source=local` unless named)."""
    return DataConfig(**{"name": "test", **keys})


def load(path: Path, kind: str = "causal_lm", seed: int = 0, **cfg: Any):
    return load_splits(data(path=str(path), **cfg), kind=kind, seed=seed)


def error(path: Path, kind: str = "causal_lm", **cfg: Any) -> str:
    with pytest.raises(RecipeError) as info:
        load(path, kind=kind, **cfg)
    return str(info.value)


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


def bad_jsonl(tmp_path: Path, bad: Any, raw: bool = False) -> Path:
    """A file whose 3rd line is `bad` (lines 1-2 are fine)."""
    lines = [json.dumps(chat(0)), json.dumps(chat(1)), bad if raw else json.dumps(bad)]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def msgs(*pairs: tuple[Any, Any]) -> dict[str, Any]:
    return {"messages": [{"role": r, "content": c} for r, c in pairs]}


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


def sized_pictures(folder: Path, sizes: list[tuple[int, int]], rows: int = 4) -> Path:
    """A messages + images JSONL file (docs/data.md) of `rows` rows, each with one PNG drawn
    at the next of `sizes` (width, height), in turn."""
    from PIL import Image, ImageDraw

    (folder / "pics").mkdir(parents=True, exist_ok=True)
    names = []
    for width, height in sizes:
        image = Image.new("RGB", (width, height), (30, 30, 30))
        ImageDraw.Draw(image).ellipse((width // 4, height // 4, width // 2, height // 2), "red")
        image.save(folder / "pics" / f"{width}x{height}.png")
        names.append(f"pics/{width}x{height}.png")
    return write_jsonl(
        folder / "train.jsonl", [vlm_row([names[i % len(names)]]) for i in range(rows)]
    )


def sharegpt(i: int, **extra: Any) -> dict[str, Any]:
    turns = [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"}]
    return {"conversations": [{"from": "system", "value": "Be brief."}, *turns], **extra}
