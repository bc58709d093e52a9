"""The built-in datasets: coloured shapes to name (vlm rows) and sums to do (messages rows),
generated deterministically into `<cache>/data/<name>-<version>/{train,eval}.jsonl`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.files import default_cache_dir
from recipe_engine.resolve.tiny.build import SEED as _SEED
from recipe_engine.resolve.tiny.build import VERSION as _VERSION
from recipe_engine.resolve.tiny.build import build_once
from recipe_engine.resolve.tiny.shapes import COLOURS, SHAPES, SHAPES_QUESTION, draw_shape

# Built-in datasets and the format of their rows (what `data.format: auto` resolves to).
TINY_DATASETS: dict[str, str] = {"shapes": "vlm", "arithmetic": "messages"}
_SHAPES_TRAIN_PER_CLASS = 80  # 12 classes -> 960 rows
_SHAPES_EVAL_PER_CLASS = 8  # 12 classes -> 96 rows
# Single-digit operands keep the answer table small enough for a 2-layer model to learn quickly.
ARITH_MAX_OPERAND = 9
_ARITH_TRAIN_ROWS = 800
_ARITH_EVAL_ROWS = 64


def build_dataset(name: str, cache_dir: Path | None = None) -> Path:
    """Build (once) the generated dataset ``name``; return the folder with train/eval.jsonl."""
    builders: dict[str, Callable[[Path], None]] = {
        "shapes": _build_shapes,
        "arithmetic": _build_arithmetic,
    }
    if name not in builders:
        raise RecipeError(
            f"Unknown built-in dataset `{name}`.{did_you_mean(name, TINY_DATASETS)} "
            f"Built-in datasets: {', '.join(TINY_DATASETS)}.",
            key="data",
        )
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return build_once(root / "data" / f"{name}-{_VERSION}", builders[name])


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def _build_shapes(folder: Path) -> None:
    (folder / "images").mkdir()
    classes = [(c, s) for c in COLOURS for s in SHAPES]
    for split, per_class, seed in (
        ("train", _SHAPES_TRAIN_PER_CLASS, _SEED),
        ("eval", _SHAPES_EVAL_PER_CLASS, _SEED + 1),
    ):
        rng = random.Random(seed)
        labels = [cls for cls in classes for _ in range(per_class)]
        rng.shuffle(labels)  # balanced classes, random order
        rows = []
        for i, (colour, shape) in enumerate(labels):
            rel = f"images/{split}_{i:04d}.png"
            draw_shape(rng, colour, shape).save(folder / rel)
            rows.append(
                {
                    "images": [rel],
                    "messages": [
                        {
                            "role": "user",
                            "content": [
                                {"type": "image"},
                                {"type": "text", "text": SHAPES_QUESTION},
                            ],
                        },
                        {
                            "role": "assistant",
                            "content": [{"type": "text", "text": f"{colour} {shape}"}],
                        },
                    ],
                }
            )
        _write_jsonl(folder / f"{split}.jsonl", rows)


def _build_arithmetic(folder: Path) -> None:
    # The problem space is small on purpose (100 sums, 55 non-negative differences), so eval
    # draws mostly repeat training problems: exact match checks the table was learned.
    for split, count, seed in (
        ("train", _ARITH_TRAIN_ROWS, _SEED),
        ("eval", _ARITH_EVAL_ROWS, _SEED + 1),
    ):
        rng = random.Random(seed)
        rows = []
        for _ in range(count):
            a = rng.randint(0, ARITH_MAX_OPERAND)
            b = rng.randint(0, ARITH_MAX_OPERAND)
            if rng.random() < 0.5:
                question, answer = f"What is {a} + {b}?", a + b
            else:
                a, b = max(a, b), min(a, b)  # keep answers non-negative
                question, answer = f"What is {a} - {b}?", a - b
            rows.append(
                {
                    "messages": [
                        {"role": "user", "content": question},
                        {"role": "assistant", "content": str(answer)},
                    ]
                }
            )
        _write_jsonl(folder / f"{split}.jsonl", rows)
