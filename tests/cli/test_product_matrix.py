"""The product as users combine it: every data format x model kind x stage family trains,
evaluates and compares through the command line, and a two-stage recipe runs on every
built-in VLM family.

Data files are written here in each format, as a user would bring them (their own column
names, images beside the file); no trainer flag is set by hand. A step or two per stage is
enough to prove the path: learning is shown by `make run` and the SmolLM2 test.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from recipe_engine.cli.main import main

QUICK = ["data.max_samples=12", "data.eval_fraction=0.25", "eval.max_samples=3"]
QUICK += ["eval.max_new_tokens=4"]
COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (50, 80, 230)}
QUESTION = "What colour is the square?"
ASK = QUESTION


def _pairs() -> list[tuple[str, str]]:
    return [(f"What is {a} + {b}?", str(a + b)) for a in range(4) for b in range(4)]


def _pictures(folder: Path) -> list[tuple[str, str]]:
    """(relative image path, colour name) for 16 small squares drawn here."""
    (folder / "pictures").mkdir(exist_ok=True)
    out = []
    for i in range(16):
        colour = list(COLOURS)[i % len(COLOURS)]
        image = Image.new("RGB", (56, 56), (20, 20, 20))
        ImageDraw.Draw(image).rectangle((8 + i % 4, 8, 44, 44), fill=COLOURS[colour])
        image.save(folder / "pictures" / f"{i:02d}.png")
        out.append((f"pictures/{i:02d}.png", colour))
    return out


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def messages_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in _pairs()
    ]
    return _jsonl(folder / "chat.jsonl", rows), []


def prompt_completion_file(folder: Path) -> tuple[Path, list[str]]:
    path = folder / "pairs.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["prompt", "completion"])
        writer.writerows(_pairs())
    return path, []


def alpaca_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [{"instruction": "Add the numbers.", "input": q, "output": a} for q, a in _pairs()]
    path = folder / "alpaca.json"
    path.write_text(json.dumps(rows))
    return path, []


def sharegpt_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [
        {"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]}
        for q, a in _pairs()
    ]
    return _jsonl(folder / "sharegpt.jsonl", rows), []


def vlm_messages_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [
        {
            "images": [image],
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image"}, {"type": "text", "text": QUESTION}],
                },
                {"role": "assistant", "content": [{"type": "text", "text": colour}]},
            ],
        }
        for image, colour in _pictures(folder)
    ]
    return _jsonl(folder / "vlm.jsonl", rows), []


def image_question_answer_parquet(folder: Path) -> tuple[Path, list[str]]:
    """A user's own column names: an image path plus question / answer columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pictures = _pictures(folder)
    table = pa.table(
        {
            "img_path": [image for image, _ in pictures],
            "question": [QUESTION] * len(pictures),
            "answer": [colour for _, colour in pictures],
        }
    )
    path = folder / "vqa.parquet"
    pq.write_table(table, path)
    mapping = ["images=img_path", "prompt=question", "completion=answer"]
    return path, [f"data.columns.{m}" for m in mapping]


def sharegpt_images_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [
        {
            "images": [image],
            "conversations": [{"from": "human", "value": QUESTION}, {"from": "gpt", "value": c}],
        }
        for image, c in _pictures(folder)
    ]
    return _jsonl(folder / "sharegpt_vlm.jsonl", rows), []


TEXT_FORMATS = {
    "messages": messages_file,
    "prompt_completion": prompt_completion_file,
    "alpaca": alpaca_file,
    "sharegpt": sharegpt_file,
}
VLM_FORMATS = {
    "vlm_messages": vlm_messages_file,
    "image_path_question_answer": image_question_answer_parquet,
    "sharegpt_images": sharegpt_images_file,
}
# Stage family -> (recipe, its stage, overrides), per model kind.
CAUSAL_LM_FAMILIES = {
    "full": ("text-lora", "llm", ["stage.llm.lora=null"]),
    "lora": ("text-lora", "llm", []),
    "qlora": ("text-lora", "llm", ["++stage.llm.quantization.load_in_4bit=true"]),
}
VLM_FAMILIES = {
    "full": ("r2-vision-only", "vision", []),
    "lora": ("r4-joint", "joint", ["stage.joint.quantization=null"]),
    "qlora": ("r1-llm-only", "llm", []),
}
MATRIX = [
    pytest.param("tiny-qwen2", fmt, family, id=f"causal_lm-{fmt}-{family}")
    for fmt in TEXT_FORMATS
    for family in CAUSAL_LM_FAMILIES
] + [
    pytest.param("tiny-qwen2-vl", fmt, family, id=f"vlm-{fmt}-{family}")
    for fmt in VLM_FORMATS
    for family in VLM_FAMILIES
]


def run_engine(output_root: Path, *overrides: str, flags: tuple[str, ...] = ()) -> Path:
    """One `python -m recipe_engine ...` run in this process; returns its run folder."""
    assert main([*flags, f"output_root={output_root}", *QUICK, *overrides]) == 0
    [recipe_runs] = (output_root / "runs").iterdir()
    return max(recipe_runs.iterdir())


def assert_trained_evaluated_compared(run_dir: Path, stages: list[str]) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = {row["stage"]: row for row in summary["stages"]}
    assert list(rows) == stages
    for row in rows.values():
        assert row["status"] == "trained" and row["steps"] >= 1, row
        assert row["eval"].startswith("acc "), row  # held-out exact match was computed
    metrics = json.loads((run_dir / "compare_metrics.json").read_text())
    assert set(metrics) == {"base", *stages}
    for scores in metrics.values():
        assert scores["n"] >= 1 and math.isfinite(scores["exact_match"]), scores
    assert (run_dir / "compare.md").is_file()


@pytest.mark.parametrize(("model", "fmt", "family"), MATRIX)
def test_every_format_trains_evaluates_and_compares(model, fmt, family, tmp_path):
    kind_families = CAUSAL_LM_FAMILIES if model == "tiny-qwen2" else VLM_FAMILIES
    recipe, stage, family_overrides = kind_families[family]
    write = {**TEXT_FORMATS, **VLM_FORMATS}[fmt]
    path, mapping = write(tmp_path)
    run_dir = run_engine(
        tmp_path / "out",
        f"recipe={recipe}",
        f"model={model}",
        "data.source=local",
        f"data.path={path}",
        *mapping,
        f"stage.{stage}.train.max_steps=1",
        *family_overrides,
    )
    assert_trained_evaluated_compared(run_dir, [stage])


@pytest.mark.parametrize(
    "model", ["tiny-qwen2-vl", "tiny-qwen2.5-vl", "tiny-llava", "tiny-idefics3"]
)
def test_the_two_stage_recipe_runs_on_every_built_in_vlm_family(model, tmp_path):
    path, _ = vlm_messages_file(tmp_path)
    run_dir = run_engine(
        tmp_path / "out",
        "recipe=r3-two-stage",
        f"model={model}",
        "data.source=local",
        f"data.path={path}",
        "stage.vision.train.max_steps=1",
        "stage.llm.train.max_steps=1",
    )
    assert_trained_evaluated_compared(run_dir, ["vision", "llm"])


USER_RECIPES = str(Path(__file__).resolve().parents[1] / "fixtures" / "recipes")


@pytest.mark.parametrize("recipe", ["user-idefics3-declared", "user-idefics3-patterns"])
def test_idefics3_trains_two_stages_from_declared_components_or_regexes_alone(recipe, tmp_path):
    """Components declared in the user's model entry, or no map at all (freeze.patterns and
    target_modules only): both stages train, hand off, evaluate and compare."""
    from recipe_engine.store.records import Manifest

    run_dir = run_engine(
        tmp_path / "out",
        f"recipe={recipe}",
        "stage.vision.train.max_steps=2",
        "stage.llm.train.max_steps=2",
        flags=("--config-dir", USER_RECIPES),
    )
    assert_trained_evaluated_compared(run_dir, ["vision", "llm"])
    llm = Manifest.load(max((tmp_path / "out" / "store").glob("*/COMPLETE"), key=_mtime).parent)
    assert llm.stage == "llm" and llm.handoff["checked"] > 0
    assert llm.bits == "4bit"


def _mtime(path: Path) -> float:
    return path.stat().st_mtime
