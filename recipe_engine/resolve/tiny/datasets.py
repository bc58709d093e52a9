"""The built-in datasets: coloured shapes to name (vlm rows) and sums to do (messages rows),
both as preference pairs (the right answer in a sentence chosen over the bare answer or a
wrong one, for DPO and ORPO) and as prompts with their answer (for GRPO and RLOO), and the
sums as unpaired feedback (one answer a row, labelled desirable or not, for KTO), generated
deterministically into
`<cache>/data/<name>-<version>/{train,eval}.jsonl`.
Each is written as a user would write the file, so it goes through the same converters.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.files import JsonObject, default_cache_dir
from recipe_engine.resolve.tiny.build import SEED as _SEED
from recipe_engine.resolve.tiny.build import VERSION as _VERSION
from recipe_engine.resolve.tiny.build import build_once
from recipe_engine.resolve.tiny.shapes import COLOURS, SHAPES, SHAPES_QUESTION, draw_shape

# Built-in datasets and the format of their rows (what `data.format: auto` resolves to).
TINY_DATASETS: dict[str, str] = {
    "shapes": "vlm",
    "arithmetic": "messages",
    "shapes-preference": "preference",
    "arithmetic-preference": "preference",
    "arithmetic-feedback": "unpaired",
    "arithmetic-prompts": "prompts",
    "shapes-prompts": "prompts",
}
_SHAPES_TRAIN_PER_CLASS = 80  # 12 classes -> 960 rows
_SHAPES_EVAL_PER_CLASS = 8  # 12 classes -> 96 rows
_SHAPE_PAIRS_TRAIN_PER_CLASS = 20  # 12 classes -> 240 pairs
_SHAPE_PAIRS_EVAL_PER_CLASS = 4  # 12 classes -> 48 pairs
# Single-digit operands keep the answer table small enough for a 2-layer model to learn quickly.
ARITH_MAX_OPERAND = 9
_ARITH_TRAIN_ROWS = 800
_ARITH_EVAL_ROWS = 64
_ARITH_PAIRS_TRAIN = 400
_ARITH_PAIRS_EVAL = 64
_ARITH_FEEDBACK_TRAIN = 400
_ARITH_FEEDBACK_EVAL = 64
_ARITH_PROMPTS_TRAIN = 256
_ARITH_PROMPTS_EVAL = 64
_SHAPE_PROMPTS_TRAIN_PER_CLASS = 8  # 12 classes -> 96 prompts
_SHAPE_PROMPTS_EVAL_PER_CLASS = 4  # 12 classes -> 48 prompts
# Seeds of the preference sets' train and eval splits: other draws than the instruction sets'.
_SHAPE_PAIRS_SEED = _SEED + 2
_ARITH_PAIRS_SEED = _SEED + 4
_ARITH_FEEDBACK_SEED = _SEED + 6
_ARITH_PROMPTS_SEED = _SEED + 8
_SHAPE_PROMPTS_SEED = _SEED + 10


def build_dataset(name: str, cache_dir: Path | None = None) -> Path:
    """Build (once) the generated dataset ``name``; return the folder with train/eval.jsonl."""
    builders: dict[str, Callable[[Path], None]] = {
        "shapes": _build_shapes,
        "arithmetic": _build_arithmetic,
        "shapes-preference": _build_shapes_preference,
        "arithmetic-preference": _build_arithmetic_preference,
        "arithmetic-feedback": _build_arithmetic_feedback,
        "arithmetic-prompts": _build_arithmetic_prompts,
        "shapes-prompts": _build_shapes_prompts,
    }
    if name not in builders:
        raise RecipeError(
            f"Unknown built-in dataset `{name}`.{did_you_mean(name, TINY_DATASETS)} "
            f"Built-in datasets: {', '.join(TINY_DATASETS)}.",
            key="data",
        )
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return build_once(root / "data" / f"{name}-{_VERSION}", builders[name])


def _write_jsonl(path: Path, rows: list[JsonObject]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def _drawn_shapes(
    folder: Path, split: str, per_class: int, seed: int
) -> Iterator[tuple[random.Random, str, str, str]]:
    """Every class `per_class` times in a seeded random order, each picture drawn into
    `folder/images`: (the generator, for what a row draws next; the picture's relative path;
    colour; shape)."""
    rng = random.Random(seed)
    labels = [(c, s) for c in COLOURS for s in SHAPES for _ in range(per_class)]
    rng.shuffle(labels)  # balanced classes, random order
    for i, (colour, shape) in enumerate(labels):
        rel = f"images/{split}_{i:04d}.png"
        draw_shape(rng, colour, shape).save(folder / rel)
        yield rng, rel, colour, shape


def _build_shapes(folder: Path) -> None:
    (folder / "images").mkdir()
    for split, per_class, seed in (
        ("train", _SHAPES_TRAIN_PER_CLASS, _SEED),
        ("eval", _SHAPES_EVAL_PER_CLASS, _SEED + 1),
    ):
        rows = []
        for _, rel, colour, shape in _drawn_shapes(folder, split, per_class, seed):
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


def _write_sums(
    folder: Path,
    counts: tuple[int, int],
    seed: int,
    row: Callable[[random.Random, int], JsonObject],
) -> None:
    """`train.jsonl` and `eval.jsonl`: `counts` rows each, drawn by `row(generator, index)`
    from generators seeded `seed` and `seed + 1`."""
    for split, count, split_seed in (("train", counts[0], seed), ("eval", counts[1], seed + 1)):
        rng = random.Random(split_seed)
        _write_jsonl(folder / f"{split}.jsonl", [row(rng, index) for index in range(count)])


def _build_arithmetic(folder: Path) -> None:
    # The problem space is small on purpose (100 sums, 55 non-negative differences), so eval
    # draws mostly repeat training problems: exact match checks the table was learned.
    def row(rng: random.Random, _: int) -> JsonObject:
        question, answer = _sum(rng)
        return {
            "messages": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": str(answer)},
            ]
        }

    _write_sums(folder, (_ARITH_TRAIN_ROWS, _ARITH_EVAL_ROWS), _SEED, row)


def _sum(rng: random.Random) -> tuple[str, int]:
    """A sum or a non-negative difference of single digits, and its answer."""
    a = rng.randint(0, ARITH_MAX_OPERAND)
    b = rng.randint(0, ARITH_MAX_OPERAND)
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", a + b
    a, b = max(a, b), min(a, b)  # keep answers non-negative
    return f"What is {a} - {b}?", a - b


def _build_shapes_preference(folder: Path) -> None:
    """The shapes question with its picture (drawn as `shapes` draws them). The chosen answer
    is a sentence naming the right colour and shape ("It is a red circle."), a style the
    `shapes` rows never use; the rejected one is either the bare answer `shapes` teaches
    ("red circle") or the sentence with a near miss (another shape, or another colour), so
    preference training must learn the style and keep the answer right. Both are checkable."""
    (folder / "images").mkdir()
    for split, per_class, seed in (
        ("train", _SHAPE_PAIRS_TRAIN_PER_CLASS, _SHAPE_PAIRS_SEED),
        ("eval", _SHAPE_PAIRS_EVAL_PER_CLASS, _SHAPE_PAIRS_SEED + 1),
    ):
        rows = []
        for rng, rel, colour, shape in _drawn_shapes(folder, split, per_class, seed):
            question = [{"type": "image"}, {"type": "text", "text": SHAPES_QUESTION}]
            rows.append(
                {
                    "images": [rel],
                    "prompt": [{"role": "user", "content": question}],
                    "chosen": _sentence(f"{colour} {shape}"),
                    "rejected": _shapes_rejected(rng, colour, shape),
                }
            )
        _write_jsonl(folder / f"{split}.jsonl", rows)


def _sentence(answer: str) -> str:
    return f"It is a {answer}." if not answer[0].isdigit() else f"It is {answer}."


def _shapes_rejected(rng: random.Random, colour: str, shape: str) -> str:
    """The bare right answer, or the sentence with another shape or another colour."""
    draw = rng.random()
    if draw < 0.5:
        return f"{colour} {shape}"
    if draw < 0.75:
        return _sentence(f"{colour} {rng.choice([s for s in SHAPES if s != shape])}")
    return _sentence(f"{rng.choice([c for c in COLOURS if c != colour])} {shape}")


def _build_arithmetic_preference(folder: Path) -> None:
    """The arithmetic questions as text pairs: the answer in a sentence ("It is 7.") chosen
    over the bare answer `arithmetic` teaches ("7") or the sentence with an answer off by one
    or two (never negative)."""

    def row(rng: random.Random, _: int) -> JsonObject:
        question, answer = _sum(rng)
        if rng.random() < 0.5:
            rejected = str(answer)
        else:
            rejected = _sentence(str(_near_miss(rng, answer)))
        return {"prompt": question, "chosen": _sentence(str(answer)), "rejected": rejected}

    _write_sums(folder, (_ARITH_PAIRS_TRAIN, _ARITH_PAIRS_EVAL), _ARITH_PAIRS_SEED, row)


def _near_miss(rng: random.Random, answer: int) -> int:
    """An answer off by one or two, never negative."""
    wrong = answer + rng.choice((-2, -1, 1, 2))
    return wrong if wrong >= 0 else answer + (answer - wrong)  # off as far, the other way


def _build_arithmetic_feedback(folder: Path) -> None:
    """The arithmetic questions as unpaired feedback, in TRL's prompt / completion / label
    columns, judged as `arithmetic-preference` judges its pairs: the answer in a sentence ("It
    is 7.") labelled true; the bare answer `arithmetic` teaches ("7") or the sentence with an
    answer off by one or two ("It is 8.") labelled false. Labels alternate, so every batch TRL
    reads in order holds both (its KL term pairs each prompt with the batch's other
    completions)."""

    def row(rng: random.Random, index: int) -> JsonObject:
        question, answer = _sum(rng)
        desirable = index % 2 == 0
        if desirable:
            completion = _sentence(str(answer))
        elif rng.random() < 0.5:
            completion = str(answer)
        else:
            completion = _sentence(str(_near_miss(rng, answer)))
        return {"prompt": question, "completion": completion, "label": desirable}

    _write_sums(folder, (_ARITH_FEEDBACK_TRAIN, _ARITH_FEEDBACK_EVAL), _ARITH_FEEDBACK_SEED, row)


def _build_arithmetic_prompts(folder: Path) -> None:
    """The arithmetic questions as prompts with their answer in an `answer` column, as online
    (GRPO) data is written: the stage answers the prompt itself and a reward reads `answer`."""

    def row(rng: random.Random, _: int) -> JsonObject:
        question, answer = _sum(rng)
        return {"prompt": question, "answer": str(answer)}

    _write_sums(folder, (_ARITH_PROMPTS_TRAIN, _ARITH_PROMPTS_EVAL), _ARITH_PROMPTS_SEED, row)


def _build_shapes_prompts(folder: Path) -> None:
    """The shapes question with its picture as a prompt, the right `answer` beside it."""
    (folder / "images").mkdir()
    for split, per_class, seed in (
        ("train", _SHAPE_PROMPTS_TRAIN_PER_CLASS, _SHAPE_PROMPTS_SEED),
        ("eval", _SHAPE_PROMPTS_EVAL_PER_CLASS, _SHAPE_PROMPTS_SEED + 1),
    ):
        rows = [
            {"images": [rel], "prompt": SHAPES_QUESTION, "answer": f"{colour} {shape}"}
            for _, rel, colour, shape in _drawn_shapes(folder, split, per_class, seed)
        ]
        _write_jsonl(folder / f"{split}.jsonl", rows)
