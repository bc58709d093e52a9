"""Data a user brings, end to end through the command line with a shipped template and no
trainer flag set by hand: prompt/completion text and an alpaca JSON file as LLaMA-Factory
ships it on `text-lora` (tiny Qwen2), and an `img_path, question, answer` parquet on
`r1-llm-only` (tiny Qwen2-VL, QLoRA). None of the files has a held-out split: each run holds
rows out itself, trains, evaluates them and writes the compare report; two steps prove the
path."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_kit import write_alpaca
from PIL import Image, ImageDraw

from recipe_engine.cli.main import main

QUICK = ["data.max_samples=12", "eval.max_samples=3", "eval.max_new_tokens=4"]
COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (50, 80, 230)}
QUESTION = "What colour is the square?"


def pairs_csv(folder: Path) -> Path:
    path = folder / "pairs.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["prompt", "completion"])
        writer.writerows((f"What is {a} + {b}?", str(a + b)) for a in range(5) for b in range(5))
    return path


def vqa_parquet(folder: Path) -> Path:
    """Coloured squares beside the file, named by a relative `img_path` column."""
    (folder / "pictures").mkdir()
    paths, answers = [], []
    for i in range(20):
        colour = list(COLOURS)[i % len(COLOURS)]
        image = Image.new("RGB", (56, 56), (20, 20, 20))
        ImageDraw.Draw(image).rectangle((8, 8, 44, 44), fill=COLOURS[colour])
        image.save(folder / "pictures" / f"{i:02d}.png")
        paths.append(f"pictures/{i:02d}.png")
        answers.append(colour)
    table = {"img_path": paths, "question": [QUESTION] * len(paths), "answer": answers}
    pq.write_table(pa.table(table), folder / "vqa.parquet")
    return folder / "vqa.parquet"


VQA_COLUMNS = ["images=img_path", "prompt=question", "completion=answer"]


def run(output_root: Path, *overrides: str) -> Path:
    assert main([f"output_root={output_root}", *QUICK, *overrides]) == 0
    [recipe_runs] = (output_root / "runs").iterdir()
    return max(recipe_runs.iterdir())


def assert_trained_evaluated_compared(run_dir: Path, stage: str) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    [row] = summary["stages"]
    assert row["stage"] == stage and row["status"] == "trained" and row["steps"] == 2, row
    assert row["eval"].startswith("acc "), row  # held-out exact match was computed
    metrics = json.loads((run_dir / "compare_metrics.json").read_text())
    assert set(metrics) == {"base", stage}
    for scores in metrics.values():
        assert scores["n"] == 3 and math.isfinite(scores["exact_match"]), scores
        assert math.isfinite(scores["eval_loss"]), scores
    assert (run_dir / "compare.md").is_file()


def test_prompt_completion_text_trains_evaluates_and_compares(tmp_path: Path) -> None:
    run_dir = run(
        tmp_path / "out",
        "recipe=text-lora",
        "data.source=local",
        f"data.path={pairs_csv(tmp_path)}",
        "stage.llm.train.max_steps=2",
    )
    assert_trained_evaluated_compared(run_dir, "llm")
    compared = [json.loads(line) for line in (run_dir / "compare.jsonl").open()]
    # Probes are asked as training saw them: the raw prompt, the completion as reference.
    assert compared[0]["input"].startswith("What is ") and compared[0]["reference"].isdigit()


def test_image_path_question_answer_parquet_trains_evaluates_and_compares(tmp_path: Path) -> None:
    path = vqa_parquet(tmp_path)
    run_dir = run(
        tmp_path / "out",
        "recipe=r1-llm-only",
        "data.source=local",
        f"data.path={path}",
        *(f"data.columns.{m}" for m in VQA_COLUMNS),
        "stage.llm.train.max_steps=2",
    )
    assert_trained_evaluated_compared(run_dir, "llm")
    compared = [json.loads(line) for line in (run_dir / "compare.jsonl").open()]
    assert compared[0]["input"] == QUESTION and compared[0]["image"].endswith(".png")


def test_an_alpaca_file_without_a_split_trains_and_is_evaluated_with_the_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = ["recipe=text-lora", "data.source=local"]
    data.append(f"data.path={write_alpaca(tmp_path / 'alpaca_en_demo.json', 40)}")
    assert main(["plan", *data]) == 0
    assert "36 train / 4 held out automatically" in capsys.readouterr().out
    run_dir = run(tmp_path / "out", *data, "stage.llm.train.max_steps=2")
    assert_trained_evaluated_compared(run_dir, "llm")


def test_a_file_too_small_to_hold_rows_out_trains_on_every_row_unevaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_alpaca(tmp_path / "few.json", 12)
    run_dir = run(tmp_path / "out", "recipe=text-lora", "data.source=local", f"data.path={path}")
    [row] = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert row["status"] == "trained" and row["eval"] == "-", row  # no held-out metric
    assert "compare: skipped" in capsys.readouterr().out
    assert not (run_dir / "compare_metrics.json").exists()
