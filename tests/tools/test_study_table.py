"""`make study-table`'s tool rewrites the study table between its markers from the newest
experiment's CSV (no training here: a CSV written as report/experiment_report.py writes it)."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.report.experiment_report import CSV_FIELDS
from tools import study_table
from tools.study_table import END, START, rewrite

ANSWER = (
    "answer: r2-vision-only and r3-two-stage are level on held-out exact match (2 seeds: 95% "
    "intervals of the differences, seed and probe noise; measured on full vs 4-bit base)"
)
PAGE = f"""# Experiments

Prose before the table, with a figure of its own: 42%.

{START}
| recipe | final stage | an old table |
| --- | --- | --- |
| r1-llm-only | llm | 27% |
{END}

Prose after the table.
"""


def _recipe_row(recipe: str, seed: int, model: str, exact: float, precision: str) -> dict:
    return {
        "recipe": recipe,
        "seed": seed,
        "model": model,
        "exact_match": exact,
        "contains": exact,
        "eval_loss": 0.1,
        "samples": 96,
        "base_precision": precision,
        "source": "stored",
        "trained": "vision: vision_tower, projector",
        "steps": 720,
        "wall_s": 60.1,
        "peak_gib": 0.05,
        "run_dir": f"../../../runs/{recipe}/2026-11-23_22-0{seed}-00",
    }


def _base_row(seed: int, exact: float) -> dict:
    """As `_csv_row(BASE, run, BASE, score)` writes it: no costs, no run folder."""
    return {
        "recipe": "base",
        "seed": seed,
        "model": "base",
        "exact_match": exact,
        "contains": exact,
        "eval_loss": None,
        "samples": 96,
        "base_precision": "full",
        "source": "stored",
    }


def _experiment(outputs: Path, time: str, rows: list[dict], *, answer: str | None) -> Path:
    folder = outputs / "experiments" / "r2-vision-only-vs-r3-two-stage" / time
    folder.mkdir(parents=True)
    with (folder / "experiment.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    if answer is not None:
        report = ["# Experiment: r2-vision-only vs r3-two-stage", "", f"**{answer}**", ""]
        (folder / "experiment.md").write_text("\n".join(report))
    return folder


ROWS = [
    _recipe_row("r2-vision-only", 0, "vision", 0.9375, "full"),
    _recipe_row("r2-vision-only", 1, "vision", 0.9479, "full"),
    _recipe_row("r3-two-stage", 0, "llm", 0.9167, "4-bit"),
    _recipe_row("r3-two-stage", 1, "llm", 0.9375, "4-bit"),
    _base_row(0, 0.0521),
    _base_row(1, 0.0521),
]


def test_the_table_between_the_markers_is_rewritten_from_the_newest_experiment(tmp_path):
    outputs, page = tmp_path / "outputs", tmp_path / "experiments.md"
    page.write_text(PAGE)
    older = [_recipe_row("r2-vision-only", 0, "vision", 0.5, "full"), _base_row(0, 0.1)]
    _experiment(outputs, "2026-11-22_10-00-00", older, answer="answer: an older one")
    newest = _experiment(outputs, "2026-11-23_22-12-17", ROWS, answer=ANSWER)
    # An older folder written later (copied, touched) is still the older experiment.
    os.utime(outputs / "experiments/r2-vision-only-vs-r3-two-stage/2026-11-22_10-00-00")

    read = rewrite(page, outputs, commit_text="abc1234", platform="a CPU (AVX2, 2 threads)")

    assert read == newest / "experiment.csv"
    text = page.read_text()
    before, block, after = re.split(f"{re.escape(START)}\n|{re.escape(END)}", text)
    assert before + START + "\n" == PAGE.split(START)[0] + START + "\n"
    assert after == PAGE.split(END)[1]  # nothing outside the markers moved
    lines = block.splitlines()
    assert lines[:5] == [
        "| recipe | final stage | held-out exact match, mean [min..max] over seeds 0, 1 |",
        "| --- | --- | --- |",
        "| base (untrained) | - | 5% |",
        "| r2-vision-only | vision | 94% [94..95%] |",
        "| r3-two-stage | llm | 93% [92..94%] (4-bit base) |",
    ]
    assert ANSWER in lines
    assert "an older one" not in text and "an old table" not in text
    assert (
        "measured 2026-11-23 at commit abc1234 on a CPU (AVX2, 2 threads) (`make study-table`, "
        "from `experiments/r2-vision-only-vs-r3-two-stage/2026-11-23_22-12-17/`)"
    ) in lines

    # A second run rewrites the same block: the page does not grow.
    rewrite(page, outputs, commit_text="abc1234", platform="a CPU (AVX2, 2 threads)")
    assert page.read_text() == text


def test_the_measured_line_names_this_checkouts_commit_and_this_machine(tmp_path):
    outputs, page = tmp_path / "outputs", tmp_path / "experiments.md"
    page.write_text(PAGE)
    _experiment(outputs, "2026-11-23_22-12-17", ROWS, answer=None)  # no experiment.md
    rewrite(page, outputs)
    measured = next(line for line in page.read_text().splitlines() if line.startswith("measured"))
    assert re.match(
        r"measured 2026-11-23 at commit [0-9a-f]{7,}( \+ changes)? on .+ \(torch CPU capability "
        r"\w+, \d+ threads?\), torch [\d.]+.*, transformers .*, trl .*, peft .*, bitsandbytes ",
        measured,
    ), measured
    assert "answer" not in page.read_text()


def test_no_experiment_folder_is_one_error_and_exit_code_2(tmp_path, capsys):
    page = tmp_path / "experiments.md"
    page.write_text(PAGE)
    with pytest.raises(RecipeError, match="no experiment under"):
        rewrite(page, tmp_path / "outputs")
    argv = ["--outputs", str(tmp_path / "outputs"), "--page", str(page)]
    assert study_table.main(argv) == 2
    assert capsys.readouterr().err.startswith("error: no experiment under")
    assert page.read_text() == PAGE


def test_a_page_without_the_markers_is_refused(tmp_path):
    outputs, page = tmp_path / "outputs", tmp_path / "experiments.md"
    page.write_text("# Experiments\n\nno markers\n")
    _experiment(outputs, "2026-11-23_22-12-17", ROWS, answer=ANSWER)
    with pytest.raises(RecipeError, match="markers"):
        rewrite(page, outputs, commit_text="abc1234", platform="here")
    assert page.read_text() == "# Experiments\n\nno markers\n"
